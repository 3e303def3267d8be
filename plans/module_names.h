#pragma once
// The module FQNs of a model, as patterns, and the check that every entry of a plan names at least one of them.
//
// A plan entry whose pattern matches no module does nothing, silently, in torch's parallelize_module too; tptune
// refuses it in a user's plan and suggests the nearest module names (edit distance):
//   plan.yaml:7: modules.layers.*.attention.wqq: matches no module of the model; did you mean layers.*.attention.wq?
// The presets are exempt: they carry torchtitan's w3 entry for every model, which a gelu MLP does not have.

#include <string>
#include <vector>

#include "plans/model.h"
#include "plans/plan.h"

namespace tptune {

// Every module of the model, blocks written `layers.*` ("tok_embeddings", "layers", "layers.*",
// "layers.*.attention", "layers.*.attention.wq", ..., "norm", "output"), in model order.
std::vector<std::string> module_patterns(const Model& m);

// True when `pattern` (`*` = one name) matches a module of `m`; a layer index must be below n_layers.
bool matches_some_module(const std::string& pattern, const Model& m);

// The module patterns nearest to `pattern` (smallest edit distance over the whole name or its last component), at
// most `max` of them; empty when none is close.
std::vector<std::string> nearest_modules(const std::string& pattern, const Model& m, size_t max = 3);

// `plan` without the entries that match no module of `m` (a preset's w3 entry on a gelu MLP): what to write to a file
// that a user will load again (tp-plan search --out-plan).
Plan without_unmatched_modules(Plan plan, const Model& m);

// Throws tptune::Error "<source>:<line>: modules.<pattern>: matches no module ..." for the first entry of a user plan
// that matches nothing. Plans whose source is "preset:..." are not checked.
void check_plan_modules(const Plan& plan, const Model& m);

}  // namespace tptune
