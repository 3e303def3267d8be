// Pipeline parallelism verified end to end (mpirun -np 2 and -np 4, tag [pp]): the world is a [pp, tp] mesh with pp 2
// (tp 1 at np 2, tp 2 at np 4) on a 4-block tiny Llama. Each rank runs its schedule's actions (torch's order,
// sim/pipeline/schedule.h) on one Executor per microbatch, exchanging activations and gradients with its pp
// neighbours; the loss and every gradient must equal the unsharded step of the whole batch. Every schedule torchtitan
// offers passes; a wrong stage boundary or a dropped microbatch fails.
#include <mpi.h>

#include <catch2/catch.hpp>
#include <string>

#include "plans/language/config.h"
#include "plans/language/pipeline_parallel.h"
#include "plans/language/plan.h"
#include "plans/lower/lower.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/pipeline/verify.h"
#include "sim/pipeline/schedule.h"
#include "tests/runtime/mpi/pipeline_fixture.h"

using namespace tptune;

namespace {

using test::kPp;

VerifyReport verify_pp(PipelineScheduleKind kind, PipelineFault fault = PipelineFault::none) {
  test::PipelineFixture f(kind);
  f.run.fault = fault;
  CpuBackend be(f.mesh.tp, MPI_COMM_NULL, MPI_COMM_NULL, f.mesh.outer), local;
  return verify_pipeline(lower(f.cfg.model, f.cfg.training, f.micro), lower(f.cfg.model, f.cfg.training, f.ref), be,
                         local, f.run, 7);
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

TEST_CASE("pp 2: a dropped microbatch fails", "[mpi][pp]") {
  for (PipelineScheduleKind kind : {PipelineScheduleKind::one_f_one_b, PipelineScheduleKind::interleaved_1f1b}) {
    INFO(to_string(kind));
    const VerifyReport r = verify_pp(kind, PipelineFault::dropped_microbatch);
    CHECK_FALSE(r.pass());
    CHECK_FALSE(r.loss_pass);  // the last microbatch's loss is never computed
    // and its gradients are missing from the mean: the block weights of every stage are wrong
    int wrong = 0;
    for (const ParamCheck& c : r.params) wrong += c.pass ? 0 : 1;
    CHECK(wrong >= 36);  // 4 blocks x 9 parameters at least
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
