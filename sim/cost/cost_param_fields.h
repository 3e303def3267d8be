#pragma once
// The scalar fields of CostParams by name: the one table that device presets (`cost_params:` in sim/gpus/*.yaml)
// and calibration files (sim/calibrate/calibration.h) use to set them, each with the range a value must lie in.
//
//   CostParams c = device_cost_params(cluster.gpu);   // defaults, then the device preset's cost_params
//   set_cost_param(c, "gemm_fp32_efficiency", 0.55, "calib.yaml:12");
//
// The table is generated from sim/cost/cost_param_list.h: its TPTUNE_COST_PARAM lines, in that order. Integer fields
// (tile sizes) take integral values; bool fields (loss_in_fp32) take 0 or 1. The list's TPTUNE_COST_FIELD members are
// not in the table: the RankCurve fields (ring and NVLS bus-bandwidth efficiency), which measured collectives
// (CostParams::measured_collectives) replace where a calibration has them, and the compiled-mode factors.

#include <string>
#include <string_view>
#include <vector>

#include "sim/cost/cost_params.h"
#include "sim/gpu_spec.h"

namespace tptune {

struct CostParamField {
  std::string_view name;
  double lo, hi;  // accepted range, inclusive
  double (*get)(const CostParams&);
  void (*set)(CostParams&, double);
  bool integral = false;
};

const std::vector<CostParamField>& cost_param_fields();
// The field called `name`, or nullptr.
const CostParamField* find_cost_param(std::string_view name);
// Sets a field; throws tptune::Error "<where>: <name>: ..." for an unknown name or a value out of range.
void set_cost_param(CostParams& c, std::string_view name, double value, const std::string& where);

// The defaults of CostParams with the device preset's `cost_params` applied.
CostParams device_cost_params(const GpuSpec& gpu);

}  // namespace tptune
