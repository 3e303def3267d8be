#include "sim/calibrate/published_predict.h"

#include <fmt/format.h>

#include "plans/error.h"
#include "plans/lower.h"
#include "sim/simulate.h"

namespace tptune {

namespace {

constexpr double kGiB = 1073741824.0;

}  // namespace

// The preset path of tools/plan_options.cc's resolve_plan(), with the options --preset, --tp, --float8, --ac-layers
// and --async-tp and no other (tests/integration/published_accuracy.sh compares it with tp-plan simulate).
Plan published_run_plan(const PublishedRun& run) {
  const Config& cfg = run.config;
  const PublishedPlan& p = run.plan;
  const std::string from_config = fmt::format("config {}", cfg.path);
  Plan base;
  base.tp_degree = cfg.cluster.gpus_per_node;
  base.provenance["tp_degree"] = "cluster.gpus_per_node of the config";
  base.loss_parallel = p.preset == "sequence_parallel";
  base.activation_checkpointing = cfg.training.activation_checkpointing;
  base.local_batch_size = cfg.training.local_batch_size;
  base.provenance["activation_checkpointing"] = from_config;
  base.provenance["local_batch_size"] = from_config;
  Plan plan = preset_plan(p.preset, base);
  plan.dp_shard = 0;
  const std::string from_record = fmt::format("run {} ({})", run.id, run.at);
  plan.tp_degree = p.tp, plan.provenance["tp_degree"] = from_record;
  plan.float8 = p.float8, plan.provenance["float8"] = from_record;
  if (p.ac_layers > 0) plan.ac_layers = p.ac_layers, plan.provenance["ac_layers"] = from_record;
  if (p.async_tp) plan.async_tp = true, plan.provenance["async_tp"] = from_record;
  const int64_t world = cfg.cluster.world_size();
  if (world % plan.tp_degree != 0)
    throw Error(fmt::format("{}: plan.tp: {} does not divide the cluster's {} GPUs ({} nodes x {})", run.at,
                            plan.tp_degree, world, cfg.cluster.nodes, cfg.cluster.gpus_per_node));
  plan.dp_shard = static_cast<int>(world / plan.tp_degree);
  plan.provenance["dp_shard"] = "world size / tp";
  if (cfg.training.global_batch_size > 0) {
    // local batch <= 2^16 and dp_shard <= 2^20 (their ranges): the product fits int64.
    const int64_t per_microbatch = plan.local_batch_size * plan.dp_shard * plan.dp_replicate;
    if (cfg.training.global_batch_size % per_microbatch != 0)
      throw Error(fmt::format(
          "{}: training.global_batch_size: {} is not a multiple of local_batch_size {} x dp_shard {} x dp_replicate {} "
          "= {} sequences per microbatch",
          cfg.training.global_batch_size_at, cfg.training.global_batch_size, plan.local_batch_size, plan.dp_shard,
          plan.dp_replicate, per_microbatch));
    plan.gradient_accumulation_steps = cfg.training.global_batch_size / per_microbatch;
  }
  if (cfg.training.compile) plan.provenance["compile"] = from_config;
  return preset_plan(p.preset, plan);  // the modules re-derived with the final toggles
}

PreparedRecord prepare_published(const std::vector<PublishedSource>& sources) {
  PreparedRecord rec;
  for (const auto& s : sources)
    for (const auto& r : s.runs) {
      if (!r.expressible()) continue;
      try {
        PreparedRun p;
        p.source = s.id;
        p.run = &r;
        p.cluster = resolve_cluster(r.config);
        const Plan plan = published_run_plan(r);
        p.prog = lower(r.config.model, r.config.training, plan);
        check_supported(p.prog, p.cluster);
        rec.runs.push_back(std::move(p));
      } catch (const Error& e) {
        // Errors of the config name its file and line already; the lowering's name a module or the plan.
        const std::string what = e.what();
        rec.not_predicted.push_back(
            {s.id, r.id, what.starts_with(s.file + ":") ? what : fmt::format("{}: run {}: {}", r.at, r.id, what)});
      }
    }
  return rec;
}

PublishedPrediction predict_run(const PreparedRun& run, const CostParams& c) {
  const StepReport r = simulate(run.prog, run.cluster, c);
  return {r.tokens_per_second_per_gpu, r.memory.peak / kGiB, r.mfu};
}

}  // namespace tptune
