// `tp-run profile` of a pipeline (mpirun -np 2 and -np 4, tag [pp]): the [pp 2, tp] mesh of pipeline_fixture.h runs
// its schedule under the profiler (runtime/pipeline/profile.h); the Profile must record every rank's actions in
// torch's order, the point-to-point sizes of its activation, the ops of one microbatch, and the loss that one
// microbatch gives unsharded.
#include <mpi.h>

#include <catch2/catch.hpp>
#include <cmath>

#include "plans/lower/lower.h"
#include "plans/program/profile_format.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/executor.h"
#include "runtime/pipeline/profile.h"
#include "tests/runtime/mpi/pipeline_fixture.h"

using namespace tptune;

TEST_CASE("pp 2: the pipeline profile records each rank's schedule, its p2p and one microbatch's ops", "[mpi][pp]") {
  for (PipelineScheduleKind kind : {PipelineScheduleKind::one_f_one_b, PipelineScheduleKind::interleaved_1f1b}) {
    INFO(to_string(kind));
    test::PipelineFixture f(kind);
    CpuBackend be(f.mesh.tp, MPI_COMM_NULL, MPI_COMM_NULL, f.mesh.outer);
    ProfileOptions o;
    o.warmup = 1, o.iters = 2, o.seed = 7;
    int steps = 0;
    int total_steps = 0;
    o.on_step = [&](int done, int total) { steps = done, total_steps = total; };
    const Program micro = lower(f.cfg.model, f.cfg.training, f.micro);
    const Profile p = profile_pipeline(micro, be, f.run, o);
    CHECK(steps == 5);  // 1 warm-up, 2 serialized, 2 overlapped
    CHECK(total_steps == 5);
    REQUIRE(p.pipeline);
    const ProfilePipeline& pl = *p.pipeline;
    CHECK(p.environment["ranks"] == test::world_size());
    CHECK(pl.pp == test::kPp);
    CHECK(pl.microbatches == 4);

    // Every rank's actions, as torch orders them (the schedule rebuilt here), with times that make sense.
    const PipelineSplit split = resolve_pipeline(f.cfg.model, f.plan);
    const PipelineSchedule sched = build_schedule(kind, split.pp, split.stages_per_rank, split.microbatches);
    REQUIRE(pl.ranks.size() == size_t(test::kPp));
    for (int r = 0; r < test::kPp; ++r) {
      const auto& want = sched.ranks[size_t(r)];
      const auto& got = pl.ranks[size_t(r)].actions;
      REQUIRE(got.size() == want.size());
      double last_start = 0;
      for (size_t k = 0; k < got.size(); ++k) {
        CHECK(got[k].stage == want[k].stage);
        CHECK(got[k].microbatch == want[k].microbatch);
        CHECK(got[k].kind == std::string(1, "FBIW"[int(want[k].kind)]));
        CHECK(got[k].start_us >= last_start);
        CHECK(got[k].end_us >= got[k].start_us + got[k].wait_us - 1e-3);
        last_start = got[k].start_us;
      }
      CHECK(pl.ranks[size_t(r)].busy_us > 0);
      CHECK(pl.ranks[size_t(r)].busy_us <= pl.ranks[size_t(r)].end_us + 1e-3);
    }
    // The activation one microbatch sends: 1 sequence x 32 tokens / tp (sequence parallel) x dim 64, fp32 (4 bytes):
    // 8192 / tp bytes; the profile sends 1/4, 1/2 and all of it from pp rank 0 to 1.
    const int64_t act = 8192 / f.plan.tp_degree;
    REQUIRE(pl.p2p.size() == 3);
    for (size_t i = 0; i < 3; ++i) {
      CHECK(pl.p2p[i].from == 0);
      CHECK(pl.p2p[i].to == 1);
      CHECK(pl.p2p[i].samples_us.size() == 2);
      CHECK(pl.p2p[i].time_us.median.value_or(-1) >= 0);
    }
    CHECK(pl.p2p[0].bytes == act / 4);
    CHECK(pl.p2p[1].bytes == act / 2);
    CHECK(pl.p2p[2].bytes == act);

    // One microbatch's ops, each timed on the rank that ran it; the optimizer phase is not run.
    int timed = 0;
    for (const ProfileOp& op : p.ops) {
      INFO(op.name);
      CHECK(op.measured == (op.phase != "optimizer"));
      if (!op.measured) continue;
      CHECK(op.samples_us.size() == 2);
      ++timed;
    }
    CHECK(timed > 50);

    // Every microbatch's Executor starts from the same seed, so the loss is one microbatch's, unsharded.
    CpuBackend local;
    Plan one = f.ref;
    one.local_batch_size = 1;
    ExecutorOptions eo;
    eo.run_optimizer = false;
    Executor e(lower(f.cfg.model, f.cfg.training, one), local, eo);
    e.init(7);
    e.step();
    REQUIRE(p.final_loss);
    CHECK(std::abs(*p.final_loss - e.loss()) <= 1e-5 * std::abs(e.loss()));

    // The file's round trip.
    const Profile back = parse_profile(profile_json(p), "pp.json");
    REQUIRE(back.pipeline);
    CHECK(back.pipeline->ranks.size() == pl.ranks.size());
    CHECK(back.pipeline->ranks[1].actions.size() == pl.ranks[1].actions.size());
    CHECK(back.pipeline->p2p[2].bytes == act);
    CHECK(back.pipeline->stages.size() == pl.stages.size());
  }
}
