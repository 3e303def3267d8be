// tp-plan export PLAN.yaml [--format torchtitan|python] [-o FILE]
//
// Prints a plan (a file written by `tp-plan search --out-plan`, or any plan YAML) as torchtitan configuration: the
// job-config TOML sections, or the parallelize_module plan in python (plans/export.h).
#include <fmt/format.h>

#include <fstream>

#include "plans/error.h"
#include "plans/export.h"
#include "plans/plan.h"
#include "tools/tp_plan_commands.h"

namespace tptune::tools {

namespace {
struct ExportArgs {
  std::string plan;
  std::string format = "torchtitan";
  std::string out;
};
}  // namespace

void add_export_command(CLI::App& app, RunFn& run) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand("export", "print a plan as torchtitan job-config TOML or a python TP plan");
  cmd->add_option("plan", args->plan, "plan YAML file")->required();
  cmd->add_option("--format", args->format, "torchtitan (job-config TOML) | python (parallelize_module plan)")
      ->capture_default_str();
  cmd->add_option("-o,--out", args->out, "write to FILE instead of stdout");
  cmd->callback([args, &run]() {
    run = [args]() {
      const ExportFormat f = parse_export_format(args->format, "--format");
      const std::string text = export_plan(load_plan(args->plan), f);
      if (args->out.empty()) {
        fmt::print("{}", text);
        return 0;
      }
      std::ofstream o(args->out);
      if (!o || !(o << text)) throw Error(fmt::format("--out: cannot write '{}'", args->out));
      return 0;
    };
  });
}

}  // namespace tptune::tools
