// tp-plan calibrate FILES... --out CALIB.yaml [--device NAME] [--separate] [--tie-gemm-dtypes true|false]
// Fits the cost model to Profile and bench JSON (sim/calibrate/fit.h), prints the fit per op class and writes the
// calibration YAML that simulate / search / accuracy apply with --calibration.
#include <fmt/format.h>

#include <filesystem>
#include <map>

#include "plans/error.h"
#include "plans/output_file.h"
#include "sim/calibrate/fit.h"
#include "sim/gpu_spec.h"
#include "tools/tp_plan_commands.h"

namespace tptune::tools {

namespace {

struct CalibrateArgs {
  std::string statistic = "median";
  std::vector<std::string> files;
  std::string out;
  std::string device;
  bool separate = false;
  std::optional<bool> tie;
};

int run_calibrate(const CalibrateArgs& a) {
  std::vector<NamedPath> inputs;
  for (const auto& f : a.files) inputs.push_back({"profile", f});
  refuse_overwriting_inputs({{"--out", a.out}}, inputs);
  std::vector<Measurements> all;
  for (const auto& f : a.files) all.push_back(load_measurements(f, a.statistic));
  // Group by environment; files from another device or library version are refused unless asked to fit apart.
  std::vector<std::string> keys;
  std::map<std::string, std::vector<Measurements>> groups;
  const std::string first_key = environment_key(all.front().environment), first_path = all.front().path;
  for (auto& m : all) {
    const std::string k = environment_key(m.environment);
    if (!a.separate && k != first_key)
      throw Error(fmt::format(
          "{}: environment '{}' differs from {}'s '{}' (another device or library version): refused; fit them "
          "separately with --separate",
          m.path, k, first_path, first_key));
    if (!groups.count(k)) keys.push_back(k);
    groups[k].push_back(std::move(m));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto& ms = groups[keys[i]];
    const std::string device_name =
        a.device.empty() ? environment_device(ms.front().environment, ms.front().path) : a.device;
    const GpuSpec device = gpu_preset(device_name, "--device");
    Calibration cal = fit_calibration(ms, device, {a.tie});
    std::string out = a.out;
    if (keys.size() > 1) {
      std::filesystem::path p(a.out);
      out = (p.parent_path() / fmt::format("{}-{}{}", p.stem().string(), i + 1, p.extension().string())).string();
    }
    save_calibration(cal, out);
    fmt::print("{}wrote {}\n\n", fit_report(cal, device), out);
  }
  return 0;
}

}  // namespace

void add_calibrate_command(CLI::App& app, RunFn& run) {
  auto args = std::make_shared<CalibrateArgs>();
  CLI::App* cmd =
      app.add_subcommand("calibrate", "fit the cost model to tp-run profile / bench JSON and write a calibration");
  cmd->add_option("files", args->files, "Profile or bench JSON files")->required()->check(CLI::ExistingFile);
  cmd->add_option("--out", args->out, "the calibration YAML to write")->required();
  cmd->add_option("--device", args->device, "device preset the fit is relative to (default: from the environment)");
  cmd->add_flag("--separate", args->separate,
                "fit files from different environments separately (OUT-1.yaml, OUT-2.yaml, ...)");
  cmd->add_option("--tie-gemm-dtypes", args->tie,
                  "one GEMM efficiency for every dtype (default: true on the CPU backend, which computes in fp32)");
  cmd->add_option("--statistic", args->statistic,
                  "which summary of the samples is the measured time: median (default) or min (least disturbed)")
      ->check(CLI::IsMember({"median", "min"}));
  cmd->callback([args, &run]() { run = [args]() { return run_calibrate(*args); }; });
}

}  // namespace tptune::tools
