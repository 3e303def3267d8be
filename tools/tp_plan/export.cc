// tp-plan export PLAN.yaml [--config CONFIG [--hf-config config.json]] [--format torchtitan|torchtitan-toml|python] [-o
// FILE]
//
// Prints a plan (a file written by `tp-plan search --out-plan`, or any plan YAML) as torchtitan configuration: the
// torchtitan 0.3 command (needs --config: the recipe of the config's model dimensions, seq_len and compile from its
// training section, torchrun's nodes x processes from its cluster), the job-config TOML of torchtitan before 0.3, or
// the parallelize_module plan in python (plans/export/export.h). With --config the plan's unstated values come from the
// config, as in simulate.
#include "plans/export/export.h"

#include <fmt/format.h>

#include "plans/language/config.h"
#include "plans/language/plan.h"
#include "plans/util/error.h"
#include "plans/util/output_file.h"
#include "tools/plan_options.h"
#include "tools/tp_plan/commands.h"

namespace tptune::tools {

namespace {
struct ExportArgs {
  std::string plan;
  std::string format = "torchtitan";
  std::string out;
  std::string config;
  std::string hf_config;
};
}  // namespace

void add_export_command(CLI::App& app, RunFn& run) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand("export", "print a plan as torchtitan job-config TOML or a python TP plan");
  cmd->add_option("plan", args->plan, "plan YAML file")->required();
  cmd->add_option("--format", args->format,
                  "torchtitan (0.3 command line + config function) | torchtitan-toml (job-config TOML, torchtitan "
                  "before 0.3) | python (parallelize_module plan)")
      ->capture_default_str();
  cmd->add_option("--config", args->config, "config YAML: the model (recipe), seq_len, compile and cluster")
      ->check(CLI::ExistingFile);
  cmd->add_option("--hf-config", args->hf_config,
                  "a Hugging Face config.json that replaces the config's model section (needs --config)");
  cmd->add_option("-o,--out", args->out, "write to FILE instead of stdout");
  cmd->callback([args, &run]() {
    run = [args]() {
      const ExportFormat f = parse_export_format(args->format, "--format");
      refuse_overwriting_inputs({{"--out", args->out}},
                                {{"plan", args->plan}, {"--config", args->config}, {"--hf-config", args->hf_config}});
      // With a config, the plan resolves as simulate resolves it (tools/plan_options.h: values the file does not
      // state come from the config), so that the export runs what simulate predicted.
      ExportContext ctx;
      Plan plan;
      if (!args->config.empty()) {
        PlanOptions o;
        o.config = args->config;
        o.plan_file = args->plan;
        o.hf_config = args->hf_config;
        Config cfg = load_config(args->config, args->hf_config);
        plan = resolve_plan(cfg, o);
        ctx = export_context(cfg);
      } else {
        if (!args->hf_config.empty())
          throw Error("--hf-config: expected --config CONFIG too (the cluster and training)");
        plan = load_plan(args->plan);
      }
      const std::string text = export_plan(plan, f, ctx);
      if (args->out.empty()) {
        fmt::print("{}", text);
        return 0;
      }
      write_output("--out", args->out, text);
      return 0;
    };
  });
}

}  // namespace tptune::tools
