// tp-plan simulate CONFIG (--preset NAME | --plan FILE) [toggles] [--dp-shard N] [--json FILE|-] [--trace FILE]
// Predicts one training step of the plan on the config's cluster: step time, throughput, MFU, memory, where the
// time goes. The report logic lives in sim/ (simulate.h, trace.h); this file only wires options to it.
#include <fmt/format.h>

#include <fstream>

#include "plans/config.h"
#include "plans/error.h"
#include "plans/lower.h"
#include "sim/cluster_spec.h"
#include "sim/simulate.h"
#include "sim/trace.h"
#include "tools/plan_options.h"
#include "tools/tp_plan_commands.h"

namespace tptune::tools {

namespace {

struct SimulateArgs {
  PlanOptions plan;
  std::string json;
  std::string trace;
};

int run_simulate(const SimulateArgs& a) {
  Config cfg = load_config(a.plan.config);
  ClusterSpec cluster = resolve_cluster(cfg);
  Plan plan = resolve_plan(cfg, a.plan);
  Program prog = lower(cfg.model, cfg.training, plan);
  const CostParams& params = default_cost_params();
  check_supported(prog, cluster);
  OpCosts costs = cost_ops(prog, cluster, params);
  Timeline tl = schedule(prog, costs, params);
  StepReport r = make_report(prog, cluster, params, costs, tl);
  if (a.json != "-") fmt::print("{}\n{}", report_text(r), effective_values_text(cfg, plan));
  if (!a.json.empty()) write_json(report_json(r), a.json);
  if (!a.trace.empty()) {
    std::ofstream f(a.trace);
    if (!f) throw Error(fmt::format("--trace {}: cannot write the file", a.trace));
    f << chrome_trace(prog, costs, tl).dump();
    if (!f) throw Error(fmt::format("--trace {}: write failed", a.trace));
  }
  return 0;
}

}  // namespace

void add_simulate_command(CLI::App& app, RunFn& run) {
  auto args = std::make_shared<SimulateArgs>();
  CLI::App* cmd = app.add_subcommand("simulate", "predict a plan's step time, throughput, MFU and memory");
  add_plan_options(cmd, args->plan);
  cmd->add_option("--json", args->json, "write the report as JSON to FILE (- for stdout, instead of the text)");
  cmd->add_option("--trace", args->trace, "write a Chrome trace of the step to FILE (opens in Perfetto)");
  cmd->callback([args, &run]() { run = [args]() { return run_simulate(*args); }; });
}

}  // namespace tptune::tools
