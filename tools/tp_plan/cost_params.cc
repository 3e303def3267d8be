#include "tools/tp_plan/cost_params.h"

#include <fmt/format.h>

#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "sim/calibrate/calibration.h"
#include "sim/cost/cost_param_fields.h"
#include "sim/simulate.h"

namespace tptune::tools {

void add_calibration_option(CLI::App* cmd, std::string& path) {
  cmd->add_option("--calibration", path, "apply a calibration file (tp-plan calibrate --out) over the defaults");
}

ResolvedCostParams resolve_cost_params(const GpuSpec& gpu, const std::string& calibration_path) {
  return resolve_cost_params(gpu, calibration_path, device_cost_params(gpu));
}

ResolvedCostParams resolve_cost_params(const GpuSpec& gpu, const std::string& calibration_path,
                                       const CostParams& base) {
  ResolvedCostParams r;
  r.params = base;
  if (calibration_path.empty()) return r;
  const Calibration cal = load_calibration(calibration_path);
  if (cal.device != gpu.name)
    throw Error(fmt::format("{}: device: fitted for '{}', but the cluster's device is '{}'", calibration_path,
                            cal.device, gpu.name));
  apply_calibration(r.params, cal);
  r.terms = calibration_terms(cal);
  return r;
}

PredictionInputs prediction_inputs(const PlanOptions& options, const std::string& calibration_path) {
  PredictionInputs in;
  in.cfg = load_options_config(options);
  in.cluster = resolve_cluster(in.cfg);
  in.plan = resolve_plan(in.cfg, options);
  in.prog = lower(in.cfg.model, in.cfg.training, in.plan);
  in.resolved = resolve_cost_params(in.cluster.gpu, calibration_path);
  check_supported(in.prog, in.cluster);
  return in;
}

}  // namespace tptune::tools
