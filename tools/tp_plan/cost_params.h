#pragma once
// The cost parameters a tp-plan command uses: CostParams defaults, the device preset's own cost_params, then a
// calibration file (--calibration CALIB.yaml) when given. Shared by simulate, check, search and accuracy.
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "plans/language/config.h"
#include "plans/program/program.h"
#include "sim/cluster_spec.h"
#include "sim/cost/cost_params.h"
#include "tools/plan_options.h"

namespace tptune::tools {

void add_calibration_option(CLI::App* cmd, std::string& path);

struct ResolvedCostParams {
  CostParams params;
  std::vector<std::string> terms;  // "gemm_fp32_efficiency 0.52 (calib.yaml)", ...; empty without a calibration
};

// Throws tptune::Error when the file is bad or was fitted for another device than `gpu`.
ResolvedCostParams resolve_cost_params(const GpuSpec& gpu, const std::string& calibration_path);
// The same over `base` instead of the device preset's (tp-run's stack: sim/cost/tp_run_stack.h).
ResolvedCostParams resolve_cost_params(const GpuSpec& gpu, const std::string& calibration_path, const CostParams& base);

// What a prediction of one plan starts from: the config (with --hf-config), its cluster, the resolved plan, its
// Program (checked to be supported on the cluster) and the cost parameters of resolve_cost_params(). simulate and check
// both take it from here, so that they predict the same step for the same options.
struct PredictionInputs {
  Config cfg;
  ClusterSpec cluster;
  Plan plan;
  Program prog;
  ResolvedCostParams resolved;
};
PredictionInputs prediction_inputs(const PlanOptions& options, const std::string& calibration_path);

}  // namespace tptune::tools
