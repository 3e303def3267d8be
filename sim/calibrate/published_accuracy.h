#pragma once
// How well the simulator predicts the public record: `tp-plan accuracy --published DIR [--calibration FILE]`.
//
//   auto sources = load_published_record(dir);
//   PreparedRecord rec = prepare_published(sources);
//   PublishedAccuracy a = published_accuracy(sources, rec, params_for);   // params_for(gpu) -> CostParams
//
// Errors are signed relative errors (predicted - measured) / measured. Per source, over its predicted runs: mean and
// max |error| of tokens/s per GPU, the signed mean, Kendall tau (tau-a, sim/calibrate/accuracy.h) of predicted vs
// measured tokens/s (null below two runs), and mean / max |error| of peak memory over the runs that measured it.
// Ratios: the measured ratio of two runs' tokens/s against the predicted one; difference = predicted - measured.
// Overall: the runs and sources predicted, mean and max |error| over every run.
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sim/calibrate/published_predict.h"
#include "sim/calibrate/published_record.h"
#include "sim/cost/cost_params.h"
#include "sim/gpu_spec.h"

namespace tptune {

struct PublishedRunResult {
  std::string source, id, plan, gpu;
  double measured = 0, predicted = 0, error = 0;  // tokens/s per GPU
  std::optional<double> measured_memory_gib;
  double predicted_memory_gib = 0;
  std::optional<double> memory_error;
  std::optional<double> measured_mfu;
  double predicted_mfu = 0;
};

// Error figures of a set of runs (a source, or every run).
struct ErrorSummary {
  int runs = 0;
  double mean_abs = 0, max_abs = 0, signed_mean = 0;
  std::optional<double> kendall_tau;
  int memory_runs = 0;
  double memory_mean_abs = 0, memory_max_abs = 0;
};

struct PublishedSourceResult {
  std::string id;
  ErrorSummary summary;
};

struct PublishedRatioResult {
  std::string source, name, numerator, denominator;
  double measured = 0;
  std::optional<double> predicted;  // null when a run of it was not predicted
  std::optional<double> difference;
};

struct NotExpressible {
  std::string source, id, reason;
};

struct PublishedAccuracy {
  std::vector<PublishedRunResult> runs;
  std::vector<PublishedSourceResult> sources;  // those with predicted runs, in folder order
  std::vector<PublishedRatioResult> ratios;
  std::vector<NotExpressible> not_expressible;
  std::vector<NotPredicted> not_predicted;
  ErrorSummary overall;
  std::vector<std::string> terms;  // where the parameters came from (calibration terms), for the reports
};

using CostParamsFor = std::function<CostParams(const GpuSpec&)>;

// The predictions already made (one per rec.runs, in order) summarised.
PublishedAccuracy published_accuracy(const std::vector<PublishedSource>& sources, const PreparedRecord& rec,
                                     const std::vector<PublishedPrediction>& predictions);
// Predicts every prepared run with params_for(its GPU) and summarises.
PublishedAccuracy published_accuracy(const std::vector<PublishedSource>& sources, const PreparedRecord& rec,
                                     const CostParamsFor& params_for);
// One run's prediction against what its source measured.
PublishedRunResult run_result(const PreparedRun& run, const PublishedPrediction& prediction);
// The summary of some runs' results (tau over them as one series).
ErrorSummary summarize_errors(const std::vector<const PublishedRunResult*>& runs);
// Per source id of `ids` (in that order) with runs among `results`, their summary.
std::vector<PublishedSourceResult> summarize_sources(const std::vector<PublishedRunResult>& results,
                                                     const std::vector<std::string>& ids);

std::string published_accuracy_text(const PublishedAccuracy& a);
// {"runs": [{"source", "id", "plan", "gpu", "measured_tokens_per_second_per_gpu",
// "predicted_tokens_per_second_per_gpu",
//   "error", "measured_peak_memory_gib" (null), "predicted_peak_memory_gib", "memory_error" (null), "measured_mfu"
//   (null), "predicted_mfu"}],
//  "sources": [{"id", "runs", "mean_abs_error", "max_abs_error", "signed_mean_error", "kendall_tau" (null),
//   "memory_runs", "memory_mean_abs_error", "memory_max_abs_error"}],
//  "ratios": [{"source", "name", "numerator", "denominator", "measured", "predicted" (null), "difference" (null)}],
//  "not_expressible": [{"source", "id", "reason"}], "not_predicted": [{"source", "id", "error"}],
//  "overall": {"runs", "sources", "mean_abs_error", "max_abs_error"}, "terms": [...]}
// Errors are fractions (0.05 = 5 %).
nlohmann::json published_accuracy_json(const PublishedAccuracy& a);

// The CI check of the committed figures: `committed` is a published_accuracy_json() (its "sources"). A current
// source's mean or max |error| or memory max |error| larger by more than 0.005 (0.5 percentage points), a Kendall tau
// lower by more than 0.01, fewer runs predicted, or a committed source missing: one line each, naming the source and
// both figures. Empty when nothing is worse. `committed_name` names the file in the lines.
std::vector<std::string> figures_worse_than(const PublishedAccuracy& a, const nlohmann::json& committed,
                                            const std::string& committed_name);

}  // namespace tptune
