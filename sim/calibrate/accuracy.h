#pragma once
// How well the cost model predicts measured runs: `tp-plan accuracy PROFILE.json... [--calibration C]`.
//
//   AccuracyReport r = accuracy(load all profiles, gpu_preset("cpu"), params);
//
// Per profile (one plan's run), its Program is lowered again (sim/calibrate/measurements.h) and simulated on one node
// of `ranks` devices:
//   step         predicted overlapped step (the timeline's step time) vs the profile's step_wall_us median; for a
//                single-GPU profile (rank 0's compute at the local shapes of tp N, collectives not run: no step) the
//                predicted serialized sum of its compute ops vs its compute_wall_us (the compute-only step)
//   serialized   predicted sum of every executed op's duration vs the sum of the op medians (the serialized run);
//                the same over the compute ops only (`compute`). Ops timed alone are predicted on the serialized
//                cluster (sim/calibrate/fit.h: no oversubscription share), the overlapped step on the overlapped one.
//   per op       every executed op: predicted vs measured median; MAPE and max relative error, overall, per class
//                (gemm, attention, memory_bound, collective: the classes calibrate fits) and per kind of memory-bound
//                op (elementwise, embedding, cross_entropy, cast_fp8, optimizer)
//   ranking      Kendall tau (tau-a: (concordant - discordant) / pairs) of predicted vs measured step times over the
//                profiles; null with fewer than two profiles
// Errors are signed relative errors (predicted - measured) / measured.

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sim/calibrate/measurements.h"
#include "sim/cost/cost_params.h"
#include "sim/gpu_spec.h"

namespace tptune {

struct StepAccuracy {
  std::string profile;
  std::string plan;  // "sequence_parallel tp 2 float8 tensorwise async"
  double predicted_ms = 0, measured_ms = 0, error = 0;
  double predicted_serial_ms = 0, measured_serial_ms = 0, serial_error = 0;
  // The serialized sum of the compute ops alone (no collectives: a collective timed alone also waits for the ranks
  // still computing, which the model does not predict): what the fitted compute model is answerable for.
  double predicted_compute_ms = 0, measured_compute_ms = 0, compute_error = 0;
  // A pipeline's profile: each pp rank's busy time (its actions' compute) and end, predicted and measured.
  struct PipelineRank {
    int pp_rank = 0;
    double predicted_busy_ms = 0, measured_busy_ms = 0, predicted_end_ms = 0, measured_end_ms = 0;
  };
  std::vector<PipelineRank> pipeline_ranks;
  // A single-GPU profile: the tp N of its local shapes (0: not one), and its skipped collectives that were not seeded
  // (an older profile: the compute downstream of them ran on zeros).
  int local_shapes_of_tp = 0, unseeded_collectives = 0;
};

struct ClassAccuracy {
  std::string op_class;
  int samples = 0;
  double mape = 0, max_error = 0;
  double predicted_ms = 0, measured_ms = 0;  // sums over the class's ops (of every profile): where a step's error is
};

struct OpAccuracy {
  std::string profile, name, op_class;
  double predicted_us = 0, measured_us = 0, error = 0;
};

struct AccuracyReport {
  std::vector<StepAccuracy> steps;
  ClassAccuracy per_op;                     // all ops
  std::vector<ClassAccuracy> classes;       // gemm, attention, memory_bound, collective
  std::vector<ClassAccuracy> memory_kinds;  // memory_bound by kind: elementwise, embedding, ..., optimizer
  std::vector<OpAccuracy> worst_ops;        // the 10 largest |error|, worst first
  std::vector<OpAccuracy> ops;              // every executed op of every profile, in profile and execution order
  double step_mape = 0, step_max_error = 0;
  std::optional<double> kendall_tau;
  std::vector<std::string> terms;  // where the parameters came from
};

// Profiles only (bench files have no steps: tptune::Error naming the file).
AccuracyReport accuracy(const std::vector<Measurements>& profiles, const GpuSpec& device, const CostParams& c);
// tau-a of two equally long series; nullopt for fewer than two.
std::optional<double> kendall_tau(const std::vector<double>& a, const std::vector<double>& b);

std::string accuracy_text(const AccuracyReport& r);
// {"steps": [{"profile", "plan", "predicted_ms", "measured_ms", "error", "predicted_serialized_ms",
//   "measured_serialized_ms", "serialized_error", "predicted_compute_ms", "measured_compute_ms", "compute_error",
//   single-GPU profiles: "local_shapes_of_tp", "unseeded_collectives"}],
//   "per_op": {"mape", "max_error", "samples"},
//  "per_class": {CLASS: {"mape", "max_error", "samples", "predicted_ms", "measured_ms"}}, "per_memory_kind": {KIND:
//  the same}, "step": {"mape",
//  "max_error"}, "kendall_tau", "terms", "worst_ops": [{"profile", "name", "class", "predicted_us", "measured_us",
//  "error"}], "ops": [same, every op]}
nlohmann::json accuracy_json(const AccuracyReport& r);

}  // namespace tptune
