// tp-plan export --format torchtitan: the command torchtitan 0.3 runs for a Plan (see plans/export.h).
//
// torchtitan 0.3 has no TOML loader: a config is a Python function of a registry (`--module M --config F`,
// models/llama3/config_registry.py), and the command line overrides its fields (`--section.key value`, booleans as
// `--section.key` / `--section.no-key`, activation checkpointing as the subcommand `activation-checkpoint:MODE`).
// What only Python can set (the float8 converter, which rebuilds the model spec) goes into a config function that
// wraps the recipe. The export is a shell script: it writes that Python file (when needed) and runs torchrun.

#include <fmt/format.h>

#include "plans/error.h"
#include "plans/export.h"

namespace tptune {

namespace {

struct Recipe {
  const char* function;  // config_registry function
  const char* flavor;    // model_registry flavor
};

// The llama3 recipes of torchtitan 0.3 for tptune's model presets.
std::optional<Recipe> recipe_of(const std::string& model) {
  if (model == "llama3-8b") return Recipe{"llama3_8b", "8B"};
  if (model == "llama3-70b") return Recipe{"llama3_70b", "70B"};
  if (model == "llama3-405b") return Recipe{"llama3_405b", "405B"};
  return std::nullopt;
}

}  // namespace

std::string export_torchtitan_cli(const Plan& plan, const ExportContext& ctx) {
  if (plan.float8 == Float8Recipe::tensorwise)
    throw Error(
        fmt::format("{}: float8 tensorwise: torchtitan 0.3's Float8LinearConverter has the recipes rowwise and "
                    "rowwise_with_gw_hp only; use --format torchtitan-toml (torchtitan before 0.3) or "
                    "--format python",
                    plan.source));
  const auto recipe = recipe_of(ctx.model_preset);
  const Recipe r = recipe.value_or(Recipe{"llama3_8b", "8B"});
  const bool tp = plan.tp_degree > 1;
  const bool async = tp && plan.async_tp;
  const bool compile = ctx.compile.value_or(async);
  if (async && !compile)
    throw Error(
        fmt::format("{}: async TP needs torch.compile (--compile.enable), but the config sets "
                    "training.compile: false",
                    plan.source));
  const bool sp = plan.modules == preset_plan("sequence_parallel", plan).modules;
  const bool vanilla = plan.modules == preset_plan("vanilla", plan).modules;
  // The 405B recipe builds its model spec with a float8 converter: any other float8 choice rebuilds it in Python.
  const bool python = plan.float8 != Float8Recipe::none || r.flavor == std::string("405B");
  const std::string module = python ? "tptune_torchtitan_config" : "llama3";
  const std::string function = python ? fmt::format("tptune_{}", r.function) : r.function;

  std::string out = "#!/bin/sh\n";
  out += fmt::format(
      "# torchtitan 0.3 run of the tptune plan '{}' ({}), written by `tp-plan export --format "
      "torchtitan`.\n",
      plan.family, plan.source);
  out += "# The recipe's Python config function plus command-line overrides of torchtitan.train (ConfigManager);\n";
  out += "# for torchtitan before 0.3 (job-config TOML) use --format torchtitan-toml.\n";
  if (!recipe)
    out += fmt::format(
        "# NOTE: model '{}' is not a torchtitan llama3 flavor: the command uses llama3_8b; set your "
        "model's dimensions in a config function.\n",
        ctx.model_preset.empty() ? "unknown (no --config)" : ctx.model_preset);
  if (plan.framework != Framework::torchtitan_0_3)
    out +=
        "# NOTE: the plan is a DTensor-family plan (framework: dtensor); torchtitan 0.3 applies its own sharding\n"
        "# configs (fused wqkv, module-boundary conversions, chunked loss): simulate with --framework "
        "torchtitan-0.3.\n";
  if (tp && !sp && !vanilla)
    out +=
        "# NOTE: the plan's module styles are neither of torchtitan's (enable_sp on or off); torchtitan runs the\n"
        "# closest, enable_sequence_parallel below. `tp-plan export --format python` prints the exact plan.\n";
  if (const LayerAc lac = layer_ac(plan, ctx.n_layers); lac.applies)
    out += fmt::format(
        "# NOTE: the plan checkpoints ({}) only the first {} of {} blocks (ac_layers {}); torchtitan 0.3 applies its\n"
        "# AC policy to every block (FullAC / SelectiveAC in torchtitan/distributed/activation_checkpoint.py have no\n"
        "# layer option), so this run checkpoints all {}: more recompute and less memory than tptune simulated.\n"
        "# torchtitan before 0.3 can checkpoint one block in every N (--format torchtitan-toml): N = {} checkpoints\n"
        "# {} of {} ({}).\n",
        to_string(plan.activation_checkpointing), plan.ac_layers, ctx.n_layers, plan.ac_layers, ctx.n_layers, lac.every,
        lac.blocks, ctx.n_layers, lac.exact ? "the same count" : "the nearest count");
  else if (plan.ac_layers > 0 && ctx.n_layers <= 0 && plan.activation_checkpointing != ActivationCheckpointing::none)
    out += fmt::format(
        "# NOTE: the plan checkpoints only the first {} blocks (ac_layers {}); torchtitan 0.3 applies its AC policy "
        "to\n# every block, so this run checkpoints all of them.\n",
        plan.ac_layers, plan.ac_layers);
  if (python) {
    out += "cat > tptune_torchtitan_config.py <<'PY'\n";
    out += "# A torchtitan 0.3 config function: the recipe with the float8 converter tptune simulated.\n";
    out += "from torchtitan.components.quantization import Float8LinearConverter\n";
    out += "from torchtitan.models.llama3 import model_registry\n";
    out += fmt::format("from torchtitan.models.llama3.config_registry import {}\n\n\n", r.function);
    out += fmt::format("def {}():\n", function);
    out += fmt::format("    config = {}()\n", r.function);
    if (plan.float8 == Float8Recipe::none) {
      out += fmt::format("    config.model_spec = model_registry(\"{}\")  # bf16: no converter\n", r.flavor);
    } else {
      out += fmt::format("    config.model_spec = model_registry(\n        \"{}\",\n        converters=[\n", r.flavor);
      out += "            Float8LinearConverter.Config(\n";
      out += fmt::format("                recipe_name=\"{}\",\n", to_string(plan.float8));
      out += "                filter_fqns=[\"lm_head\"],  # the output projection stays bf16, as tptune simulates\n";
      out += fmt::format("                model_compile_enabled={},\n", compile ? "True" : "False");
      out += "            ),\n        ],\n    )\n";
    }
    out += "    return config\nPY\n";
  }
  std::vector<std::string> args = {"--module", module, "--config", function};
  auto add = [&](const std::string& k, const std::string& v) {
    args.push_back(k);
    if (!v.empty()) args.push_back(v);
  };
  add("--parallelism.tensor-parallel-degree", std::to_string(plan.tp_degree));
  add(tp && !vanilla ? "--parallelism.enable-sequence-parallel" : "--parallelism.no-enable-sequence-parallel", "");
  add("--parallelism.data-parallel-shard-degree", std::to_string(plan.dp_shard));
  // torchtitan/config/configs.py ParallelismConfig.data_parallel_replicate_degree (HSDP when dp_shard > 1 too), as
  // tyro spells the field on the command line.
  add("--parallelism.data-parallel-replicate-degree", std::to_string(plan.dp_replicate));
  add("--training.local-batch-size", std::to_string(plan.local_batch_size));
  // torchtitan's TrainingConfig.global_batch_size (default -1: local batch x dp degree, no accumulation); train.py
  // derives gradient_accumulation_steps = global_batch_size // (local_batch_size x dp degree). Only when accumulating.
  if (plan.gradient_accumulation_steps > 1)
    add("--training.global-batch-size", std::to_string(plan.global_batch_size()));
  // The plan's own length (a search over search.seq_lens chose it), else the config's.
  if (const int64_t seq = plan.seq_len > 0 ? plan.seq_len : ctx.seq_len; seq > 0)
    add("--training.seq-len", std::to_string(seq));
  add("--loss.num-chunks", std::to_string(plan.chunks()));
  add(compile ? "--compile.enable" : "--compile.no-enable", "");
  if (compile) add("--compile.components", "model,loss");
  add(async ? "--compile.enable-async-tensor-parallel" : "--compile.no-enable-async-tensor-parallel", "");
  args.push_back(fmt::format("activation-checkpoint:{}", to_string(plan.activation_checkpointing)));
  const int nproc = ctx.gpus_per_node > 0 ? ctx.gpus_per_node : plan.tp_degree;
  out += fmt::format("{}torchrun --nnodes {} --nproc-per-node {} -m torchtitan.train",
                     python ? "PYTHONPATH=\"$PWD${PYTHONPATH:+:$PYTHONPATH}\" " : "", ctx.nodes > 0 ? ctx.nodes : 1,
                     nproc);
  for (size_t i = 0; i < args.size(); ++i) {
    const bool value = i > 0 && args[i][0] != '-' && args[i - 1][0] == '-' && args[i].find(':') == std::string::npos;
    out += value ? " " + args[i] : " \\\n  " + args[i];
  }
  out += "\n";
  return out;
}

}  // namespace tptune
