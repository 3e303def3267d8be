// tp-plan simulate CONFIG (--preset NAME | --plan FILE) [toggles] [--dp-shard N] [--json FILE|-] [--trace FILE]
//                  [--report FILE.html] [--measured PROFILE.json (with --trace)]
//                  [--calibration CALIB.yaml]
// Predicts one training step of the plan on the config's cluster: step time, throughput, MFU, memory, where the
// time goes. The report logic lives in sim/ (simulate.h, trace.h); this file only wires options to it.
#include "sim/simulate.h"

#include <fmt/format.h>

#include "plans/language/config.h"
#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "plans/util/json_text.h"
#include "plans/util/version.h"
#include "sim/cluster_spec.h"
#include "sim/pipeline/step.h"
#include "sim/report/html_report.h"
#include "sim/report/measured_trace.h"
#include "sim/report/pipeline_trace.h"
#include "sim/report/step_report.h"
#include "sim/report/trace.h"
#include "tools/plan_options.h"
#include "tools/tp_plan/commands.h"
#include "tools/tp_plan/cost_params.h"

namespace tptune::tools {

namespace {

struct SimulateArgs {
  PlanOptions plan;
  std::string json;
  std::string trace;
  std::string report;
  std::string measured;
  std::string calibration;
};

int run_simulate(const SimulateArgs& a) {
  if (!a.measured.empty() && a.trace.empty()) throw Error("--measured PROFILE: expected --trace FILE to write it into");
  std::vector<NamedPath> inputs = plan_inputs(a.plan);
  inputs.push_back({"--measured", a.measured});
  inputs.push_back({"--calibration", a.calibration});
  const PredictionInputs in = prediction_inputs(a.plan, a.calibration);
  // After the config is read (its model.hf_config too), before the step is predicted; --measured, read below, is
  // named here, and every output is checked again against every file read when it is written
  // (plans/util/output_file.h).
  refuse_overwriting_inputs({{"--json", a.json}, {"--trace", a.trace}, {"--report", a.report}}, inputs);
  const Config& cfg = in.cfg;
  const ClusterSpec& cluster = in.cluster;
  const Plan& plan = in.plan;
  const Program& prog = in.prog;
  const ResolvedCostParams& resolved = in.resolved;
  const CostParams& params = resolved.params;
  // A pipeline's trace is its schedule's actions (sim/report/pipeline_trace.h), not one Program's ops: a tp-run
  // profile, which is ops, has nothing to align with there.
  if (plan.pp_degree > 1 && !a.measured.empty())
    throw Error(
        fmt::format("{}: pp_degree {}: --measured aligns a profile's ops with one Program's, and the trace of "
                    "a pipeline has its schedule's actions; simulate it without --measured",
                    plan_key_origin(plan, "pp_degree"), plan.pp_degree));
  // Read after the plan, so that a pipeline plan is refused for what it is, whatever the profile holds. A profile of
  // another model or plan, or whose ops are not the Program's, pairs nothing meaningful: refused, saying what differs.
  std::string device;
  const std::vector<ProfiledOp> measured =
      a.measured.empty() ? std::vector<ProfiledOp>{} : load_profile_ops(a.measured, prog, &device);
  OpCosts costs;
  Timeline tl;
  StepReport r;
  if (plan.pp_degree > 1) {
    r = simulate_pipeline(cfg.model, cfg.training, plan, cluster, params);
  } else {
    costs = cost_ops(prog, cluster, params);
    tl = schedule(prog, costs, params);
    r = make_report(prog, cluster, params, costs, tl);
  }
  if (!a.calibration.empty()) r.trust = prediction_trust(cluster.gpu, a.calibration);
  if (a.json != "-") {
    fmt::print("{}\n{}", report_text(r), effective_values_text(cfg, plan, cluster.gpu.architecture));
    for (const auto& t : resolved.terms) fmt::print("calibrated: {}\n", t);
  }
  // Every file rendered first, then written together (plans/util/output_file.h): one that fails replaces none.
  std::vector<OutputText> outputs;
  size_t trace_events = 0;
  if (!a.json.empty()) {
    nlohmann::json j = with_version_stamp(report_json(r));
    j["sdpa_backend"] = sdpa_backend_json(cfg.training, plan, cluster.gpu.architecture);
    if (!a.calibration.empty()) j["calibration"] = {{"file", a.calibration}, {"terms", resolved.terms}};
    if (a.json == "-")
      write_json(j, a.json);
    else
      outputs.push_back({"--json", a.json, json_dump(j, 2) + "\n"});
  }
  if (!a.trace.empty()) {
    nlohmann::json trace = plan.pp_degree > 1 ? pipeline_chrome_trace(r.pipeline)
                           : a.measured.empty()
                               ? chrome_trace(prog, costs, tl)
                               : chrome_trace_with_measured(prog, costs, tl, measured,
                                                            fmt::format("{} (measured, {})", a.measured, device));
    stamp_version(trace);
    trace_events = trace["traceEvents"].size();
    outputs.push_back({"--trace", a.trace, json_dump(trace)});
  }
  if (!a.report.empty())
    outputs.push_back({"--report", a.report,
                       plan.pp_degree > 1 ? simulate_pipeline_html(cfg, cluster, params, plan, r)
                                          : simulate_html(cfg, cluster, params, prog, costs, tl, r)});
  write_outputs(outputs);
  if (!a.trace.empty()) fmt::print(a.json == "-" ? stderr : stdout, "wrote {} ({} events)\n", a.trace, trace_events);
  return 0;
}

}  // namespace

void add_simulate_command(CLI::App& app, RunFn& run) {
  auto args = std::make_shared<SimulateArgs>();
  CLI::App* cmd =
      add_plan_command(app, "simulate", "predict a plan's step time, throughput, MFU and memory", args->plan);
  add_calibration_option(cmd, args->calibration);
  cmd->add_option("--json", args->json, "write the report as JSON to FILE (- for stdout, instead of the text)");
  cmd->add_option("--trace", args->trace, "write a Chrome trace of the step to FILE (opens in Perfetto)");
  cmd->add_option("--measured", args->measured,
                  "with --trace: add this tp-run profile JSON as a second process, op names aligned");
  cmd->add_option("--report", args->report, "write an HTML report (charts, timeline, memory) to FILE");
  cmd->callback([args, &run]() { run = [args]() { return run_simulate(*args); }; });
}

}  // namespace tptune::tools
