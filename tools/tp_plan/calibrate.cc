// tp-plan calibrate FILES... --out CALIB.yaml [--device NAME] [--separate] [--tie-gemm-dtypes true|false]
// Fits the cost model to Profile and bench JSON (sim/calibrate/fit.h), prints the fit per op class and writes the
// calibration YAML that simulate / search / accuracy apply with --calibration.
// tp-plan calibrate --published DIR --gpu PRESET --fit NAME[,NAME...] [--lambda L] [--out CALIB.yaml] [--loso]
// Fits the named cost parameters to the public record's runs on PRESET (sim/calibrate/published_fit.h).
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <map>

#include "plans/util/error.h"
#include "plans/util/output_file.h"
#include "sim/calibrate/fit.h"
#include "sim/calibrate/published_fit.h"
#include "sim/calibrate/published_record.h"
#include "sim/gpu_spec.h"
#include "tools/plan_options.h"
#include "tools/tp_plan/commands.h"

namespace tptune::tools {

namespace {

struct CalibrateArgs {
  std::string statistic = "median";
  std::vector<std::string> files;
  std::string out;
  std::string device;
  bool separate = false;
  std::optional<bool> tie;
  std::string published, gpu;  // --published DIR --gpu PRESET
  std::vector<std::string> fit;
  double lambda = 0.01;
  bool loso = false;
};

// Progress lines on stderr, from the first second on, at most one a second: "tp-plan calibrate: pass 3: ... (4.1 s)".
FitProgress progress_lines() {
  using Clock = std::chrono::steady_clock;
  auto start = std::make_shared<Clock::time_point>(Clock::now());
  auto last = std::make_shared<Clock::time_point>(*start);
  return [start, last](const std::string& what) {
    const auto now = Clock::now();
    if (now - *last < std::chrono::seconds(1)) return;
    *last = now;
    fmt::print(stderr, "tp-plan calibrate: {} ({:.1f} s)\n", what, std::chrono::duration<double>(now - *start).count());
  };
}

int run_published_calibrate(const CalibrateArgs& a) {
  if (!a.files.empty())
    throw Error(
        fmt::format("--published {}: give either profile/bench files or --published DIR, not both", a.published));
  if (a.gpu.empty()) throw Error("--published: expected --gpu PRESET (the GPU whose runs are fitted)");
  if (a.fit.empty()) throw Error("--published: expected --fit NAME[,NAME...] (the cost parameters to fit)");
  if (!a.out.empty()) refuse_overwriting_inputs({{"--out", a.out}}, {});
  const std::vector<PublishedSource> sources = load_published_record(a.published);
  const PreparedRecord rec = prepare_published(sources);
  const PublishedFitOptions o{a.gpu, a.fit, a.lambda};
  const auto t0 = std::chrono::steady_clock::now();
  const PublishedFit f = fit_published(rec, o, progress_lines());
  const double fit_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("{}fit time {:.1f} s\n", published_fit_text(f), fit_s);
  for (const auto& n : rec.not_predicted) fmt::print("not predicted (left out): {} {}: {}\n", n.source, n.id, n.error);
  if (a.loso) {
    const auto t1 = std::chrono::steady_clock::now();
    const LosoReport r = loso_published(rec, o, progress_lines());
    fmt::print("\n{}leave-one-source-out time {:.1f} s\n", loso_text(r),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
  }
  if (!a.out.empty()) {
    save_calibration(published_calibration(f, a.published), a.out);
    fmt::print("wrote {}\n", a.out);
  }
  return 0;
}

int run_calibrate(const CalibrateArgs& a) {
  if (!a.published.empty()) return run_published_calibrate(a);
  if (a.files.empty()) throw Error("expected profile or bench JSON files, or --published DIR");
  if (a.out.empty()) throw Error("--out: expected the calibration YAML to write");
  const char* published_only = !a.gpu.empty() ? "--gpu" : !a.fit.empty() ? "--fit" : a.loso ? "--loso" : nullptr;
  if (published_only) throw Error(fmt::format("{}: expected only with --published DIR", published_only));
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
  // With several environments (--separate) each fit goes to OUT-N.EXT: names derived from --out, checked as --out is
  // (none may be an input, e.g. `--out prof.json` over prof-1.json, nor another output) before anything is fitted,
  // and written together once every fit succeeded (plans/util/output_file.h), so that a failing fit replaces none.
  std::vector<OutputText> outputs;
  for (size_t i = 0; i < keys.size(); ++i) {
    std::string out = a.out;
    if (keys.size() > 1) {
      std::filesystem::path p(a.out);
      out = (p.parent_path() / fmt::format("{}-{}{}", p.stem().string(), i + 1, p.extension().string())).string();
    }
    outputs.push_back({keys.size() > 1 ? "--separate" : "--out", out, ""});
  }
  {
    std::vector<NamedPath> paths;
    for (const OutputText& o : outputs) paths.push_back({o.option, o.path});
    refuse_overwriting_inputs(paths, inputs);
  }
  std::string reports;
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto& ms = groups[keys[i]];
    const std::string device_name =
        a.device.empty() ? environment_device(ms.front().environment, ms.front().path) : a.device;
    const GpuSpec device = gpu_preset(device_name, "--device");
    const Calibration cal = fit_calibration(ms, device, {a.tie});
    outputs[i].content = calibration_yaml(cal);
    reports += fmt::format("{}wrote {}\n\n", fit_report(cal, device), outputs[i].path);
  }
  write_outputs(outputs);
  fmt::print("{}", reports);
  return 0;
}

}  // namespace

void add_calibrate_command(CLI::App& app, RunFn& run) {
  auto args = std::make_shared<CalibrateArgs>();
  CLI::App* cmd =
      app.add_subcommand("calibrate", "fit the cost model to tp-run profile / bench JSON and write a calibration");
  cmd->add_option("files", args->files, "Profile or bench JSON files")->check(CLI::ExistingFile);
  cmd->add_option("--out", args->out, "the calibration YAML to write (required unless --published)");
  cmd->add_option("--published", args->published,
                  "fit to the public record's runs in this folder (profiles/published) instead of profiles");
  cmd->add_option("--gpu", args->gpu, "with --published: the GPU preset whose runs are fitted");
  cmd->add_option("--fit", args->fit, "with --published: cost parameters to fit (sim/cost_param_list.h names)")
      ->delimiter(',');
  cmd->add_option("--lambda", args->lambda,
                  "with --published: weight of the pull toward the preset's values (default 0.01)")
      ->check(number_option(0, 1e6));
  cmd->add_flag("--loso", args->loso, "with --published: also the leave-one-source-out table");
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
