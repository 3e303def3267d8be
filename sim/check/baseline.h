#pragma once
// A check baseline: what `tp-plan check` compares a plan's prediction against, in users' CI.
//
//   StepReport r = make_report(prog, cluster, params, costs, timeline, kAllOps);
//   CheckBaseline now = baseline_from_report(r);
//   write_baseline(now, "plan-baseline.json");          // tp-plan check ... --update
//   CheckBaseline base = read_baseline("plan-baseline.json");   // tptune::Error naming the file when bad
//
// The file (JSON, format "tptune-check-baseline", version 1) holds the headline numbers (step time, tokens/s per GPU,
// peak memory, whether it fits), the step time's breakdown (compute, exposed TP and DP communication: they add up
// to the step time), the memory breakdown, the total time per op class (gemm, attention, all_gather(tp), ...) and
// per op (every op of the Program's template: "layers.*.attention.wq.fwd", its count per step and total time), so
// that a later check can say which ops explain a change, and the version stamp "tptune" of the build that wrote it
// (plans/util/version.h; `written_by`, sim/check/tool_build.h), so that a check can say when the baseline's predictions
// came from another tptune. A pipeline-parallel plan's (StepReport::pipeline.pp > 1, sim/pipeline/step.h) adds the
// setup key "pp" ("8 (Interleaved1F1B, 2 stages per rank, 16 microbatches of 1)"), the breakdown term
// "pipeline_bubble" (the rest of the step: its last rank's idle time, so that the terms still add up to the step time),
// and in place of the ops (the microbatch Program's are the whole model's, not a rank's) each stage's actions of the
// step: op "stage 3", phase "forward" | "backward" | "input gradient" | "weight gradient", kind "pipeline F" | ... (the
// op classes), count microbatches x gradient_accumulation_steps, total time the sum of their durations on the
// stage's rank; its peak memory is that of the rank with the highest. Unknown keys are ignored (a newer tptune may add
// some); a file without the stamp (written before it existed) reads with no `written_by`; missing or mistyped keys are
// errors naming the file and the key.
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sim/check/tool_build.h"
#include "sim/simulate.h"

namespace tptune {

// make_report(..., kAllOps) summarises every op of the template, as a baseline needs.
inline constexpr size_t kAllOps = static_cast<size_t>(-1);

// The setup keys baseline_from_report() writes only for runs that use them (HSDP, gradient accumulation, context and
// pipeline parallelism): a baseline without one ran at 1, so compare() reads an absent key as "1" and lists
// "pp 1 -> 2 (1F1B, ...)" among the setup changes.
inline constexpr std::string_view kSetupKeysAbsentAtOne[] = {"dp_replicate", "gradient_accumulation_steps", "cp", "pp"};

struct BaselineOp {
  std::string name;   // "layers.*.attention.wq.fwd"
  std::string phase;  // forward | backward | ...
  std::string kind;   // gemm | attention | all_gather(tp) | ...
  std::string stream;
  int64_t count = 0;    // instances per step
  double total_ms = 0;  // count x one instance's time
  std::string key() const { return name + " [" + phase + "]"; }
};

struct CheckBaseline {
  // What was predicted (for the reader, and to say what changed when the plan itself changed).
  std::map<std::string, std::string> setup;  // model, gpu, cluster, plan, tp, dp, float8, async_tp, ...
  double step_time_ms = 0;
  double tokens_per_second_per_gpu = 0;
  double peak_memory_gib = 0;
  double memory_capacity_gib = 0;
  bool fits_in_memory = true;
  std::map<std::string, double> breakdown_ms;  // compute, exposed_tp_comm, exposed_dp_comm
  std::map<std::string, double> memory_gib;    // master_params, gradients, optimizer, activations, ...
  std::map<std::string, double> kind_ms;       // total time per op class
  std::vector<BaselineOp> ops;                 // every template op, longest total first
  // The tptune that predicted it: this_build() from baseline_from_report, the file's stamp from baseline_from_json
  // (nullopt when it has none).
  std::optional<ToolBuild> written_by;
};

CheckBaseline baseline_from_report(const StepReport& r);

// The baseline's JSON, with `written_by` as its "tptune" stamp when set.
nlohmann::json to_json(const CheckBaseline& b);
// `where` names the source in errors ("plan-baseline.json").
CheckBaseline baseline_from_json(const nlohmann::json& j, const std::string& where);

// Reads a baseline file; tptune::Error "FILE: ..." when it is missing, not JSON, or not a baseline.
CheckBaseline read_baseline(const std::string& path);
// Writes it (indented JSON, stamped with this build: plans/util/version.h) whole or not at all
// (plans/util/output_file.h): a failure leaves the previous baseline as it was; tptune::Error when the file cannot be
// written.
void write_baseline(const CheckBaseline& b, const std::string& path);

}  // namespace tptune
