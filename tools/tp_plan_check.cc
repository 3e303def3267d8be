// tp-plan check CONFIG (--preset NAME | --plan FILE) [toggles] --baseline FILE [--max-slowdown 2%]
//               [--max-memory-growth 1%] [--update]
// For users' CI: predicts the plan's step and compares step time, tokens/s per GPU and peak memory with a committed
// baseline. Exit 0 within tolerance, 1 with a one-screen diff (what moved, by how much, which ops explain it) when
// not, 2 on bad input (config, plan, a missing or malformed baseline). --update writes the baseline instead.
// The comparison lives in sim/check/; this file only wires options to it.
#include <fmt/format.h>

#include "plans/config.h"
#include "plans/error.h"
#include "plans/lower.h"
#include "sim/check/baseline.h"
#include "sim/check/compare.h"
#include "sim/cluster_spec.h"
#include "sim/simulate.h"
#include "tools/plan_options.h"
#include "tools/tp_plan_commands.h"
#include "tools/tp_plan_cost_params.h"

namespace tptune::tools {

namespace {

struct CheckArgs {
  PlanOptions plan;
  std::string baseline;
  std::string max_slowdown = "2%";
  std::string max_memory_growth = "1%";
  bool update = false;
  std::string calibration;
};

int run_check(const CheckArgs& a) {
  CheckTolerances tol;
  tol.max_slowdown = parse_percent(a.max_slowdown, "--max-slowdown");
  tol.max_memory_growth = parse_percent(a.max_memory_growth, "--max-memory-growth");
  // Read the baseline before the (longer) prediction, so that a bad baseline fails fast.
  CheckBaseline base;
  if (a.update) refuse_overwriting_inputs({{"--baseline", a.baseline}}, plan_inputs(a.plan));
  if (!a.update) base = read_baseline(a.baseline);

  // The same config, plan and cost parameters as simulate (--hf-config, the device preset's cost_params,
  // --calibration): check gates the step simulate predicts.
  const PredictionInputs in = prediction_inputs(a.plan, a.calibration);
  const Program& prog = in.prog;
  const ClusterSpec& cluster = in.cluster;
  const CostParams& params = in.resolved.params;
  OpCosts costs = cost_ops(prog, cluster, params);
  Timeline tl = schedule(prog, costs, params);
  CheckBaseline now = baseline_from_report(make_report(prog, cluster, params, costs, tl, kAllOps));

  if (a.update) {
    write_baseline(now, a.baseline);
    fmt::print("tp-plan check: wrote {}: step time {:.2f} ms, {:.0f} tokens/s per GPU, peak memory {:.2f} GiB{}\n",
               a.baseline, now.step_time_ms, now.tokens_per_second_per_gpu, now.peak_memory_gib,
               now.fits_in_memory ? "" : " (DOES NOT FIT)");
    return 0;
  }
  CheckResult r = compare(base, now, tol);
  fmt::print("{}", format_check(r, a.baseline));
  return r.pass ? 0 : 1;
}

}  // namespace

void add_check_command(CLI::App& app, RunFn& run) {
  auto args = std::make_shared<CheckArgs>();
  CLI::App* cmd = app.add_subcommand(
      "check", "CI gate: fail (exit 1) when a plan's predicted step time, tokens/s or memory regress vs a baseline");
  add_plan_options(cmd, args->plan);
  add_calibration_option(cmd, args->calibration);
  cmd->add_option("--baseline", args->baseline, "baseline JSON (written by --update)")->required();
  cmd->add_option("--max-slowdown", args->max_slowdown,
                  "largest allowed growth of step time (and drop of tokens/s), e.g. 2% (default)");
  cmd->add_option("--max-memory-growth", args->max_memory_growth,
                  "largest allowed growth of peak memory, e.g. 1% (default)");
  cmd->add_flag("--update", args->update, "write the current prediction to --baseline instead of checking");
  cmd->callback([args, &run]() { run = [args]() { return run_check(*args); }; });
}

}  // namespace tptune::tools
