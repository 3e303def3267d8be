// tp-plan accuracy PROFILE.json... [--calibration CALIB.yaml] [--device NAME] [--json FILE|-] [--fail-above PCT]
//                  [--fail-on step|serialized|compute]
// Predicted vs measured, per op and per step, and the ranking of the profiled plans (sim/calibrate/accuracy.h).
#include <fmt/format.h>

#include <cmath>

#include "plans/error.h"
#include "sim/calibrate/accuracy.h"
#include "sim/calibrate/fit.h"
#include "tools/plan_options.h"
#include "tools/tp_plan_commands.h"
#include "tools/tp_plan_cost_params.h"

namespace tptune::tools {

namespace {

struct AccuracyArgs {
  std::string statistic = "median";
  std::vector<std::string> files;
  std::string calibration, device, json;
  double fail_above = 0;         // percent; 0: never fail
  std::string fail_on = "step";  // which error --fail-above bounds: step, serialized or compute (see the option)
};

int run_accuracy(const AccuracyArgs& a) {
  std::vector<NamedPath> inputs{{"--calibration", a.calibration}};
  for (const auto& f : a.files) inputs.push_back({"profile", f});
  refuse_overwriting_inputs({{"--json", a.json}}, inputs);
  std::vector<Measurements> ms;
  for (const auto& f : a.files) ms.push_back(load_measurements(f, a.statistic));
  const std::string device_name =
      a.device.empty() ? environment_device(ms.front().environment, ms.front().path) : a.device;
  const GpuSpec device = gpu_preset(device_name, "--device");
  const ResolvedCostParams resolved = resolve_cost_params(device, a.calibration);
  AccuracyReport r = accuracy(ms, device, resolved.params);
  r.terms = resolved.terms;
  if (r.terms.empty()) r.terms.push_back(fmt::format("defaults of device {} (no calibration)", device.name));
  if (a.json != "-") fmt::print("{}", accuracy_text(r));
  if (!a.json.empty()) write_json(accuracy_json(r), a.json);
  if (a.fail_above > 0) {
    bool failed = false;
    for (const auto& s : r.steps) {
      const double e = a.fail_on == "serialized" ? s.serial_error : a.fail_on == "compute" ? s.compute_error : s.error;
      const double measured = a.fail_on == "serialized" ? s.measured_serial_ms
                              : a.fail_on == "compute"  ? s.measured_compute_ms
                                                        : s.measured_ms;
      if (!(measured > 0)) {  // nothing measured to bound (e.g. a profile whose compute ops all took 0): not a pass
        fmt::print(stderr, "tp-plan accuracy: {}: no measured {} time (0 ms): --fail-above cannot pass it\n", s.profile,
                   a.fail_on == "step" ? "step" : a.fail_on + " step");
        failed = true;
        continue;
      }
      if (std::abs(e) * 100 <= a.fail_above) continue;
      fmt::print(stderr, "tp-plan accuracy: {}: {} error {:+.1f}% exceeds the bound {:.1f}%\n", s.profile,
                 a.fail_on == "step" ? "step" : a.fail_on + " step", 100 * e, a.fail_above);
      failed = true;
    }
    if (failed) return 1;
  }
  return 0;
}

}  // namespace

void add_accuracy_command(CLI::App& app, RunFn& run) {
  auto args = std::make_shared<AccuracyArgs>();
  CLI::App* cmd = app.add_subcommand("accuracy", "compare predicted and measured step and op times of profiles");
  cmd->add_option("profiles", args->files, "Profile JSON files (tp-run profile)")->required()->check(CLI::ExistingFile);
  add_calibration_option(cmd, args->calibration);
  cmd->add_option("--device", args->device, "device preset to predict with (default: from the environment)");
  cmd->add_option("--json", args->json, "write the report as JSON to FILE (- for stdout, instead of the text)");
  cmd->add_option("--fail-above", args->fail_above,
                  "exit 1 when a step's |predicted - measured| / measured exceeds this many percent")
      ->check(number_option(0, 1e6));
  cmd->add_option("--fail-on", args->fail_on,
                  "the error --fail-above bounds: step (overlapped step wall, default), serialized (sum of the op "
                  "times, each timed alone) or compute (the same over the compute ops: free of the overlap's "
                  "scheduling and of the waits inside collectives)")
      ->check(CLI::IsMember({"step", "serialized", "compute"}));
  cmd->add_option("--statistic", args->statistic,
                  "which summary of the samples is the measured time: median (default) or min (least disturbed)")
      ->check(CLI::IsMember({"median", "min"}));
  cmd->callback([args, &run]() { run = [args]() { return run_accuracy(*args); }; });
}

}  // namespace tptune::tools
