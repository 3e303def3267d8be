// tp-plan check CONFIG (--preset NAME | --plan FILE) [toggles] --baseline FILE [--max-slowdown 2]
//               [--max-memory-growth 1] [--format text|json|markdown] [--update]
// For users' CI: predicts the plan's step and compares step time, tokens/s per GPU and peak memory with a committed
// baseline. Tolerances are in percent (5 means 5 %). Exit 0 within tolerance, 1 beyond it (a report of what moved,
// by how much, which ops explain it), 4 beyond it against a baseline another tptune wrote (the change may come from
// tptune), 2 on bad input (config, plan, a missing or malformed baseline). --format chooses the report on standard
// output (markdown: a pull-request comment); --update writes the baseline instead and prints one line.
// The comparison and its reports live in sim/check/; this file only wires options to them.
#include <fmt/format.h>

#include "plans/language/config.h"
#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "plans/util/json_text.h"
#include "sim/check/baseline.h"
#include "sim/check/check_report.h"
#include "sim/check/compare.h"
#include "sim/cluster_spec.h"
#include "sim/pipeline/step.h"
#include "sim/simulate.h"
#include "tools/plan_options.h"
#include "tools/tp_plan/commands.h"
#include "tools/tp_plan/cost_params.h"

namespace tptune::tools {

namespace {

struct CheckArgs {
  PlanOptions plan;
  std::string baseline;
  std::string max_slowdown = "2";
  std::string max_memory_growth = "1";
  std::string format = "text";
  bool update = false;
  std::string calibration;
};

enum class CheckFormat { text, json, markdown };

CheckFormat parse_check_format(const std::string& s) {
  if (s == "text") return CheckFormat::text;
  if (s == "json") return CheckFormat::json;
  if (s == "markdown") return CheckFormat::markdown;
  throw Error(fmt::format("--format {}: expected text, json or markdown", s));
}

int run_check(const CheckArgs& a) {
  CheckTolerances tol;
  tol.max_slowdown_percent = parse_percent(a.max_slowdown, "--max-slowdown");
  tol.max_memory_growth_percent = parse_percent(a.max_memory_growth, "--max-memory-growth");
  const CheckFormat format = parse_check_format(a.format);
  // Read the baseline before the (longer) prediction, so that a bad baseline fails fast.
  CheckBaseline base;
  if (a.update) refuse_overwriting_inputs({{"--baseline", a.baseline}}, plan_inputs(a.plan));
  if (!a.update) base = read_baseline(a.baseline);

  // The same config, plan and cost parameters as simulate (--hf-config, the device preset's cost_params,
  // --calibration): check gates the step simulate predicts.
  // A pipeline's step is simulate's too (sim/pipeline/step.h); its baseline adds the pipeline's terms (baseline.h).
  const PredictionInputs in = prediction_inputs(a.plan, a.calibration);
  const Program& prog = in.prog;
  const ClusterSpec& cluster = in.cluster;
  const CostParams& params = in.resolved.params;
  CheckBaseline now;
  if (in.plan.pp_degree > 1) {
    now = baseline_from_report(simulate_pipeline(in.cfg.model, in.cfg.training, in.plan, cluster, params));
  } else {
    OpCosts costs = cost_ops(prog, cluster, params);
    Timeline tl = schedule(prog, costs, params);
    now = baseline_from_report(make_report(prog, cluster, params, costs, tl, kAllOps));
  }

  if (a.update) {
    write_baseline(now, a.baseline);
    fmt::print("tp-plan check: wrote {}: step time {:.2f} ms, {:.0f} tokens/s per GPU, peak memory {:.2f} GiB{}\n",
               a.baseline, now.step_time_ms, now.tokens_per_second_per_gpu, now.peak_memory_gib,
               now.fits_in_memory ? "" : " (DOES NOT FIT)");
    return 0;
  }
  CheckResult r = compare(base, now, tol);
  switch (format) {
    case CheckFormat::text:
      fmt::print("{}", format_check(r, a.baseline));
      break;
    case CheckFormat::markdown:
      fmt::print("{}", format_check_markdown(r, a.baseline));
      break;
    case CheckFormat::json:
      fmt::print("{}\n", json_dump(check_json(r, a.baseline), 2));
      break;
  }
  return r.exit_status();
}

}  // namespace

void add_check_command(CLI::App& app, RunFn& run) {
  auto args = std::make_shared<CheckArgs>();
  // --gpu, --nodes, --gpus-per-node, --seq-len, as simulate
  CLI::App* cmd = add_plan_command(app, "check",
                                   "CI gate: exit 1 when a plan's predicted step time, tokens/s or memory regress vs "
                                   "a baseline (4 when the baseline was written by another tptune)",
                                   args->plan);
  add_calibration_option(cmd, args->calibration);
  cmd->add_option("--baseline", args->baseline, "baseline JSON (written by --update)")->required();
  cmd->add_option("--max-slowdown", args->max_slowdown,
                  "largest allowed growth of step time and of time per token, in percent: 5 means 5 % (0 to 1000, a "
                  "trailing % allowed; default 2)");
  cmd->add_option("--max-memory-growth", args->max_memory_growth,
                  "largest allowed growth of peak memory, in percent: 5 means 5 % (0 to 1000; default 1)");
  cmd->add_option("--format", args->format,
                  "the report on standard output: text (default), json, or markdown (a pull-request comment)");
  cmd->add_flag("--update", args->update,
                "write the current prediction to --baseline instead of checking (prints one line, whatever --format)");
  cmd->callback([args, &run]() { run = [args]() { return run_check(*args); }; });
}

}  // namespace tptune::tools
