#pragma once
// Fitting cost parameters to the public record: `tp-plan calibrate --published DIR --gpu PRESET --fit NAME,...`.
//
//   PreparedRecord rec = prepare_published(sources);                  // sim/calibrate/published_predict.h
//   PublishedFit f = fit_published(rec, {"h100-sxm", {"gemm_efficiency", "memory_bound_efficiency"}, 0.01});
//
// The fitted parameters are named as in the cost-parameter table (sim/cost/cost_param_fields.h, generated from
// sim/cost/cost_param_list.h): any real-valued field of it plugs in by name, with the table's bounds. The runs are the
// prepared (expressible, predictable) runs whose GPU is PRESET; the priors are that GPU's preset values
// (device_cost_params). Objective, over the parameters p (the others stay at their priors):
//   mean over runs of ln(predicted / measured tokens/s)^2
//   + mean over the runs that measured peak memory of ln(predicted / measured memory)^2
//   + lambda x sum over the fitted parameters of ln(p / prior)^2
// Search: coordinate search in ln p on a shrinking grid: from the priors, each parameter in turn tries ln p +- step
// (clamped to its bounds) and keeps a move that lowers the objective; a pass without a move halves the step, from ln 2
// down to 1e-4. Deterministic (the same inputs give the same values bit for bit); derivative-free; bounded. In log
// space a parameter needs a positive prior and a positive range: the bounds are the table's, narrowed to [prior /
// 1000, prior x 1000].
// The runs fitted are the preset's runs without pipeline parallelism: the pipeline runs are held out (compared by
// `tp-plan accuracy --published`, never fitted to).
// Leave-one-source-out: for each source with runs on PRESET, the fit on the other sources' runs predicts its runs.
// Errors (tptune::Error, one line): an unknown or integral name ("--fit NAME: ..."), a name given twice, a prior that
// is not positive or lies outside the table's bounds, no run on PRESET (listing the GPUs the record has).
#include <functional>
#include <string>
#include <vector>

#include "sim/calibrate/calibration.h"
#include "sim/calibrate/published_accuracy.h"
#include "sim/calibrate/published_predict.h"
#include "sim/cost/cost_params.h"

namespace tptune {

struct PublishedFitOptions {
  std::string gpu;                 // the GPU preset whose runs are fitted
  std::vector<std::string> names;  // cost parameters to fit
  double lambda = 0.01;            // weight of the pull toward the priors
};

struct FittedValue {
  std::string name;
  double prior = 0, value = 0, lo = 0, hi = 0;  // lo, hi: the bounds the search used
};

struct PublishedFit {
  std::string gpu;
  std::vector<std::string> sources;  // the ids of the sources whose runs were fitted, in folder order
  int runs = 0;
  std::vector<FittedValue> values;
  double objective_before = 0, objective_after = 0;
  int evaluations = 0;  // objective evaluations (each simulates every fitted run)
  // Per source (and overall) errors of the fitted runs with the priors and with the fitted values.
  std::vector<PublishedSourceResult> before, after;
  ErrorSummary overall_before, overall_after;
};

struct LosoRow {
  std::string source;
  ErrorSummary held_out;            // its runs, predicted by the fit on the other sources
  std::vector<FittedValue> values;  // that fit's values
};

struct LosoReport {
  std::vector<LosoRow> rows;
  ErrorSummary pooled;  // every held-out run together: its mean_abs is the leave-one-source-out mean
};

// One line per stage ("fitting 24 runs ...", each pass of the search) for a progress display; may be empty.
using FitProgress = std::function<void(const std::string&)>;

PublishedFit fit_published(const PreparedRecord& rec, const PublishedFitOptions& o, const FitProgress& progress = {});
LosoReport loso_published(const PreparedRecord& rec, const PublishedFitOptions& o, const FitProgress& progress = {});

// The fitted values as a calibration file for `--calibration` (device = the GPU preset), each with its source:
// "fitted to 24 runs of torchtitan-h100-202412, ... (tp-plan calibrate --published)".
Calibration published_calibration(const PublishedFit& f, const std::string& dir);
// The printable report: fitted values with priors and bounds, errors before and after per source.
std::string published_fit_text(const PublishedFit& f);
std::string loso_text(const LosoReport& r);

}  // namespace tptune
