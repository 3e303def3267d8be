// tp-plan explain CONFIG (--preset NAME | --plan FILE) [toggles] [--json FILE|-]
#include <fmt/format.h>

#include "plans/config.h"
#include "plans/error.h"
#include "plans/explain.h"
#include "plans/lower.h"
#include "tools/plan_options.h"
#include "tools/tp_plan_commands.h"

namespace tptune::tools {

namespace {
struct ExplainArgs {
  PlanOptions plan;
  std::string json;
};
}  // namespace

void add_explain_command(CLI::App& app, RunFn& run) {
  auto args = std::make_shared<ExplainArgs>();
  CLI::App* cmd = app.add_subcommand("explain", "list the collectives a plan issues, per block and per step");
  add_plan_options(cmd, args->plan);
  cmd->add_option("--json", args->json, "write the collectives as JSON to FILE (- for stdout)");
  cmd->callback([args, &run]() {
    run = [args]() {
      Config cfg = load_config(args->plan.config);
      Plan plan = resolve_plan(cfg, args->plan);
      Program prog = lower(cfg.model, cfg.training, plan);
      if (args->json != "-") fmt::print("{}\n{}", explain_text(prog), effective_values_text(cfg, plan));
      if (!args->json.empty()) write_json(explain_json(prog), args->json);
      return 0;
    };
  });
}

}  // namespace tptune::tools
