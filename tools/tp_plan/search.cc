// tp-plan search CONFIG [--hf-config FILE] [plan options as restrictions] [--gpu NAME] [--nodes N]
//                [--gpus-per-node N] [--seq-len N] [--top K] [--json FILE|-] [--out-plan FILE [--verify]]
//                [--trace FILE] [--report FILE.html] [--threads N] [--quiet] [--bound] [--calibration CALIB.yaml]
//
// Ranks every plan of the config's search space (sim/search/search.h), prints the top K, the winner against the vanilla
// plan and torchtitan's default, and optionally writes the winner as a plan YAML (which explain, simulate and tp-run
// accept), its simulated step as a Chrome trace, and the whole result as JSON. The plan options of simulate (--tp,
// --float8, ...) restrict the space and the config overrides replace the cluster and training values
// (tools/tp_plan/search_overrides.h); the text and the JSON ("overrides") say what each replaced. Exit status 1 when
// nothing fits.
#include "sim/search/search.h"

#include <fmt/format.h>

#include "plans/language/config.h"
#include "plans/language/module_names.h"
#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "plans/util/json_text.h"
#include "plans/util/version.h"
#include "sim/pipeline/step.h"
#include "sim/report/html_report.h"
#include "sim/report/pipeline_trace.h"
#include "sim/report/search_report.h"
#include "sim/report/trace.h"
#include "sim/trust.h"
#include "tools/plan_options.h"
#include "tools/progress.h"
#include "tools/tp_plan/commands.h"
#include "tools/tp_plan/cost_params.h"
#include "tools/tp_plan/search_overrides.h"

