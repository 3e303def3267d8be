// The pipeline one pp rank runs under tp-run; see tp_run_pipeline.h.
#include "tools/tp_run/pipeline.h"

#include "plans/language/pipeline_parallel.h"
#include "plans/lower/rewrite/pipeline_stage.h"
#include "sim/pipeline/schedule.h"

namespace tptune::tools {

PipelineRun pipeline_run(const Model& model, const Plan& plan, MPI_Comm pp, int pp_rank) {
  const PipelineSplit split = resolve_pipeline(model, plan);
  const PipelineSchedule sched = build_plan_schedule(plan, split);
  PipelineRun run;
  run.stages = pipeline_stage_spans(split, plan.pp_schedule);
  using K = PipelineStep::Kind;
  for (const PipelineAction& a : sched.ranks.at(size_t(pp_rank)))
    run.actions.push_back({a.stage, a.microbatch,
                           a.kind == PipelineActionKind::F   ? K::forward
                           : a.kind == PipelineActionKind::B ? K::backward
                           : a.kind == PipelineActionKind::I ? K::input_grad
                                                             : K::weight_grad});
  run.pp_rank = pp_rank;
  run.pp = pp;
  run.microbatches = int(split.microbatches);
  return run;
}

}  // namespace tptune::tools
