// tp-plan export --format torchtitan: the command torchtitan 0.3 runs for a Plan (see plans/export/export.h).
//
// torchtitan 0.3 has no TOML loader: a config is a Python function of a registry (`--module M --config F`,
// models/llama3/config_registry.py), and the command line overrides its fields (`--section.key value`, booleans as
// `--section.key` / `--section.no-key`, activation checkpointing as the subcommand `activation-checkpoint:MODE`).
// What only Python can set (the float8 converter, which rebuilds the model spec) goes into a config function that
// wraps the recipe. The export is a shell script: it writes that Python file (when needed) and runs torchrun.

#include <fmt/format.h>

#include "plans/export/export.h"
#include "plans/export/torchtitan_recipe.h"
#include "plans/util/checked_math.h"
#include "plans/util/error.h"
#include "plans/util/yaml_util.h"

namespace tptune {

namespace {

// torchrun's launch arguments for the config's cluster. Several nodes need a rendezvous: torchtitan's own
// multinode_trainer.slurm (pytorch/torchtitan b5bcd76, `torchrun --nnodes 4 --nproc_per_node 8 --rdzv_id 101
// --rdzv_backend c10d --rdzv_endpoint "$head_node_ip:29500"`) uses c10d at the first node; the script reads that
// node's address from MASTER_ADDR (and refuses to start without it) and the port from MASTER_PORT (29500).
std::string torchrun_launch(const ExportContext& ctx) {
  if (ctx.nodes <= 1) return fmt::format("torchrun --nnodes 1 --nproc-per-node {}", ctx.gpus_per_node);
  return fmt::format(
      "torchrun --nnodes {} --nproc-per-node {} \\\n"
      "  --rdzv-backend c10d --rdzv-endpoint \"${{MASTER_ADDR:?set MASTER_ADDR to the address of the first node}}:"
      "${{MASTER_PORT:-29500}}\" --rdzv-id \"${{TPTUNE_RDZV_ID:-tptune}}\" \\\n"
      "  -m torchtitan.train",
      ctx.nodes, ctx.gpus_per_node);
}

}  // namespace

std::string export_torchtitan_cli(const Plan& plan, const ExportContext& ctx) {
  if (plan.float8 == Float8Recipe::tensorwise)
    throw Error(
        fmt::format("{}: float8 tensorwise: torchtitan 0.3's Float8LinearConverter has the recipes rowwise and "
                    "rowwise_with_gw_hp only; use --format python or --format torchtitan-toml (torchtitan before "
                    "0.3), or search with search.framework: torchtitan-0.3 for a plan torchtitan 0.3 runs",
                    yaml::shown(plan.source, 200)));
  if (!ctx.model || ctx.nodes <= 0 || ctx.gpus_per_node <= 0)
    throw Error(
        fmt::format("{}: --format torchtitan needs --config CONFIG: the model (torchtitan's recipe is the one with its "
                    "dimensions) and the cluster (torchrun's nodes x processes per node)",
                    yaml::shown(plan.source, 200)));
  const bool moe = ctx.model->moe.experts > 0;
  // torchtitan 0.3 trains a mixture of experts with its own models: qwen3's qwen3_30b_a3b is mapped; another MoE
  // (Mixtral, Qwen2-MoE, Qwen3 235B-A22B, whose flavor has no recipe function) is refused, never run as another.
  if (moe && !torchtitan_recipe(*ctx.model))
    throw Error(fmt::format(
        "model '{}': a mixture of experts ({} routed experts) that is not torchtitan 0.3's qwen3 30B-A3B (dim 2048, "
        "48 layers, 128 experts of 768, top 8), the one MoE recipe --format torchtitan maps; --format "
        "torchtitan-toml writes the job config (parallelism.expert_parallel_degree) and --format python the "
        "parallelize_module dict",
        yaml::shown(ctx.model->name), ctx.model->moe.experts));
  // The routed experts' grouped GEMMs take float8 from a converter of their own in torchtitan 0.3
  // (components/quantization/float8.py, the grouped-experts converter beside Float8LinearConverter), not written here.
  if (moe && plan.float8 != Float8Recipe::none)
    throw Error(fmt::format(
        "{}: float8 {} on a mixture of experts: torchtitan 0.3 converts the routed experts with a grouped-experts "
        "float8 converter that --format torchtitan does not write; export the bf16 plan, or --format python",
        yaml::shown(plan.source, 200), to_string(plan.float8)));
  if (const std::string lacks = moe ? std::string() : torchtitan_llama3_lacks(*ctx.model); !lacks.empty())
    throw Error(
        fmt::format("model '{}': torchtitan's llama3 model cannot express {}, so --format torchtitan would "
                    "train another model; --format python prints the plan's parallelize_module dict",
                    yaml::shown(ctx.model->name), lacks));
  if (ctx.model->tie_word_embeddings)
    throw Error(fmt::format(
        "model '{}': tied input/output embeddings (tie_word_embeddings): torchtitan 0.3 ties them only in its llama3 "
        "1B and 3B flavors, for which it has no recipe (config_registry: llama3_8b, llama3_70b, llama3_405b), so "
        "--format torchtitan cannot name one that trains this model; --format python prints the plan's "
        "parallelize_module dict",
        yaml::shown(ctx.model->name)));
  const TorchtitanRecipe* recipe = torchtitan_recipe(*ctx.model);
  if (!recipe)
    throw Error(fmt::format(
        "model '{}' (dim {}, {} layers, {} heads, {} kv heads, ffn_dim {}, vocab {}): not the dimensions of "
        "torchtitan 0.3's llama3 8B, 70B or 405B recipe, so --format torchtitan cannot name a recipe that trains it; "
        "--format python prints the plan's parallelize_module dict",
        yaml::shown(ctx.model->name), ctx.model->dim, ctx.model->n_layers, ctx.model->n_heads, ctx.model->n_kv_heads,
        ctx.model->ffn_dim, ctx.model->vocab_size));
  // The plan's world (tp x dp_shard x dp_replicate (x cp), each degree <= 2^20: checked product) is the ranks
  // torchrun starts.
  const int64_t plan_world =
      checked_mul({plan.tp_degree, plan.dp_shard, plan.dp_replicate, plan.cp_degree, plan.pp_degree}, "world");
  const int64_t cluster_world = int64_t{ctx.nodes} * ctx.gpus_per_node;
  if (plan_world != cluster_world)
    throw Error(fmt::format(
        "{}: the plan runs on tp {} x dp_shard {} x dp_replicate {}{} = {} GPUs, the config's cluster has {} nodes x "
        "{} = {}: torchrun would start another world than the plan's degrees",
        yaml::shown(plan.source, 200), plan.tp_degree, plan.dp_shard, plan.dp_replicate,
        (plan.cp_degree > 1 ? fmt::format(" x cp {}", plan.cp_degree) : std::string()) +
            (plan.pp_degree > 1 ? fmt::format(" x pp {}", plan.pp_degree) : std::string()),
        plan_world, ctx.nodes, ctx.gpus_per_node, cluster_world));
  const TorchtitanRecipe& r = *recipe;
  const bool tp = plan.tp_degree > 1;
  const bool async = tp && plan.async_tp;
  const bool compile = ctx.compile.value_or(async);
  if (async && !compile)
    throw Error(
        fmt::format("{}: async TP needs torch.compile (--compile.enable), but the config sets "
                    "training.compile: false",
                    plan.source));
  // torchtitan's enable_sequence_parallel picks one of two module plans; any other is refused, never run as the
  // closest (the plan's own entries, compared with the presets of its framework, so a torchtitan-0.3 vanilla
  // winner is enable_sp off).
  const bool sp = plan.modules == preset_plan("sequence_parallel", plan).modules;
  const bool vanilla = plan.modules == preset_plan("vanilla", plan).modules;
  if (tp && !sp && !vanilla)
    throw Error(fmt::format(
        "{}: the plan's module styles are neither of torchtitan's (enable_sequence_parallel on or off for framework "
        "{}), so no torchtitan.train switch runs them; --format python prints the exact parallelize_module plan",
        yaml::shown(plan.source, 200), to_string(plan.framework)));
  // The 405B recipe builds its model spec with a float8 converter: any other float8 choice rebuilds it in Python.
  const bool python = plan.float8 != Float8Recipe::none || r.float8 != Float8Recipe::none;
  const std::string module = python ? "tptune_torchtitan_config" : r.module;
  const std::string function = python ? fmt::format("tptune_{}", r.function) : r.function;

  // torchtitan 0.3 has no rotate-method key: ring attention uses torch's default rotater, allgather (the key
  // parallelism.context_parallel_rotate_method was removed in pytorch/torchtitan 8e55544).
  if (plan.cp_degree > 1 && plan.cp_rotate != CpRotate::allgather)
    throw Error(fmt::format(
        "{}: cp_rotate_method {}: torchtitan 0.3 has no rotate-method key (its ring attention uses torch's default, "
        "allgather); use --format torchtitan-toml (torchtitan before 0.3 has context_parallel_rotate_method) or "
        "cp_rotate_method: allgather",
        plan.source, to_string(plan.cp_rotate)));
  // Pipeline parallelism: torchtitan generates the split from the stage count; an explicit other split is
  // module_fqns_per_model_part, a list of lists the command line cannot write.
  TorchtitanPipelineSplit pp_split;
  if (plan.pp_degree > 1) {
    pp_split = torchtitan_pipeline_split(*ctx.model, plan);
    if (pp_split.explicit_split)
      throw Error(fmt::format(
          "{}: pp_split [{}] is not the split torchtitan generates for {} stages, and torchtitan 0.3's command line "
          "cannot write module_fqns_per_model_part (a list of lists); use --format torchtitan-toml, or leave pp_split "
          "out for torchtitan's split",
          plan.source, fmt::join(plan.pp_split, ", "), plan.pp_split.size()));
    if (pp_split.needs_layers_per_stage && pp_split.layers_per_stage == 0)
      throw Error(fmt::format(
          "{}: pp_stages_per_rank {}: no pipeline_parallel_layers_per_stage L gives pp {} x {} stages (torchtitan "
          "counts ceil(({} blocks + {} + {}) / L)); choose another pp_stages_per_rank",
          plan.source, plan.pp_stages_per_rank, plan.pp_degree, plan.pp_stages_per_rank, ctx.model->n_layers,
          plan.pp_first_stage_less_layers, plan.pp_last_stage_less_layers));
  }
  std::string out = "#!/bin/sh\nset -e\n";
  out += fmt::format(
      "# torchtitan 0.3 run of the tptune plan '{}' ({}), written by `tp-plan export --format "
      "torchtitan`.\n",
      comment_text(plan.family), comment_text(plan.source));
  out += "# The recipe's Python config function plus command-line overrides of torchtitan.train (ConfigManager);\n";
  out += "# for torchtitan before 0.3 (job-config TOML) use --format torchtitan-toml.\n";
  if (plan.framework != Framework::torchtitan_0_3)
    out +=
        "# NOTE: the plan is a DTensor-family plan (framework: dtensor); torchtitan 0.3 applies its own sharding\n"
        "# configs (fused wqkv, module-boundary conversions, chunked loss) and runs FlexAttention: simulate with\n"
        "# --framework torchtitan-0.3.\n";
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
    out += fmt::format("from torchtitan.models.{} import model_registry\n", r.module);
    out += fmt::format("from torchtitan.models.{}.config_registry import {}\n\n\n", r.module, r.function);
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
  // ParallelismConfig.context_parallel_degree and context_parallel_load_balancer ("headtail", the default | None),
  // only for CP plans.
  // ParallelismConfig.expert_parallel_degree (EP plans only; default 1).
  if (plan.ep_degree > 1) add("--parallelism.expert-parallel-degree", std::to_string(plan.ep_degree));
  if (plan.cp_degree > 1) {
    add("--parallelism.context-parallel-degree", std::to_string(plan.cp_degree));
    add("--parallelism.context-parallel-load-balancer", plan.cp_load_balance ? "headtail" : "None");
  }
  // ParallelismConfig.pipeline_parallel_* (PP plans only): the local batch is split into microbatches of
  // pipeline_parallel_microbatch_size; pipeline_parallel_layers_per_stage only where the stages per rank are not the
  // schedule's default.
  if (plan.pp_degree > 1) {
    add("--parallelism.pipeline-parallel-degree", std::to_string(plan.pp_degree));
    add("--parallelism.pipeline-parallel-schedule", std::string(to_string(plan.pp_schedule)));
    add("--parallelism.pipeline-parallel-microbatch-size", std::to_string(plan.pp_microbatch_size));
    add("--parallelism.pipeline-parallel-first-stage-less-layers", std::to_string(plan.pp_first_stage_less_layers));
    add("--parallelism.pipeline-parallel-last-stage-less-layers", std::to_string(plan.pp_last_stage_less_layers));
    if (pp_split.needs_layers_per_stage)
      add("--parallelism.pipeline-parallel-layers-per-stage", std::to_string(pp_split.layers_per_stage));
  }
  // TrainingConfig.disable_cuda_graphs defaults to False (the trainer captures forward+backward in a CUDA graph), and
  // the trainer's config check (trainer.py _validate_cuda_graphs) refuses it with a pipeline ("CUDA graphs do not
  // support pipeline parallelism yet") and with expert parallelism through the default token dispatcher
  // (AllToAllTokenDispatcher: its token counts reach the host, the sync tptune prices; only MinimalAsyncEP or HybridEP
  // with a capacity factor may be captured). Both found by tests/integration/check_torchtitan_export.py on 0.3.0.
  if (plan.pp_degree > 1 || plan.ep_degree > 1) add("--training.disable-cuda-graphs", "");
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
  out += fmt::format("{}{}", python ? "PYTHONPATH=\"$PWD${PYTHONPATH:+:$PYTHONPATH}\" " : "", torchrun_launch(ctx));
  if (ctx.nodes <= 1) out += " -m torchtitan.train";
  for (size_t i = 0; i < args.size(); ++i) {
    const bool value = i > 0 && args[i][0] != '-' && args[i - 1][0] == '-' && args[i].find(':') == std::string::npos;
    out += value ? " " + args[i] : " \\\n  " + args[i];
  }
  out += "\n";
  return out;
}

}  // namespace tptune
