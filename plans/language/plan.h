#pragma once
// Parallel styles and plans: the `parallelize_module` plan of torch.distributed.tensor.parallel, as data.
//
// A ParallelStyle carries the layouts of torch's style classes, with their defaults:
//   colwise               input R -> desired R, output S(-1), use_local_output true.
//                         Linear: weight (out, in) sharded S(0) on out features. Embedding: weight sharded on dim.
//   rowwise               input S(-1) -> desired S(-1), output R, use_local_output true.
//                         Linear: weight sharded S(1) on in features, local product P, redistributed to output.
//                         Embedding: weight sharded on vocab rows, desired input R, local lookup P.
//   sequence_parallel     params replicated; input wrapped/redistributed to S(1); output S(1), use_local_output false.
//   prepare_module_input  input_layouts -> desired_input_layouts, use_local_output false. Touches no parameters.
//   no_parallel           replicated parameters, replicated compute, plain tensors.
// With float8 tensorwise, colwise/rowwise/prepare_module_input become torchao's Float8ColwiseParallel,
// Float8RowwiseParallel and PrepareFloat8ModuleInput: the input is cast to e4m3 before it is redistributed.
//
// A Plan maps FQN patterns (`*` matches exactly one path component) to styles, plus the step-wide toggles.
// Canonical YAML form (load_plan / save_plan round-trip it):
//   tp_degree: 8
//   dp_shard: 1
//   dp_replicate: 1           # HSDP: replicas of the dp_shard-sharded model (written only when > 1)
//   ep_degree: 4              # expert parallelism of a mixture of experts (written only when > 1)
//   float8: none              # none | tensorwise | rowwise
//   async_tp: false
//   loss_parallel: true
//   activation_checkpointing: none
//   ac_layers: 40             # AC on the first 40 blocks only (written only when set)
//   local_batch_size: 1
//   gradient_accumulation_steps: 4  # microbatches per optimizer step (written only when > 1)
//   seq_len: 4096             # tokens per sequence the plan was chosen for (written only when set)
//   modules:
//     tok_embeddings: {style: rowwise, input_layouts: R, output_layouts: S(1)}
//     layers.*.attention: {style: prepare_module_input, input_layouts: S(1), desired_input_layouts: R}
//     ...

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "plans/language/config.h"
#include "plans/language/placement.h"
#include "plans/language/plan_toggles.h"

namespace tptune {

// Which framework applies the plan, and so where conversions, reductions and recomputation happen:
//   dtensor          the seed: torch's parallelize_module with DTensor styles (any user's own plan), FSDP2 only
//                    when dp_shard > 1, torch.utils.checkpoint with early stop.
//   torchtitan-0.3   torchtitan 0.3.0 (models/common/decoder_sharding.py, models/llama3/sharding.py applied by
//                    parallelize_llama on the spmd_types backend): activations converted once per attention/MLP
//                    boundary, a fused wqkv, the lm_head under ChunkedLossWrapper, loss parallel always on, FSDP
//                    always applied, checkpoint without early stop, float8 rowwise recipes only.
// The lowering never asks which framework it is: framework_defaults() turns the name into the data below.
enum class Framework { dtensor, torchtitan_0_3 };
std::string_view to_string(Framework f);
Framework parse_framework(std::string_view s, const std::string& where);

enum class StyleKind { colwise, rowwise, sequence_parallel, prepare_module_input, no_parallel };
std::string_view to_string(StyleKind k);

struct ParallelStyle {
  StyleKind kind = StyleKind::no_parallel;
  Placement input_layout = Placement::R();          // what a plain input tensor is declared to be
  Placement desired_input_layout = Placement::R();  // what the module computes on
  Placement output_layout = Placement::R();         // colwise/rowwise/sequence_parallel only
  bool use_local_output = false;

  // The torch defaults of each style (see the header comment).
  static ParallelStyle colwise();
  static ParallelStyle rowwise();
  static ParallelStyle sequence_parallel();
  static ParallelStyle prepare_module_input(Placement input, Placement desired);
  static ParallelStyle no_parallel();
  // The style of kind `k` with torch's constructor defaults; prepare_module_input has no defaults (its layouts are
  // required) and gives no_parallel().
  static ParallelStyle defaults(StyleKind k);
  bool operator==(const ParallelStyle&) const = default;
};
// Canonical one-line form: "rowwise(input R, output S(1), local)".
std::string to_string(const ParallelStyle& s);

struct PlanEntry {
  std::string pattern;  // FQN pattern, `*` matches one component
  ParallelStyle style;
  int line = 0;  // line in the plan file it came from (0 when built in code)
  bool operator==(const PlanEntry& o) const { return pattern == o.pattern && style == o.style; }
};

// The module plan and the framework's data, over the step-wide toggles (plans/language/plan_toggles.h).
struct Plan : PlanToggles {
  std::string family = "custom";  // vanilla | sequence_parallel | custom (user file) — for reports
  std::string source;             // the file it was loaded from, or "preset:<name>"
  std::vector<PlanEntry> modules;

