// Pipeline parallelism verified end to end (mpirun -np 2 and -np 4, tag [pp]): the world is a [pp, tp] mesh with pp 2
// (tp 1 at np 2, tp 2 at np 4) on a 4-block tiny Llama. Each rank runs its schedule's actions (torch's order,
// sim/pipeline_schedule.h) on one Executor per microbatch, exchanging activations and gradients with its pp
// neighbours; the loss and every gradient must equal the unsharded step of the whole batch. Every schedule torchtitan
// offers passes; a wrong stage boundary fails.
#include <mpi.h>

#include <catch2/catch.hpp>
#include <string>

#include "plans/config.h"
#include "plans/lower.h"
#include "plans/pipeline_parallel.h"
#include "plans/plan.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/pipeline_verify.h"
#include "sim/pipeline_schedule.h"
#include "tests/runtime/mpi/mesh.h"

using namespace tptune;
using test::Mesh;
using test::world_size;

namespace {

constexpr int kPp = 2;

VerifyReport verify_pp(PipelineScheduleKind kind, PipelineFault fault = PipelineFault::none) {
  Config cfg = load_config(std::string(TPTUNE_SOURCE_DIR) + "/examples/tiny-llama.yaml");
  cfg.model.n_layers = 4;
  Plan base;
  base.tp_degree = world_size() / kPp;
  base.local_batch_size = 4;
  base.loss_parallel = true;
  Plan plan = preset_plan("sequence_parallel", base);
  plan.pp_degree = kPp;
  plan.pp_schedule = kind;
  plan.pp_microbatch_size = 1;
  Plan micro = plan;
  micro.local_batch_size = 1;
  micro.pp_degree = 1;
  Plan ref = plan;
  ref.tp_degree = 1;
  ref.pp_degree = 1;
  const PipelineSplit split = resolve_pipeline(cfg.model, plan);
  const PipelineSchedule sched = build_schedule(kind, split.pp, split.stages_per_rank, split.microbatches);
  Mesh mesh(plan.tp_degree);
  PipelineRun run;
  for (int s = 0; s < split.num_stages(); ++s)
    run.stages.push_back({split.first_layer(s), split.stage_layers[size_t(s)], sched.rank_of_stage(s)});
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
  run.fault = fault;
  CpuBackend be(mesh.tp), local;
  return verify_pipeline(lower(cfg.model, cfg.training, micro), lower(cfg.model, cfg.training, ref), be, local, run, 7);
}

}  // namespace

TEST_CASE("pp 2: 1F1B and interleaved 1F1B (2 stages per rank, 4 blocks) verify", "[mpi][pp]") {
  for (PipelineScheduleKind kind : {PipelineScheduleKind::one_f_one_b, PipelineScheduleKind::interleaved_1f1b}) {
    INFO(to_string(kind));
    const VerifyReport r = verify_pp(kind);
    CHECK(r.pass());
    CHECK(r.pp == kPp);
    CHECK(r.params.size() == 39);  // embedding, 4 x 9 block parameters, norm, output
    // the mean of 4 microbatch means == the mean over the batch, to fp32 rounding
    CHECK(r.loss_rel_err < 1e-6);
  }
}

TEST_CASE("pp 2: every schedule torchtitan offers verifies", "[mpi][pp]") {
  for (PipelineScheduleKind kind : all_pipeline_schedule_kinds()) {
    INFO(to_string(kind));
    CHECK(verify_pp(kind).pass());
  }
}

TEST_CASE("pp 2: a wrong stage boundary fails", "[mpi][pp]") {
  for (PipelineScheduleKind kind : {PipelineScheduleKind::one_f_one_b, PipelineScheduleKind::interleaved_1f1b}) {
    INFO(to_string(kind));
    const VerifyReport r = verify_pp(kind, PipelineFault::shifted_boundary);
    CHECK_FALSE(r.pass());
    CHECK_FALSE(r.loss_pass);  // a block never runs: the forward differs
  }
}
