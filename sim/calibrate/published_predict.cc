#include "sim/calibrate/published_predict.h"

#include <fmt/format.h>

#include "plans/language/resolve/plan_resolve.h"
#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "sim/pipeline/step.h"
#include "sim/simulate.h"

namespace tptune {

namespace {

constexpr double kGiB = 1073741824.0;

}  // namespace

// The preset path of tools/plan_options.cc's resolve_plan() (the steps of plans/language/resolve/plan_resolve.h), with
// the options --preset, --tp, --float8, --ac-layers, --async-tp, --cp, --pp (with its schedule and microbatch) and --ep
// and no other (tests/integration/published_accuracy.sh compares every run's prediction with tp-plan simulate's).
Plan published_run_plan(const PublishedRun& run) {
  const Config& cfg = run.config;
  const PublishedPlan& p = run.plan;
  Plan plan = preset_base_plan(cfg, p.preset, 0);
  const std::string from_record = fmt::format("run {} ({})", run.id, run.at);
  plan.tp_degree = p.tp, plan.provenance["tp_degree"] = from_record;
  plan.float8 = p.float8, plan.provenance["float8"] = from_record;
  if (p.ac_layers > 0) plan.ac_layers = p.ac_layers, plan.provenance["ac_layers"] = from_record;
  if (p.async_tp) plan.async_tp = true, plan.provenance["async_tp"] = from_record;
  if (p.cp > 1) plan.cp_degree = p.cp, plan.provenance["cp_degree"] = from_record;
  // The mesh check (plans/language/expert_parallel.h) names the key's origin first: "<file>:<line>: plan.ep".
  if (p.ep > 1) plan.ep_degree = p.ep, plan.provenance["ep_degree"] = fmt::format("{}: plan.ep", run.at);
  if (p.pp > 1) {
    plan.pp_degree = p.pp, plan.provenance["pp_degree"] = from_record;
    plan.pp_schedule = p.pp_schedule, plan.provenance["pp_schedule"] = from_record;
    plan.pp_microbatch_size = p.pp_microbatch_size, plan.provenance["pp_microbatch_size"] = from_record;
  }
  resolve_dp_shard(cfg, plan, fmt::format("{}: plan.tp", run.at));
  resolve_gradient_accumulation(cfg, std::nullopt, plan);
  if (cfg.training.compile) plan.provenance["compile"] = fmt::format("config {}", cfg.path);
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
        // A pipeline's plan resolved now, so that a split or schedule torchtitan refuses is reported here.
        if (plan.pp_degree > 1) {
          resolve_pipeline(r.config.model, plan);
          pipeline_stage_cluster(plan, p.cluster);
        }
        p.plan = plan;
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
  const StepReport r = run.plan.pp_degree > 1 ? simulate_pipeline(run.run->config.model, run.run->config.training,
                                                                  run.plan, run.cluster, c)
                                              : simulate(run.prog, run.cluster, c);
  return {r.tokens_per_second_per_gpu, r.memory.allocator_reserved / kGiB, r.mfu};
}

}  // namespace tptune
