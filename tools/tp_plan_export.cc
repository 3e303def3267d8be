// tp-plan export PLAN.yaml [--config CONFIG] [--format torchtitan|torchtitan-toml|python] [-o FILE]
//
// Prints a plan (a file written by `tp-plan search --out-plan`, or any plan YAML) as torchtitan configuration: the
// torchtitan 0.3 command (recipe from the config's model, seq_len and compile from its training section), the
// job-config TOML of torchtitan before 0.3, or the parallelize_module plan in python (plans/export.h).
#include <fmt/format.h>

#include "plans/config.h"
#include "plans/error.h"
#include "plans/export.h"
#include "plans/output_file.h"
#include "plans/plan.h"
#include "tools/tp_plan_commands.h"

namespace tptune::tools {

namespace {
struct ExportArgs {
  std::string plan;
  std::string format = "torchtitan";
  std::string out;
  std::string config;
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
  cmd->add_option("-o,--out", args->out, "write to FILE instead of stdout");
  cmd->callback([args, &run]() {
    run = [args]() {
      const ExportFormat f = parse_export_format(args->format, "--format");
      refuse_overwriting_inputs({{"--out", args->out}}, {{"plan", args->plan}, {"--config", args->config}});
      ExportContext ctx;
      if (!args->config.empty()) {
        const Config cfg = load_config(args->config);
        ctx.model_preset = cfg.model.name;
        ctx.seq_len = cfg.training.seq_len;
        ctx.compile = cfg.training.compile;
        ctx.nodes = cfg.cluster.nodes;
        ctx.gpus_per_node = cfg.cluster.gpus_per_node;
        ctx.n_layers = cfg.model.n_layers;  // a plan's ac_layers as torchtitan's every-N-th-block AC
      }
      const std::string text = export_plan(load_plan(args->plan), f, ctx);
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
