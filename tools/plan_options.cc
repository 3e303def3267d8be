#include "tools/plan_options.h"

#include <fmt/format.h>

#include <fstream>
#include <iostream>

#include "plans/error.h"
#include "plans/limits.h"
#include "plans/yaml_util.h"

namespace tptune::tools {

void add_plan_options(CLI::App* cmd, PlanOptions& o, bool with_dp_shard) {
  cmd->add_option("config", o.config, "config YAML (model, training, cluster)")->required();
  cmd->add_option("--hf-config", o.hf_config, "a Hugging Face config.json that replaces the config's model section");
  auto* preset = cmd->add_option("--preset", o.preset, "plan preset: vanilla | sequence_parallel");
  auto* plan = cmd->add_option("--plan", o.plan_file, "plan YAML file");
  preset->excludes(plan);
  cmd->add_option("--tp", o.tp, "tensor-parallel degree");
  if (with_dp_shard) cmd->add_option("--dp-shard", o.dp_shard, "data-parallel (FSDP) degree; default world/tp");
  cmd->add_option("--float8", o.float8, "none | tensorwise | rowwise");
  cmd->add_option("--ac", o.ac, "activation checkpointing: none | selective | full");
  cmd->add_option("--local-batch-size", o.local_batch_size, "sequences per data-parallel rank");
  cmd->add_flag("--async-tp", o.async_tp, "micro-pipelined (async) TP; needs sequence parallel");
  auto* lp = cmd->add_flag("--loss-parallel", o.loss_parallel, "keep logits vocab-sharded for the loss");
  auto* nlp = cmd->add_flag("--no-loss-parallel", o.no_loss_parallel, "gather logits before the loss");
  lp->excludes(nlp);
}

namespace {

// A command-line number must lie in its range (plans/limits.h), like the same key in a YAML file.
template <class T>
void check_option(const char* name, const std::optional<T>& v, limits::IntRange r) {
  if (v && (*v < r.lo || *v > r.hi))
    throw Error(fmt::format("{}: expected an integer in {}, got {}", name, yaml::range_text(r), *v));
}

}  // namespace

Plan resolve_plan(const Config& cfg, const PlanOptions& o) {
  check_option("--tp", o.tp, limits::degree);
  check_option("--dp-shard", o.dp_shard, limits::degree);
  check_option("--local-batch-size", o.local_batch_size, limits::local_batch_size);
  Plan plan;
  if (!o.plan_file.empty()) {
    plan = load_plan(o.plan_file);
  } else {
    if (o.preset.empty()) throw Error("expected --preset NAME or --plan FILE");
    Plan base;
    base.tp_degree = o.tp.value_or(cfg.cluster.gpus_per_node);
    base.loss_parallel = o.preset == "sequence_parallel";
    base.activation_checkpointing = cfg.training.activation_checkpointing;
    base.local_batch_size = cfg.training.local_batch_size;
    plan = preset_plan(o.preset, base);
    plan.dp_shard = 0;  // filled below
  }
  if (o.tp) plan.tp_degree = *o.tp;
  if (plan.tp_degree < 1) throw Error(fmt::format("--tp: expected a positive integer, got {}", plan.tp_degree));
  if (o.float8) plan.float8 = parse_float8(*o.float8, "--float8");
  if (o.ac) plan.activation_checkpointing = parse_activation_checkpointing(*o.ac, "--ac");
  if (o.local_batch_size) plan.local_batch_size = *o.local_batch_size;
  if (o.async_tp) plan.async_tp = true;
  if (o.loss_parallel) plan.loss_parallel = true;
  if (o.no_loss_parallel) plan.loss_parallel = false;
  if (o.dp_shard) plan.dp_shard = *o.dp_shard;
  if (plan.dp_shard <= 0) {
    int world = cfg.cluster.world_size();
    if (world % plan.tp_degree != 0)
      throw Error(fmt::format("--tp {}: does not divide the cluster's {} GPUs ({} nodes x {})", plan.tp_degree, world,
                              cfg.cluster.nodes, cfg.cluster.gpus_per_node));
    plan.dp_shard = world / plan.tp_degree;
  }
  if (!o.preset.empty()) plan = preset_plan(o.preset, plan);  // re-derive the modules with the final toggles
  return plan;
}

void write_json(const nlohmann::json& j, const std::string& where) {
  if (where == "-") {
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::ofstream f(where);
  if (!f) throw Error(fmt::format("cannot write JSON to '{}'", where));
  f << j.dump(2) << "\n";
}

void write_text(const std::string& text, const std::string& where, const std::string& option) {
  std::ofstream f(where);
  if (!f) throw Error(fmt::format("{} {}: cannot write the file", option, where));
  f << text;
  if (!f) throw Error(fmt::format("{} {}: write failed", option, where));
}

}  // namespace tptune::tools
