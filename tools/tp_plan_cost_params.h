#pragma once
// The cost parameters a tp-plan command uses: CostParams defaults, the device preset's own cost_params, then a
// calibration file (--calibration CALIB.yaml) when given. Shared by simulate, search and accuracy.
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "sim/cluster_spec.h"
#include "sim/cost_params.h"

namespace tptune::tools {

void add_calibration_option(CLI::App* cmd, std::string& path);

struct ResolvedCostParams {
  CostParams params;
  std::vector<std::string> terms;  // "gemm_fp32_efficiency 0.52 (calib.yaml)", ...; empty without a calibration
};

// Throws tptune::Error when the file is bad or was fitted for another device than `gpu`.
ResolvedCostParams resolve_cost_params(const GpuSpec& gpu, const std::string& calibration_path);

}  // namespace tptune::tools