  // ---- What a framework changes, as data the one lowering reads (framework_defaults() fills them) -------------
  Framework framework = Framework::dtensor;
  // q, k, v as one `attention.wqkv` Linear of (n_heads + 2 n_kv_heads) x head_dim outputs, laid out per kv group
  // ([q heads of the group, k, v]) so that a colwise shard holds whole groups; its output is split into contiguous
  // q, k, v (torchtitan's FusedQKVLinear: split + .contiguous(), a copy).
  bool fused_qkv = false;
  // The vocabulary projection's module name: `output` (the seed) or `lm_head` (torchtitan 0.3).
  std::string output_fqn = "output";
  // ChunkedLossWrapper(num_chunks): the lm_head and the cross-entropy run per sequence chunk of the prepared
  // (replicated) hidden state, each chunk's backward right after its forward; 1 = one loss over the whole sequence.
  // 0: the framework's default (dtensor 1; torchtitan 0.3 8, ChunkedLossWrapper's default in the llama3 recipes).
  int loss_chunks = 0;
  // fully_shard wraps every block even at dp_shard 1 (parallelize_llama always calls apply_fsdp_to_decoder), so
  // FSDP's post-backward all-reduces Partial gradients of replicated parameters. Without FSDP (DTensor at
  // dp_shard 1) they stay Partial until the optimizer step reads them.
  bool fsdp_always = false;
  // torch.utils.checkpoint's early_stop: recompute stops once backward has what it needs. torchtitan 0.3 passes
  // early_stop=False, so the whole checkpointed block re-runs (with full AC, the block's last reduce-scatter too).
  bool ac_early_stop = true;
  // Selective AC saves the outputs of functional reduce_scatter_tensor. torchtitan 0.3's spmd_types backend issues
  // c10d reduce-scatters the policy does not list, so there they are recomputed.
  bool ac_saves_reduce_scatter = true;
  // torchtitan's trainer clips gradients every step (Trainer.train_step: dist_utils.clip_grad_norm_ with
  // training.max_norm, default 1.0): a `grad_norm` segment before the optimizer (plans/lower/lower.cc, grad_norm()).
  // The seed's DTensor plans are a user's own training loop, which need not clip.
  bool clip_grad_norm = false;
  // The attention kernel the framework's models call whatever torch would choose
  // (plans/language/backends/sdpa_backend.h): torchtitan 0.3's models run FlexAttention (model_registry's attn_backend
  // default "flex"; no SDPA for language models); auto_ for the seed's DTensor plans, whose attention is torch's
  // scaled_dot_product_attention.
  SdpaBackend attention_kernel = SdpaBackend::auto_;
  // Where each value came from, for reports: key (local_batch_size, activation_checkpointing, ...) -> "plan file
  // FILE:LINE" | "config FILE" | "option --x" | "preset" | "default". Not part of equality.
  std::map<std::string, std::string> provenance;
  // The keys the plan file stated (load_plan fills it); the tools take every other value from the config.
  std::set<std::string> stated;

  // The style of module `fqn`: the last entry whose pattern matches wins (as later keys of a plan dict would);
  // nullptr when no entry matches (the module is not parallelized: plain tensors, replicated parameters).
  const ParallelStyle* style_for(const std::string& fqn) const;
  int chunks() const { return loss_chunks > 1 ? loss_chunks : 1; }
  // Sequences per optimizer step over all data-parallel ranks (torchtitan's training.global_batch_size):
  // local_batch_size x dp_shard x dp_replicate x gradient_accumulation_steps; tptune::Error when it passes int64.
  int64_t global_batch_size() const;
  bool operator==(const Plan& o) const;
};

bool fqn_matches(const std::string& pattern, const std::string& fqn);

// A plan's activation checkpointing as reports print it: the policy ("none", "full"), and with ac_layers = k (Plan::
// ac_layers) "full on the first 40 of 126 blocks" ("... of 126" left out when n_layers is 0: not known), "full on all
// 126 blocks" when k >= n_layers.
std::string ac_text(ActivationCheckpointing ac, int64_t ac_layers, int64_t n_layers = 0);

// The data of a framework (see Framework): sets framework, fused_qkv, output_fqn, loss_chunks (when 0: torchtitan 0.3
// its llama3 recipes' 8, dtensor 1), fsdp_always, ac_early_stop, ac_saves_reduce_scatter and, for torchtitan
// 0.3, loss_parallel (always on under TP).
void apply_framework(Plan& plan, Framework f);
// What a framework refuses (torchtitan 0.3: float8 tensorwise, loss parallel off under TP); tptune::Error naming the
// plan's source.
void check_framework(const Plan& plan);
// The pipeline keys (pp_schedule, pp_microbatch_size, pp_stages_per_rank, pp_first_stage_less_layers,
// pp_last_stage_less_layers, pp_split) act only with pp_degree > 1, the context-parallel ones (cp_rotate_method,
// cp_load_balance) only with cp_degree > 1: a plan that states one (Plan::provenance holds its origin: the plan file's
// line, the option) while its degree is 1 is refused, as nothing would apply it. tptune::Error, one line naming the
// first such key's origin, its value and the degree's origin:
//   "option --pp-schedule: pp_schedule DualPipeV: needs pp_degree > 1 (--pp N, or pp_degree in the plan file);
//    pp_degree is 1 (option --pp)"
// Values no user stated (a preset's, the defaults, a search candidate's) are never refused. load_plan() runs it on the
// file alone, the tools' resolve_plan() on the plan with its options.
void check_parallel_keys(const Plan& plan);

// Presets. `vanilla`: the seed plan (apply_tp without sequence parallel); `sequence_parallel`: torchtitan's default.
// The toggles (PlanToggles), provenance, framework and loss_chunks are taken from `base`;
// with base.framework torchtitan-0.3 the presets are torchtitan 0.3's llama3 sharding with enable_sp false / true.
Plan preset_plan(const std::string& name, const Plan& base);
std::vector<std::string> plan_preset_names();

// Plan YAML I/O. load_plan throws tptune::Error "<file>:<line>: <key>: expected ..." on bad input.
Plan load_plan(const std::string& path);
Plan load_plan_string(const std::string& yaml, const std::string& name = "<string>");
std::string plan_to_yaml(const Plan& plan);
// Writes plan_to_yaml(plan) to `path` whole or not at all (plans/util/output_file.h).
void save_plan(const Plan& plan, const std::string& path);

}  // namespace tptune