namespace tptune::tools {

namespace {

struct SearchArgs {
  PlanOptions plan;  // CONFIG, --hf-config, and the options that restrict the space
  size_t top = 10;
  std::string json, out_plan, trace, report;
  int threads = 0;
  bool quiet = false;
  bool verify = false;
  bool bound = false;
  std::string calibration;
};

int run_search(const SearchArgs& a) {
  if (a.verify && a.out_plan.empty())
    throw Error("--verify: expected --out-plan FILE too (the printed command verifies that file)");
  Config cfg = load_config(a.plan.config, a.plan.hf_config);
  const std::vector<AppliedOverride> applied = restrict_search_space(cfg, a.plan);
  std::vector<NamedPath> inputs = plan_inputs(a.plan);
  inputs.push_back({"--calibration", a.calibration});
  for (const auto& f : cfg.search.plan_files) inputs.push_back({"search.plans file", f});
  refuse_overwriting_inputs(
      {{"--out-plan", a.out_plan}, {"--trace", a.trace}, {"--json", a.json}, {"--report", a.report}}, inputs);
  SearchOptions opts;
  opts.threads = a.threads;
  if (a.bound) opts.bound_top = a.top;
  const ResolvedCostParams resolved = resolve_cost_params(resolve_cluster(cfg).gpu, a.calibration);
  opts.cost = resolved.params;
  Progress bar("search", Progress::enabled(a.quiet));
  opts.progress = [&bar](size_t done, size_t total) { bar.update(done, total, "candidates"); };
  SearchResult r = search(cfg, opts);
  if (!a.calibration.empty()) r.trust = prediction_trust(r.cluster.gpu, a.calibration);
  bar.clear();
  const bool text = a.json != "-";
  const std::vector<Baseline> baselines = search_baselines(cfg, r, opts.cost);
  // The result with the overrides that made its space: a saved JSON says that --tp 4 was given.
  auto result_json = [&]() {
    nlohmann::json j = search_json(r, baselines, a.top);
    j["trust"] = trust_json(r.trust);
    j["overrides"] = nlohmann::json::array();
    for (const AppliedOverride& o : applied)
      j["overrides"].push_back({{"option", o.option}, {"value", o.value}, {"replaces", o.replaces}, {"was", o.was}});
    return j;
  };
  if (text) fmt::print("{}", overrides_text(applied));
  if (!r.winner()) {
    if (text) fmt::print("{}trust: {}\n", nothing_fits_text(cfg, r, a.top), trust_text(r.trust));
    if (text && !applied.empty())
      fmt::print(
          "the overrides above restricted the space; the pruned counts say which constraint removed each "
          "candidate\n");
    if (!a.json.empty()) write_json(result_json(), a.json);
    fmt::print(stderr, "tp-plan: no plan fits (see the closest candidates{})\n", text ? " above" : " in the JSON");
    return 1;
  }
  if (text)
    fmt::print("{}trust: {}\n{}{}", search_table(cfg, r, a.top), trust_text(r.trust), pareto_text(r),
               explain_winner(r, baselines));
  if (text)
    for (const auto& t : resolved.terms) fmt::print("calibrated: {}\n", t);
  // A preset keeps torchtitan's w3 entry on a gelu MLP; the file gets only entries that name modules of the model.
  Plan winner = without_unmatched_modules(result_plan(r, r.ranking[0]), cfg.model);
  // Chosen at --seq-len N: the file states it, so that simulate, explain and tp-run run it at that length.
  if (a.plan.overrides.seq_len && winner.seq_len == 0) winner.seq_len = cfg.training.seq_len;
  // Every file rendered first, then written together (plans/util/output_file.h): one that fails replaces none.
  std::vector<OutputText> outputs;
  if (!a.out_plan.empty()) outputs.push_back({"--out-plan", a.out_plan, plan_to_yaml(winner)});
  size_t trace_events = 0;
  if (!a.trace.empty()) {
    const Training wt = result_training(cfg, r, r.ranking[0]);
    nlohmann::json trace;
    if (winner.pp_degree > 1) {
      // A pipeline-parallel winner's: its schedule's actions, a thread per pp rank (sim/report/pipeline_trace.h).
      trace = pipeline_chrome_trace(simulate_pipeline(cfg.model, wt, winner, r.cluster, opts.cost).pipeline);
    } else {
      const Program p = lower(cfg.model, wt, winner);
      const OpCosts costs = cost_ops(p, r.cluster, opts.cost);
      trace = chrome_trace(p, costs, schedule(p, costs, opts.cost));
    }
    trace = with_version_stamp(std::move(trace));
    trace_events = trace["traceEvents"].size();
    outputs.push_back({"--trace", a.trace, json_dump(trace, 2) + "\n"});
  }
  if (!a.json.empty() && a.json != "-")
    outputs.push_back({"--json", a.json, json_dump(with_version_stamp(result_json()), 2) + "\n"});
  if (!a.report.empty()) outputs.push_back({"--report", a.report, search_html(cfg, r, baselines, opts.cost)});
  write_outputs(outputs);
  const std::string hf = a.plan.hf_config.empty() ? "" : " --hf-config " + a.plan.hf_config;
  if (!a.out_plan.empty() && text)
    fmt::print("\nwrote the winner to {} (tp-plan simulate {}{} --plan {}{}{})\n", a.out_plan, a.plan.config, hf,
               a.out_plan, config_override_args(a.plan.overrides),
               a.plan.compile      ? " --compile"
               : a.plan.no_compile ? " --no-compile"
                                   : "");
  if (!a.trace.empty())  // the number of events says that it holds the step (Perfetto opens it)
    fmt::print(text ? stdout : stderr, "{}wrote {} ({} events)\n", text && a.out_plan.empty() ? "\n" : "", a.trace,
               trace_events);
  // tp-run verify runs pp and cp on CPU, one of them at a time and without float8 (docs/cli.md).
  const bool split_mesh = winner.pp_degree > 1 || winner.cp_degree > 1;
  const char* unverifiable = winner.pp_degree > 1 && winner.cp_degree > 1 ? "pipeline and context parallelism together"
                             : split_mesh && winner.float8 != Float8Recipe::none
                                 ? "float8 with pipeline or context parallelism"
                                 : nullptr;
  if (a.verify && unverifiable)
    fmt::print(text ? stdout : stderr,
               "\nthe winner runs {}, which tp-run verify does not execute: there is no command to verify it\n",
               unverifiable);
  else if (a.verify)
    fmt::print(text ? stdout : stderr,
               "\nprove it on CPU ranks (a scaled-down model of the same architecture, same plan):\n"
               "  mpirun --oversubscribe -np {} tp-run verify {}{} --plan {} --shrink\n",
               int64_t{winner.tp_degree} * winner.cp_degree * winner.pp_degree, a.plan.config, hf,
               a.out_plan);  // a process per (pp, cp, tp) rank
  if (a.json == "-") write_json(result_json(), a.json);
  return 0;
}

}  // namespace

void add_search_command(CLI::App& app, RunFn& run) {
  auto args = std::make_shared<SearchArgs>();
  // The options of simulate, as restrictions of the space (tools/tp_plan/search_overrides.h).
  CLI::App* cmd = add_plan_command(app, "search", "rank every plan of the config's search space and explain the winner",
                                   args->plan);
  cmd->get_option("config")->description("config YAML (model, training, cluster, search)");
  for (const char* refused : {"--dp-shard", "--ac-layers", "--loss-chunks"})
    cmd->get_option(refused)->description("not a restriction of the search space: refused");
  cmd->add_option("--top", args->top, "rows of the ranking to print")
      ->capture_default_str()
      ->check(integer_option(1, 1000000));
  cmd->add_option("--json", args->json, "write the result as JSON to FILE (- for stdout)");
  cmd->add_option("--out-plan", args->out_plan, "write the winner as a plan YAML (for simulate, explain, tp-run)");
  cmd->add_option("--trace", args->trace, "write the winner's simulated step as a Chrome trace JSON");
  cmd->add_option("--report", args->report, "write an HTML report (candidates, winner vs baselines) to FILE");
  cmd->add_flag("--verify", args->verify, "print the tp-run command that verifies the winner (needs --out-plan)");
  cmd->add_flag("--bound", args->bound,
                "branch-and-bound: skip the schedule of candidates that provably rank below the top K and off the "
                "Pareto front (counted as pruned \"bound\"; tokens/s and cost objectives)");
  cmd->add_flag("--quiet", args->quiet, "no progress line on the terminal");
  add_calibration_option(cmd, args->calibration);
  cmd->add_option("--threads", args->threads, "worker threads (default: all cores)")->check(integer_option(0, 4096));
  cmd->callback([args, &run]() { run = [args]() { return run_search(*args); }; });
}

}  // namespace tptune::tools
