// tp-plan accuracy PROFILE.json... [--calibration CALIB.yaml] [--device NAME] [--json FILE|-] [--fail-above PCT]
//                  [--fail-on step|serialized|compute]
// tp-plan accuracy --published DIR [--calibration CALIB.yaml] [--json FILE|-] [--fail-above-committed FILE]
// Predicted vs measured, per op and per step, and the ranking of the profiled plans (sim/calibrate/accuracy.h); with
// --published, of the public record's runs (sim/calibrate/published_accuracy.h).
#include "sim/calibrate/accuracy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "plans/util/error.h"
#include "plans/util/input_file.h"
#include "sim/calibrate/calibration.h"
#include "sim/calibrate/fit.h"
#include "sim/calibrate/published_accuracy.h"
#include "sim/cost/cost_param_fields.h"
#include "sim/cost/tp_run_stack.h"
#include "tools/plan_options.h"
#include "tools/tp_plan/commands.h"
#include "tools/tp_plan/cost_params.h"

namespace tptune::tools {

namespace {

struct AccuracyArgs {
  std::string statistic = "median";
  std::vector<std::string> files;
  std::string calibration, device, json;
  double fail_above = 0;         // percent; 0: never fail
  std::string fail_on = "step";  // which error --fail-above bounds: step, serialized or compute (see the option)
  std::string published;         // --published DIR: the public record instead of profiles
  std::string committed;         // --fail-above-committed FILE (with --published)
};

// The public record (sim/calibrate/published_accuracy.h). A calibration applies to the runs on its device; the other
// runs keep their presets' parameters.
int run_published_accuracy(const AccuracyArgs& a) {
  refuse_overwriting_inputs({{"--json", a.json}},
                            {{"--calibration", a.calibration}, {"--fail-above-committed", a.committed}});
  const std::vector<PublishedSource> sources = load_published_record(a.published);
  const PreparedRecord rec = prepare_published(sources);
  std::optional<Calibration> cal;
  if (!a.calibration.empty()) cal = load_calibration(a.calibration);
  PublishedAccuracy r = published_accuracy(sources, rec, [&](const GpuSpec& gpu) {
    CostParams c = device_cost_params(gpu);
    if (cal && cal->device == gpu.name) apply_calibration(c, *cal);
    return c;
  });
  if (cal) {
    if (std::none_of(rec.runs.begin(), rec.runs.end(),
                     [&](const auto& p) { return p.cluster.gpu.name == cal->device; }))
      throw Error(fmt::format("{}: device: fitted for '{}', on which no predicted run of {} ran", a.calibration,
                              cal->device, a.published));
    r.terms = calibration_terms(*cal);
    r.terms.push_back(fmt::format("(on the runs of {}; the other GPUs' runs: their presets' values)", cal->device));
  }
  // Every input is read before the first output is written (plans/util/output_file.h checks outputs against those
  // read).
  nlohmann::json committed;
  if (!a.committed.empty()) {
    try {
      committed = nlohmann::json::parse(read_input_file(a.committed, "committed accuracy JSON"));
    } catch (const nlohmann::json::exception& e) {
      throw Error(fmt::format("{}: invalid JSON: {}", a.committed, e.what()));
    }
  }
  if (a.json != "-") fmt::print("{}", published_accuracy_text(r));
  if (!a.json.empty()) write_json(published_accuracy_json(r), a.json);
  if (!a.committed.empty()) {
    const std::vector<std::string> worse = figures_worse_than(r, committed, a.committed);
    for (const auto& w : worse) fmt::print(stderr, "tp-plan accuracy: worse than committed: {}\n", w);
    if (!worse.empty()) return 1;
    fmt::print(a.json == "-" ? stderr : stdout, "no figure worse than {}\n", a.committed);
  }
  return 0;
}

int run_accuracy(const AccuracyArgs& a) {
  if (!a.published.empty()) {
    if (!a.files.empty())
      throw Error(fmt::format("--published {}: give either profile files or --published DIR, not both", a.published));
    return run_published_accuracy(a);
  }
  if (!a.committed.empty()) throw Error("--fail-above-committed: expected --published DIR (the record it bounds)");
  if (a.files.empty()) throw Error("expected PROFILE.json files (tp-run profile) or --published DIR");
  std::vector<NamedPath> inputs{{"--calibration", a.calibration}};
  for (const auto& f : a.files) inputs.push_back({"profile", f});
  refuse_overwriting_inputs({{"--json", a.json}}, inputs);
  std::vector<Measurements> ms;
  for (const auto& f : a.files) ms.push_back(load_measurements(f, a.statistic));
  const std::string device_name =
      a.device.empty() ? environment_device(ms.front().environment, ms.front().path) : a.device;
  const GpuSpec device = gpu_preset(device_name, "--device");
  // A profile is tp-run's: its stack, not the PyTorch stack the GPU presets carry (sim/cost/tp_run_stack.h).
  const ResolvedCostParams resolved = resolve_cost_params(device, a.calibration, tp_run_cost_params(device));
  AccuracyReport r = accuracy(ms, device, resolved.params);
  r.terms = resolved.terms;
  if (r.terms.empty())
    r.terms.push_back(device.architecture == "cpu"
                          ? fmt::format("defaults of device {} (no calibration)", device.name)
                          : fmt::format("defaults of device {} with tp-run's stack (no calibration)", device.name));
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
  cmd->add_option("profiles", args->files, "Profile JSON files (tp-run profile)")->check(CLI::ExistingFile);
  auto* published = cmd->add_option("--published", args->published,
                                    "the public record's folder (profiles/published): predict its runs instead");
  cmd->add_option("--fail-above-committed", args->committed,
                  "with --published: exit 1 when a source's figure is worse than in this JSON (an earlier --json)");
  add_calibration_option(cmd, args->calibration);
  cmd->add_option("--device", args->device, "device preset to predict with (default: from the environment)")
      ->excludes(published);
  cmd->add_option("--json", args->json, "write the report as JSON to FILE (- for stdout, instead of the text)");
  cmd->add_option("--fail-above", args->fail_above,
                  "exit 1 when a step's |predicted - measured| / measured exceeds this many percent")
      ->check(number_option(0, 1e6))
      ->excludes(published);
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
