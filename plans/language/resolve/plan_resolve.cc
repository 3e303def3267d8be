#include "plans/language/resolve/plan_resolve.h"

#include <fmt/format.h>

#include "plans/language/pipeline_parallel.h"
#include "plans/util/checked_math.h"
#include "plans/util/error.h"

namespace tptune {

Plan preset_base_plan(const Config& cfg, const std::string& preset, int default_tp) {
  const std::string from_config = fmt::format("config {}", cfg.path);
  Plan base;
  base.tp_degree = default_tp > 0 ? default_tp : cfg.cluster.gpus_per_node;
  base.provenance["tp_degree"] = default_tp > 0 ? "MPI world size" : "cluster.gpus_per_node of the config";
  base.loss_parallel = preset == "sequence_parallel";
  base.activation_checkpointing = cfg.training.activation_checkpointing;
  base.local_batch_size = cfg.training.local_batch_size;
  base.provenance["activation_checkpointing"] = from_config;
  base.provenance["local_batch_size"] = from_config;
  Plan plan = preset_plan(preset, base);
  plan.dp_shard = 0;
  return plan;
}

void resolve_dp_shard(const Config& cfg, Plan& plan, const std::string& tp_label) {
  if (plan.dp_shard > 0) return;
  const int64_t world = cfg.cluster.world_size();
  if (plan.pp_degree > 1) {
    // torchtitan's mesh [pp, dp_replicate, dp_shard, cp, tp]: dp_shard is what the other degrees leave of the world.
    const int64_t per_shard =
        checked_mul({plan.pp_degree, plan.tp_degree, plan.cp_degree, plan.dp_replicate}, "pp x tp x cp x dp_replicate");
    if (world % per_shard != 0)
      throw Error(fmt::format(
          "{}: pp {} x tp {} x cp {} x dp_replicate {} = {}: does not divide the cluster's {} GPUs ({} nodes x {}), "
          "so dp_shard = world / (pp x tp x cp x dp_replicate) is not whole",
          plan_key_origin(plan, "pp_degree"), plan.pp_degree, plan.tp_degree, plan.cp_degree, plan.dp_replicate,
          per_shard, world, cfg.cluster.nodes, cfg.cluster.gpus_per_node));
    plan.dp_shard = static_cast<int>(world / per_shard);
    plan.provenance["dp_shard"] = "world size / (pp x tp x cp x dp_replicate)";
  } else if (plan.cp_degree > 1) {
    // torchtitan's mesh [dp_replicate, dp_shard, cp, tp]: dp_shard is what the other degrees leave of the world.
    const int64_t per_shard =
        checked_mul({plan.tp_degree, plan.cp_degree, plan.dp_replicate}, "tp x cp x dp_replicate");
    if (world % per_shard != 0)
      throw Error(
          fmt::format("tp {} x cp {} x dp_replicate {} = {}: does not divide the cluster's {} GPUs ({} nodes x {}), "
                      "so dp_shard = world / (tp x cp x dp_replicate) is not whole",
                      plan.tp_degree, plan.cp_degree, plan.dp_replicate, per_shard, world, cfg.cluster.nodes,
                      cfg.cluster.gpus_per_node));
    plan.dp_shard = static_cast<int>(world / per_shard);
    plan.provenance["dp_shard"] = "world size / (tp x cp x dp_replicate)";
  } else if (plan.dp_replicate <= 1) {
    if (world % plan.tp_degree != 0)
      throw Error(fmt::format("{} {}: does not divide the cluster's {} GPUs ({} nodes x {})", tp_label, plan.tp_degree,
                              world, cfg.cluster.nodes, cfg.cluster.gpus_per_node));
    plan.dp_shard = static_cast<int>(world / plan.tp_degree);
    plan.provenance["dp_shard"] = "world size / tp";
  } else {
    // Both degrees are at most 2^20 (range-checked where they were read): the product fits int64.
    const int64_t per_shard = checked_mul(plan.tp_degree, plan.dp_replicate, "tp x dp_replicate");
    if (world % per_shard != 0)
      throw Error(fmt::format(
          "tp {} x dp_replicate {} = {}: does not divide the cluster's {} GPUs ({} nodes x {}), "
          "so dp_shard = world / (tp x dp_replicate) is not whole",
          plan.tp_degree, plan.dp_replicate, per_shard, world, cfg.cluster.nodes, cfg.cluster.gpus_per_node));
    plan.dp_shard = static_cast<int>(world / per_shard);
    plan.provenance["dp_shard"] = "world size / (tp x dp_replicate)";
  }
}

// torchtitan's train.py: global_batch_size (-1: local_batch_size x dp_degree) must be a multiple of local_batch_size x
// dp_degree (asserted), and gradient_accumulation_steps = global_batch_size // (local_batch_size x dp_degree),
// dp_degree the size of the data-parallel mesh, dp_replicate x dp_shard.
void resolve_gradient_accumulation(const Config& cfg, std::optional<int64_t> global_option, Plan& plan) {
  const bool from_option = global_option.has_value();
  if (!from_option && (cfg.training.global_batch_size <= 0 || plan.stated.count("gradient_accumulation_steps"))) return;
  const int64_t global = from_option ? *global_option : cfg.training.global_batch_size;
  const std::string where = from_option
                                ? std::string("--global-batch-size")
                                : fmt::format("{}: training.global_batch_size", cfg.training.global_batch_size_at);
  // local batch <= 2^16, each degree <= 2^20: checked anyway (a plan file's degrees are range-checked too).
  const int64_t per_microbatch = checked_mul({plan.local_batch_size, plan.dp_shard, plan.dp_replicate},
                                             "local_batch_size x dp_shard x dp_replicate");
  if (global % per_microbatch != 0)
    throw Error(fmt::format(
        "{}: {} is not a multiple of local_batch_size {} x dp_shard {} x dp_replicate {} = {} sequences per microbatch "
        "(torchtitan asserts global batch size % (local batch size x data-parallel degree) == 0)",
        where, global, plan.local_batch_size, plan.dp_shard, plan.dp_replicate, per_microbatch));
  plan.gradient_accumulation_steps = global / per_microbatch;
  plan.provenance["gradient_accumulation_steps"] =
      from_option ? fmt::format("option --global-batch-size {} / {}", global, per_microbatch)
                  : fmt::format("config {} global_batch_size {} / {}", cfg.training.global_batch_size_at, global,
                                per_microbatch);
}

}  // namespace tptune
