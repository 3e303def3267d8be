#pragma once
// A calibration: cost-model parameters fitted to measurements (`tp-plan calibrate`, sim/calibrate/fit.h), as a
// YAML file that `simulate`, `search` and `accuracy` apply with --calibration.
//
// File format (format tptune-calibration, version 1; written by save_calibration, read by load_calibration):
//   format: tptune-calibration
//   version: 1
//   device: cpu                       # the device preset the fit is relative to (its peaks are the roofline)
//   environment: "cpu | Intel Xeon | threads 1 | eigen 3.4.0, mpi ..."   # environment_key() of the inputs
//   files: [cal/a.json, cal/b.json]   # the measurements fitted
//   params:                           # CostParams fields (sim/cost/cost_param_fields.h), each with its op class
//     gemm_fp32_efficiency: {value: 0.52, default: 0.6, class: gemm}
//     gemm_efficiency: {value: 0.7, default: 0.84, class: gemm, source: "fitted to 24 runs of ..."}  # source: optional
//   collectives:                      # measured alpha-beta per collective and group size (CostParams)
//     - {collective: all_reduce, ranks: 2, alpha_us: 6.1, busbw_GBps: 2.9, points: [[8, 4.1], [16, 4.3], ...],
//        samples: 14, median_rel_error: 0.04, max_rel_error: 0.21}   # points: optional, MeasuredCollective
//   classes:                          # the fit's residuals per op class
//     - {class: gemm, samples: 96, median_rel_error: 0.05, max_rel_error: 0.3}
//   tptune: {version: "0.1.0", git_hash: "1a2b3c4"}   # the build that wrote the file (plans/util/version.h)
// Only `format`, `version`, `device` are required; `params` and `collectives` are what apply_calibration uses, the
// rest is the fit's record (`tptune` is read by nobody). Errors are tptune::Error "<file>:<line>: <key>: expected ...,
// got ..." (one line).

#include <string>
#include <vector>

#include "sim/cost/cost_params.h"

namespace tptune {

struct FittedParam {
  std::string name;  // a CostParams field
  double value = 0;
  double default_value = 0;
  std::string op_class;  // gemm | attention | memory_bound | collective
  std::string source;    // what it was fitted to, when the fit says (tp-plan calibrate --published); may be empty
};

struct FitResidual {
  std::string op_class;  // gemm, attention, memory_bound, or "all_reduce@2" for a collective curve
  int samples = 0;
  double median_rel_error = 0, max_rel_error = 0;
};

struct FittedCollective {
  MeasuredCollective curve;
  FitResidual residual;
};

struct Calibration {
  std::string device;
  std::string environment;
  std::vector<std::string> files;
  std::vector<FittedParam> params;
  std::vector<FittedCollective> collectives;
  std::vector<FitResidual> classes;
  std::string origin;  // the file it was loaded from ("" when fitted in memory)
};

// Reads and checks a calibration file (every param name and range, every collective). Throws tptune::Error.
Calibration load_calibration(const std::string& path);
Calibration parse_calibration(const std::string& yaml_text, const std::string& name);
std::string calibration_yaml(const Calibration& c);
// Writes calibration_yaml(c) to `path` (--out) whole or not at all (plans/util/output_file.h).
void save_calibration(const Calibration& c, const std::string& path);

// Applies the fitted params and collective curves over `c` (a curve replaces one of the same kind and group size).
void apply_calibration(CostParams& c, const Calibration& cal);
// One line per term for reports: "gemm_fp32_efficiency 0.52 (calib.yaml)", "all_reduce@2 alpha 6.1 us, busbw
// 2.9 GB/s (calib.yaml)".
std::vector<std::string> calibration_terms(const Calibration& cal);

}  // namespace tptune
