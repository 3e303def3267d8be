// tp-plan search CONFIG [--top K] [--json FILE|-] [--out-plan FILE] [--trace FILE] [--threads N]
//                [--calibration CALIB.yaml]
//
// Ranks every plan of the config's search space (sim/search.h), prints the top K, the winner against the vanilla
// plan and torchtitan's default, and optionally writes the winner as a plan YAML (which explain, simulate and tp-run
// accept), its simulated step as a Chrome trace, and the whole result as JSON. Exit status 1 when nothing fits.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "plans/config.h"
#include "plans/error.h"
#include "plans/lower.h"
#include "sim/search.h"
#include "sim/search_report.h"
#include "sim/trace.h"
#include "tools/plan_options.h"
#include "tools/tp_plan_commands.h"
#include "tools/tp_plan_cost_params.h"

namespace tptune::tools {

namespace {

struct SearchArgs {
  std::string config;
  size_t top = 10;
  std::string json, out_plan, trace;
  int threads = 0;
  std::string calibration;
};

// A one-line progress bar on stderr, drawn only on a terminal and only once the search has run for a second.
class ProgressBar {
 public:
  ProgressBar() : tty_(isatty(fileno(stderr)) != 0), start_(std::chrono::steady_clock::now()) {}
  void update(size_t done, size_t total) {
    if (!tty_ || total == 0) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (s < 1.0 && !drawn_) return;
    constexpr int width = 40;
    const int filled = static_cast<int>(width * done / total);
    fmt::print(stderr, "\r[{}{}] {}/{} candidates, {:.1f} s", std::string(filled, '#'),
               std::string(width - filled, '.'), done, total, s);
    std::fflush(stderr);
    drawn_ = true;
  }
  void clear() {
    if (drawn_) fmt::print(stderr, "\r{}\r", std::string(80, ' '));
  }

 private:
  bool tty_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_;
};

int run_search(const SearchArgs& a) {
  const Config cfg = load_config(a.config);
  SearchOptions opts;
  opts.threads = a.threads;
  const ResolvedCostParams resolved = resolve_cost_params(resolve_cluster(cfg).gpu, a.calibration);
  opts.cost = resolved.params;
  ProgressBar bar;
  opts.progress = [&bar](size_t done, size_t total) { bar.update(done, total); };
  const SearchResult r = search(cfg, opts);
  bar.clear();
  const bool text = a.json != "-";
  const std::vector<Baseline> baselines = search_baselines(cfg, r, opts.cost);
  if (!r.winner()) {
    if (text) fmt::print("{}", nothing_fits_text(cfg, r, a.top));
    if (!a.json.empty()) write_json(search_json(r, baselines, a.top), a.json);
    fmt::print(stderr, "tp-plan: no plan fits (see the closest candidates{})\n", text ? " above" : " in the JSON");
    return 1;
  }
  if (text) fmt::print("{}{}", search_table(cfg, r, a.top), explain_winner(r, baselines));
  if (text)
    for (const auto& t : resolved.terms) fmt::print("calibrated: {}\n", t);
  const Plan winner = result_plan(r, r.ranking[0]);
  if (!a.out_plan.empty()) {
    save_plan(winner, a.out_plan);
    if (text)
      fmt::print("\nwrote the winner to {} (tp-plan simulate {} --plan {})\n", a.out_plan, a.config, a.out_plan);
  }
  if (!a.trace.empty()) {
    const Program p = lower(cfg.model, cfg.training, winner);
    const OpCosts costs = cost_ops(p, r.cluster, opts.cost);
    write_json(chrome_trace(p, costs, schedule(p, costs, opts.cost)), a.trace);
  }
  if (!a.json.empty()) write_json(search_json(r, baselines, a.top), a.json);
  return 0;
}

}  // namespace

void add_search_command(CLI::App& app, RunFn& run) {
  auto args = std::make_shared<SearchArgs>();
  CLI::App* cmd = app.add_subcommand("search", "rank every plan of the config's search space and explain the winner");
  cmd->add_option("config", args->config, "config YAML (model, training, cluster, search)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--top", args->top, "rows of the ranking to print")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--json", args->json, "write the result as JSON to FILE (- for stdout)");
  cmd->add_option("--out-plan", args->out_plan, "write the winner as a plan YAML (for simulate, explain, tp-run)");
  cmd->add_option("--trace", args->trace, "write the winner's simulated step as a Chrome trace JSON");
  add_calibration_option(cmd, args->calibration);
  cmd->add_option("--threads", args->threads, "worker threads (default: all cores)")->check(CLI::NonNegativeNumber);
  cmd->callback([args, &run]() { run = [args]() { return run_search(*args); }; });
}

}  // namespace tptune::tools
