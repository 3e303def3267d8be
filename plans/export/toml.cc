// tp-plan export --format torchtitan-toml: the job-config sections of torchtitan before 0.3 (see
// plans/export/export.h).

#include <fmt/format.h>

#include "plans/export/export.h"
#include "plans/export/torchtitan_recipe.h"
#include "plans/language/expert_parallel.h"
#include "plans/language/pipeline_parallel.h"
#include "plans/util/error.h"
#include "plans/util/yaml_util.h"

namespace tptune {

ExportFormat parse_export_format(const std::string& s, const std::string& where) {
  if (s == "torchtitan") return ExportFormat::torchtitan;
  if (s == "torchtitan-toml") return ExportFormat::torchtitan_toml;
  if (s == "python") return ExportFormat::python;
  throw Error(fmt::format("{}: expected torchtitan, torchtitan-toml or python, got '{}'", where, s));
}

std::string export_plan(const Plan& plan, ExportFormat f, const ExportContext& ctx) {
  // The plan's sparse mesh on the config's model, torchtitan's rules (plans/language/expert_parallel.h), before any
  // format writes expert_parallel_degree: ep on a dense model, ep not dividing dp_shard x cp x tp or the experts.
  if (ctx.model) check_expert_mesh(*ctx.model, plan.toggles(), plan_key_origin(plan, "ep_degree"));
  switch (f) {
    case ExportFormat::torchtitan:
      return export_torchtitan_cli(plan, ctx);
    case ExportFormat::torchtitan_toml:
      return export_torchtitan_toml(plan, ctx);
    case ExportFormat::python:
      return export_python(plan, ctx);
  }
  return export_python(plan, ctx);
}

ExportContext export_context(const Config& cfg) {
  ExportContext ctx;
  ctx.model = cfg.model;
  ctx.seq_len = cfg.training.seq_len;
  ctx.compile = cfg.training.compile;
  ctx.nodes = cfg.cluster.nodes;
  ctx.gpus_per_node = cfg.cluster.gpus_per_node;
  ctx.n_layers = cfg.model.n_layers;  // a plan's ac_layers as torchtitan's every-N-th-block AC
  return ctx;
}

std::string comment_text(std::string_view text) {
  std::string out;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f || c == '\\')
      out += fmt::format("\\x{:02x}", u);
    else
      out += c;
  }
  return out;
}

std::string python_string(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f || c == '\\' || c == '"')
      out += fmt::format("\\x{:02x}", u);  // Python reads \xNN in a str literal as that code point
    else
      out += c;
  }
  return out + "\"";
}

std::string every_nth_layers(const LayerAc& a) {
  if (a.blocks <= 1) return fmt::format("layer {}", a.every - 1);
  if (a.blocks == 2) return fmt::format("layers {} and {}", a.every - 1, 2 * a.every - 1);
  return fmt::format("layers {}, {}, ..., {}", a.every - 1, 2 * a.every - 1, a.blocks * a.every - 1);
}

LayerAc layer_ac(const Plan& plan, int64_t n_layers) {
  LayerAc r;
  const int64_t k = plan.ac_layers, L = n_layers;
  if (plan.activation_checkpointing == ActivationCheckpointing::none || k <= 0 || L <= 0 || k >= L) return r;
  r.applies = true;
  int64_t best = -1;
  for (int64_t n = 1; n <= L; ++n) {  // floor(L/n) falls as n grows: the first of equal distance has more blocks
    const int64_t d = L / n > k ? L / n - k : k - L / n;
    if (best < 0 || d < best) best = d, r.every = n, r.blocks = L / n;
  }
  r.exact = best == 0 && plan.activation_checkpointing == ActivationCheckpointing::full;
  return r;
}

bool is_torchtitan_module_plan(const Plan& plan) {
  if (plan.tp_degree == 1) return true;  // torchtitan applies no module plan at tp 1, and neither does the lowering
  return plan.modules == preset_plan("sequence_parallel", plan).modules;
}

