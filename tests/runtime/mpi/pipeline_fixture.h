#pragma once
// The pipeline of the [pp] multi-rank tests: a 4-block tiny Llama, sequence-parallel plan at tp = world / 2 on pp 2,
// local batch 4 in microbatches of 1, and this rank's PipelineRun (the stages of torchtitan's split, the actions in
// torch's order: sim/pipeline/schedule.h), as tools/tp_run/pipeline.cc builds it for tp-run.
#include <string>

#include "plans/language/config.h"
#include "plans/language/pipeline_parallel.h"
#include "plans/language/plan.h"
#include "plans/lower/rewrite/pipeline_stage.h"
#include "runtime/pipeline/run.h"
#include "sim/pipeline/schedule.h"
#include "tests/runtime/mpi/mesh.h"

namespace tptune::test {

constexpr int kPp = 2;

struct PipelineFixture {
  Config cfg;
  Plan plan;   // the pipeline plan
  Plan micro;  // one microbatch of it (pp 1)
  Plan ref;    // the unsharded model on the whole batch
  Mesh mesh{world_size() / kPp};
  PipelineRun run;

  explicit PipelineFixture(PipelineScheduleKind kind) {
    cfg = load_config(std::string(TPTUNE_SOURCE_DIR) + "/examples/tiny-llama.yaml");
    cfg.model.n_layers = 4;
    Plan base;
    base.tp_degree = world_size() / kPp;
    base.local_batch_size = 4;
    base.loss_parallel = true;
    plan = preset_plan("sequence_parallel", base);
    plan.pp_degree = kPp;
    plan.pp_schedule = kind;
    plan.pp_microbatch_size = 1;
    micro = pipeline_microbatch_plan(plan);
    micro.pp_degree = 1;
    ref = plan;
    ref.tp_degree = 1;
    ref.pp_degree = 1;
    const PipelineSplit split = resolve_pipeline(cfg.model, plan);
    const PipelineSchedule sched = build_schedule(kind, split.pp, split.stages_per_rank, split.microbatches);
    run.stages = pipeline_stage_spans(split, kind);
    using K = PipelineStep::Kind;
    for (const PipelineAction& a : sched.ranks.at(size_t(mesh.outer_rank)))
      run.actions.push_back({a.stage, a.microbatch,
                             a.kind == PipelineActionKind::F   ? K::forward
                             : a.kind == PipelineActionKind::B ? K::backward
                             : a.kind == PipelineActionKind::I ? K::input_grad
                                                               : K::weight_grad});
    run.pp_rank = mesh.outer_rank;
    run.pp = mesh.outer;
    run.microbatches = int(split.microbatches);
  }
};

}  // namespace tptune::test
