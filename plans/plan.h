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
//   float8: none              # none | tensorwise | rowwise
//   async_tp: false
//   loss_parallel: true
//   activation_checkpointing: none
//   local_batch_size: 1
//   modules:
//     tok_embeddings: {style: rowwise, input_layouts: R, output_layouts: S(1)}
//     layers.*.attention: {style: prepare_module_input, input_layouts: S(1), desired_input_layouts: R}
//     ...

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "plans/config.h"
#include "plans/placement.h"

namespace tptune {

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

struct Plan {
  std::string family = "custom";  // vanilla | sequence_parallel | custom (user file) — for reports
  std::string source;             // the file it was loaded from, or "preset:<name>"
  int tp_degree = 1;
  int dp_shard = 1;
  Float8Recipe float8 = Float8Recipe::none;
  bool async_tp = false;
  bool loss_parallel = false;
  ActivationCheckpointing activation_checkpointing = ActivationCheckpointing::none;
  int64_t local_batch_size = 1;
  std::vector<PlanEntry> modules;

  // The style of module `fqn`: the last entry whose pattern matches wins (as later keys of a plan dict would);
  // nullptr when no entry matches (the module is not parallelized: plain tensors, replicated parameters).
  const ParallelStyle* style_for(const std::string& fqn) const;
  bool operator==(const Plan& o) const;
};

bool fqn_matches(const std::string& pattern, const std::string& fqn);

// Presets. `vanilla`: the seed plan (apply_tp without sequence parallel); `sequence_parallel`: torchtitan's default.
// The toggles (tp, float8, async, loss parallel, AC, local batch) are taken from `base`.
Plan preset_plan(const std::string& name, const Plan& base);
std::vector<std::string> plan_preset_names();

// Plan YAML I/O. load_plan throws tptune::Error "<file>:<line>: <key>: expected ..." on bad input.
Plan load_plan(const std::string& path);
Plan load_plan_string(const std::string& yaml, const std::string& name = "<string>");
std::string plan_to_yaml(const Plan& plan);
void save_plan(const Plan& plan, const std::string& path);

}  // namespace tptune