std::string torch_placement(const Placement& p) {
  switch (p.kind) {
    case Placement::Kind::replicate:
      return "Replicate()";
    case Placement::Kind::shard:
      return fmt::format("Shard({})", p.dim);
    case Placement::Kind::partial:
      return "Partial()";
  }
  return "Replicate()";
}

namespace {

const char* toml_bool(bool b) { return b ? "true" : "false"; }

}  // namespace

std::string export_torchtitan_toml(const Plan& plan, const ExportContext& ctx) {
  // A mixture of experts is none of torchtitan's llama3 (its own models qwen3, deepseek_v3, ... train it): the llama3
  // checks do not apply.
  const bool moe = ctx.model && ctx.model->moe.experts > 0;
  if (ctx.model && !moe)
    if (const std::string lacks = torchtitan_llama3_lacks(*ctx.model); !lacks.empty())
      throw Error(
          fmt::format("model '{}': torchtitan's llama3 model cannot express {}, so a torchtitan job config "
                      "would train another model; --format python prints the plan's parallelize_module dict",
                      yaml::shown(ctx.model->name), lacks));
  if (ctx.model && !moe && ctx.model->tie_word_embeddings)
    throw Error(fmt::format(
        "model '{}': tied input/output embeddings (tie_word_embeddings): torchtitan's llama3 before 0.3 has no weight "
        "tying, so this job config would train another (untied) model; --format python prints the plan's "
        "parallelize_module dict",
        yaml::shown(ctx.model->name)));
  // Off, torchtitan's job config needs context_parallel_load_balancer = None (0a2107f, 2025), which TOML cannot write,
  // and before that key torch's head-tail balancing was always on.
  if (plan.cp_degree > 1 && !plan.cp_load_balance)
    throw Error(
        fmt::format("{}: cp_load_balance false: a torchtitan job config (TOML) cannot turn the head-tail load "
                    "balancer off (its key takes None, which TOML has no value for); use --format torchtitan",
                    plan.source));
  // Pipeline parallelism: the split needs the model (the blocks torchtitan splits) unless it is torchtitan's own at the
  // schedule's default stages per rank.
  TorchtitanPipelineSplit pp_split;
  if (plan.pp_degree > 1) {
    if (ctx.model) {
      pp_split = torchtitan_pipeline_split(*ctx.model, plan);
    } else if (!plan.pp_split.empty() || plan.pp_stages_per_rank > 0) {
      throw Error(
          fmt::format("{}: pp_split / pp_stages_per_rank: the export needs --config CONFIG (the model's blocks) "
                      "to write torchtitan's split",
                      plan.source));
    }
    if (pp_split.needs_layers_per_stage && pp_split.layers_per_stage == 0 && !pp_split.explicit_split)
      pp_split.explicit_split = true;  // no layers_per_stage gives that count: the split is written out
  }
  const bool tp = plan.tp_degree > 1;
  const bool async = tp && plan.async_tp;
  std::string out;
  out += fmt::format("# torchtitan job config for the tptune plan '{}' ({}), written by `tp-plan export`.\n",
                     comment_text(plan.family), comment_text(plan.source));
  out +=
      "# For torchtitan before 0.3 (0.3 has no TOML loader: use --format torchtitan for its command line).\n"
      "# Keys of torchtitan's JobConfig (torchtitan/config/job_config.py, 2025 layout: [quantize.linear.float8],\n"
      "# [compile]). Merge these sections into your train config; keys not listed keep their values.\n";
  if (!is_torchtitan_module_plan(plan)) {
    out += fmt::format(
        "# NOTE: this plan's module styles are not torchtitan's apply_tp plan (sequence parallel{}), which is what\n"
        "# tensor_parallel_degree > 1 applies. To train this exact plan, replace apply_tp's plan with the one\n"
        "# `tp-plan export --format python` prints.\n",
        plan.loss_parallel ? ", loss parallel" : "");
  }
  if (moe)
    out += fmt::format(
        "# The model is a mixture of experts ({} routed experts, top {}): merge into the train config of\n"
        "# torchtitan's MoE model of it (qwen3, deepseek_v3, llama4), not llama3's.\n",
        ctx.model->moe.experts, ctx.model->moe.top_k);
  if (plan.float8 != Float8Recipe::none) {
    out += "\n[model]\n";
    out += "converters = [\"quantize.linear.float8\"]\n";
  }

  out += "\n[training]\n";
  out += fmt::format("local_batch_size = {}\n", plan.local_batch_size);
  // TrainingConfig.seq_len, for a plan chosen for a sequence length (search.seq_lens); else the train config's.
  if (plan.seq_len > 0) out += fmt::format("seq_len = {}\n", plan.seq_len);
  // torchtitan derives gradient_accumulation_steps = global_batch_size // (local_batch_size x dp degree).
  if (plan.gradient_accumulation_steps > 1)
    out += fmt::format("global_batch_size = {}  # {} gradient accumulation steps\n", plan.global_batch_size(),
                       plan.gradient_accumulation_steps);

  out += "\n[parallelism]\n";
  // HSDP: torchtitan's ParallelismConfig.data_parallel_replicate_degree (FSDP over dp_shard, replicated over this).
  out += fmt::format("data_parallel_replicate_degree = {}\n", plan.dp_replicate);
  out += fmt::format("data_parallel_shard_degree = {}\n", plan.dp_shard);
  out += fmt::format("tensor_parallel_degree = {}\n", plan.tp_degree);
  // Context parallelism (CP plans only): the degree and the rotate method of torchtitan's job config (from 9dec370 to
  // the TOML loader's removal); the head-tail load balancer is the default there (refused above when off).
  if (plan.cp_degree > 1) {
    out += fmt::format("context_parallel_degree = {}\n", plan.cp_degree);
    out += fmt::format("context_parallel_rotate_method = \"{}\"\n", to_string(plan.cp_rotate));
  }
  // Expert parallelism (EP plans only): ParallelismConfig.expert_parallel_degree, the ep axis of the sparse mesh
  // (pp, dp_replicate, efsdp, ep), efsdp = dp_shard x cp x tp / ep (the same key in torchtitan 0.3.0's configs.py).
  if (plan.ep_degree > 1) out += fmt::format("expert_parallel_degree = {}\n", plan.ep_degree);
  // Pipeline parallelism (PP plans only): ParallelismConfig's pipeline_parallel_* keys of the 2025 job config, and
  // module_fqns_per_model_part for a split torchtitan would not generate.
  if (plan.pp_degree > 1) {
    out += fmt::format("pipeline_parallel_degree = {}\n", plan.pp_degree);
    out += fmt::format("pipeline_parallel_schedule = \"{}\"\n", to_string(plan.pp_schedule));
    out += fmt::format("pipeline_parallel_microbatch_size = {}\n", plan.pp_microbatch_size);
    out += fmt::format("pipeline_parallel_first_stage_less_layers = {}\n", plan.pp_first_stage_less_layers);
    out += fmt::format("pipeline_parallel_last_stage_less_layers = {}\n", plan.pp_last_stage_less_layers);
    if (pp_split.explicit_split) {
      const PipelineSplit s = resolve_pipeline(*ctx.model, plan);
      std::vector<std::string> parts;
      for (int stage = 0; stage < s.num_stages(); ++stage) {
        std::vector<std::string> names;
        if (stage == 0) names.push_back("\"tok_embeddings\"");
        for (int l = 0; l < s.stage_layers[static_cast<size_t>(stage)]; ++l)
          names.push_back(fmt::format("\"layers.{}\"", s.first_layer(stage) + l));
        if (stage == s.num_stages() - 1) names.insert(names.end(), {"\"norm\"", "\"output\""});
        parts.push_back(fmt::format("[{}]", fmt::join(names, ", ")));
      }
      out += fmt::format("module_fqns_per_model_part = [{}]\n", fmt::join(parts, ", "));
    } else if (pp_split.needs_layers_per_stage) {
      out += fmt::format("pipeline_parallel_layers_per_stage = {}\n", pp_split.layers_per_stage);
    }
  }
  out += fmt::format("enable_async_tensor_parallel = {}\n", toml_bool(async));
  // torchtitan applies loss parallel whenever TP is on unless it is disabled.
  out += fmt::format("disable_loss_parallel = {}\n", toml_bool(!plan.loss_parallel));

  out += "\n[activation_checkpoint]\n";
  const LayerAc lac = layer_ac(plan, ctx.n_layers);
  const int64_t k = plan.ac_layers, L = ctx.n_layers;
  if (lac.exact) {
    out += "mode = \"selective\"\n";
    out += fmt::format(
        "# The plan checkpoints (full AC) the first {} of {} blocks (ac_layers {}). torchtitan cannot name blocks: "
        "its\n"
        "# layer-level selective AC wraps one block in every {} ({}) in full checkpointing instead: the\n"
        "# same count, {} blocks, so the same recompute and saved memory in tptune's model\n"
        "# (torchtitan/distributed/activation_checkpoint.py: a per-block counter, checkpointed when count % N == 0).\n",
        k, L, k, lac.every, every_nth_layers(lac), lac.blocks);
    out += fmt::format("selective_ac_option = \"{}\"\n", lac.every);
  } else {
    out += fmt::format("mode = \"{}\"\n", to_string(plan.activation_checkpointing));
    if (plan.activation_checkpointing == ActivationCheckpointing::selective)
      out += "selective_ac_option = \"op\"  # the per-op policy tptune simulates (save every second matmul)\n";
    if (lac.applies)
      out += fmt::format(
          "# NOTE: the plan checkpoints ({}) only the first {} of {} blocks (ac_layers {}); torchtitan cannot express\n"
          "# k of L blocks, so this checkpoints every block: more recompute and less memory than tptune simulated.\n"
          "# Nearest: mode = \"selective\", selective_ac_option = \"{}\" checkpoints (full AC) one block in every {}, "
          "{} "
          "of {}.\n",
          to_string(plan.activation_checkpointing), k, L, k, lac.every, lac.every, lac.blocks, L);
    else if (k > 0 && L <= 0 && plan.activation_checkpointing != ActivationCheckpointing::none)
      out += fmt::format(
          "# NOTE: the plan checkpoints only the first {} blocks (ac_layers {}); without --config (the model's layer\n"
          "# count) this checkpoints every block. torchtitan's selective_ac_option = \"N\" checkpoints every N-th "
          "block.\n",
          k, k);
  }

  if (plan.float8 != Float8Recipe::none) {
    const bool tensorwise = plan.float8 == Float8Recipe::tensorwise;
    out += "\n[quantize.linear.float8]\n";
    out += fmt::format("recipe_name = \"{}\"\n", to_string(plan.float8));
    out += "filter_fqns = [\"output\"]  # the output projection stays bf16, as tptune simulates it\n";
    if (tensorwise && plan.dp_shard > 1) {
      // tptune's lowering all-gathers the block weights in float8 under FSDP with tensorwise scaling.
      out += "enable_fsdp_float8_all_gather = true\n";
      out += "precompute_float8_dynamic_scale_for_fsdp = true\n";
    }
  }

  if (async) {
    out += "\n[compile]\n";
    out += "enable = true  # async TP is an inductor pass (micro-pipeline TP): it needs torch.compile\n";
    out += "components = [\"model\", \"loss\"]\n";
  }
  return out;
}

}  // namespace tptune
