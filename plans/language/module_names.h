#pragma once
// The module FQNs of a model, as patterns, and the check that every entry of a plan names at least one of them.
//
// A plan entry whose pattern matches no module does nothing, silently, in torch's parallelize_module too; tptune
// refuses it in a user's plan and suggests the nearest module names (edit distance):
//   plan.yaml:7: modules.layers.*.attention.wqq: matches no module of the model; did you mean layers.*.attention.wq?
// The presets are exempt: they carry torchtitan's w3 entry for every model, which a gelu MLP does not have.
//
// The names depend on the plan's framework data (Plan::fused_qkv, Plan::output_fqn): the seed's DTensor model has
// attention.{wq,wk,wv} and `output`; torchtitan 0.3's Llama3Model has one fused attention.wqkv (FusedQKVLinear) and
// `lm_head` (torchtitan/models/llama3/__init__.py, _build_llama3_layers with fuse_qkv=True;
// Llama3Model.Config.lm_head). The overloads without a plan name the seed's modules.

#include <string>
#include <vector>

#include "plans/language/plan.h"
#include "plans/model/model.h"

namespace tptune {

// Every module of the model, blocks written `layers.*` ("tok_embeddings", "layers", "layers.*",
// "layers.*.attention", "layers.*.attention.wq", ..., "norm", "output"), in model order.
std::vector<std::string> module_patterns(const Model& m);
std::vector<std::string> module_patterns(const Model& m, const Plan& framework);

// True when `pattern` (`*` = one name) matches a module of `m`; a layer index must be below n_layers.
bool matches_some_module(const std::string& pattern, const Model& m);
bool matches_some_module(const std::string& pattern, const Model& m, const Plan& framework);

// The module patterns nearest to `pattern` (smallest edit distance over the whole name or its last component), at
// most `max` of them; empty when none is close.
std::vector<std::string> nearest_modules(const std::string& pattern, const Model& m, size_t max = 3);
std::vector<std::string> nearest_modules(const std::string& pattern, const Model& m, const Plan& framework,
                                         size_t max = 3);

// `plan` without the entries that match no module of `m` with the plan's own framework names (a preset's w3 entry on a
// gelu MLP): what to write to a file that a user will load again (tp-plan search --out-plan). A torchtitan-0.3 plan
// keeps its wqkv and lm_head entries.
Plan without_unmatched_modules(Plan plan, const Model& m);

// Throws tptune::Error "<source>:<line>: modules.<pattern>: matches no module ..." for the first entry of a user plan
// that matches nothing (with the plan's framework names). Plans whose source is "preset:..." are not checked.
void check_plan_modules(const Plan& plan, const Model& m);

// The lowering emits one block and a repeat count (plans/program/program.h), styled by layer 0's entries: a plan that
// styles some layers differently from the others would be lowered, simulated and run with layer 0's styles on every
// layer. So every block module must have the same style in every layer: `layers.*.x`, or an entry for each layer with
// one style, are fine; `layers.1.feed_forward.w1: no_parallel` beside `layers.*.feed_forward.w1: colwise` throws
//   plan.yaml:9: modules.layers.1.feed_forward.w1: plans that style some layers differently are not supported: the
//   Program repeats one block (layer 1's feed_forward.w1 is no_parallel(...), layer 0's colwise(...))
// naming the entry that decides the differing layer's style. Presets are checked too (they use `*` only).
void check_uniform_layers(const Plan& plan, const Model& m);

}  // namespace tptune
