// Two mechanisms of the timeline (sim/timeline/timeline.h) on hand-built Programs with hand-set durations: compute
// slowed while a collective runs beside it (CostParams::overlap_compute_slowdown, overlap_p2p_compute_slowdown), and
// the host issuing kernels (CostParams::eager_dispatch_us, compiled_dispatch_us). Expected times are worked out in
// comments.
#include <fmt/format.h>

#include <catch2/catch.hpp>

#include "sim/cost/compute_cost.h"
#include "sim/timeline/timeline.h"
#include "tests/program_builder.h"

using namespace tptune;
using Builder = tptune::test::ProgramBuilder;

namespace {

OpCosts costs(std::vector<std::vector<double>> d) { return OpCosts{std::move(d)}; }

// Contention only: no host dispatch.
CostParams contention(double s, double s_p2p = 0) {
  CostParams c;
  c.eager_dispatch_us = c.compiled_dispatch_us = 0;
  c.overlap_compute_slowdown = s;
  c.overlap_p2p_compute_slowdown = s_p2p;
  return c;
}

}  // namespace

TEST_CASE("contention: compute beside a collective issued before it runs at 1 / (1 + s)") {
  Builder b(1);
  TensorId x = b.tensor("x"), g = b.tensor("g"), a = b.tensor("a"), o = b.tensor("o");
  b.segment(SegmentKind::head);
  b.op("gather", CollectiveOp{CollectiveKind::all_gather, Group::tp}, {x}, {g});
  b.op("mm1", GemmOp{}, {x}, {a});
  b.op("mm2", GemmOp{}, {a, g}, {o}, {0, 1});
  SECTION("a compute op fully overlapped takes (1 + s) x its time") {
    // gather [0, 200] on the TP stream; mm1 (100 us of work) runs beside it all along at 1/1.18: [0, 118]. mm2
    // (50 us) waits for the gather and is not slowed: [200, 250]. The compute stream ran 150 us of work in 168 us and
    // waited 82 us for the gather.
    Timeline t = schedule(b.p, costs({{200, 100, 50}}), contention(0.18));
    CHECK(t.segments[0].time(0, 1).end == Approx(118));
    CHECK(t.segments[0].time(0, 2).start == Approx(200));
    CHECK(t.segments[0].time(0, 2).end == Approx(250));
    CHECK(t.step_time_us == Approx(250));
    CHECK(t.contention_us == Approx(18));
    CHECK(t.compute_us == Approx(168));  // 100 + 50 of work, 18 lost to the gather
    CHECK(t.exposed_tp_us == Approx(82));
    CHECK(t.busy_us[static_cast<int>(Stream::compute)] == Approx(168));
  }
  SECTION("partly overlapped: slowed only while the collective runs") {
    // gather [0, 60]: mm1 does 60 / 1.18 = 50.847 us of its work by 60, the other 49.153 at full rate: ends at
    // 60 + 100 - 60 / 1.18 = 109.153. mm2 [109.153, 159.153]: the two-op step by hand.
    Timeline t = schedule(b.p, costs({{60, 100, 50}}), contention(0.18));
    const double mm1_end = 60 + 100 - 60 / 1.18;
    CHECK(t.segments[0].time(0, 1).end == Approx(mm1_end));
    CHECK(t.step_time_us == Approx(mm1_end + 50));
    CHECK(t.contention_us == Approx(60 - 60 / 1.18));
  }
  SECTION("s = 0: the schedule of the durations as given") {
    Timeline t = schedule(b.p, costs({{60, 100, 50}}), contention(0));
    CHECK(t.segments[0].time(0, 1).end == 100);
    CHECK(t.step_time_us == 150);
    CHECK(t.contention_us == 0);
  }
  SECTION("collectives that cannot overlap compute (CPU ranks) slow nothing") {
    // comm_overlaps_compute 0: gather [0, 100], mm1 [100, 200], mm2 [200, 250] on the one stream.
    CostParams c = contention(0.18);
    c.comm_overlaps_compute = 0;
    Timeline t = schedule(b.p, costs({{100, 100, 50}}), c);
    CHECK(t.step_time_us == 250);
    CHECK(t.contention_us == 0);
  }
}

TEST_CASE("contention: async TP's copy-engine p2p steps have their own slowdown, and concurrent ones add") {
  Builder b(1);
  TensorId x = b.tensor("x"), g = b.tensor("g"), h = b.tensor("h"), a = b.tensor("a");
  b.segment(SegmentKind::head);
  SECTION("a p2p step slows compute by overlap_p2p_compute_slowdown, not by the NCCL figure") {
    b.op("ring_step", CollectiveOp{CollectiveKind::p2p, Group::tp}, {x}, {g});
    b.op("mm", GemmOp{}, {x}, {a});
    // ring_step [0, 200] beside mm's 100 us: 100 x 1.03 = 103.
    Timeline t = schedule(b.p, costs({{200, 100}}), contention(0.18, 0.03));
    CHECK(t.segments[0].time(0, 1).end == Approx(103));
  }
  SECTION("a TP and a DP collective at once: s adds up") {
    b.op("tp_gather", CollectiveOp{CollectiveKind::all_gather, Group::tp}, {x}, {g});
    b.op("dp_gather", CollectiveOp{CollectiveKind::all_gather, Group::dp}, {x}, {h});
    b.op("mm", GemmOp{}, {x}, {a});
    // Both [0, 200]: mm's 100 us at 1 / (1 + 0.18 + 0.18) = 136 us.
    Timeline t = schedule(b.p, costs({{200, 200, 100}}), contention(0.18));
    CHECK(t.segments[0].time(0, 2).end == Approx(136));
  }
}

TEST_CASE("host dispatch: no kernel starts before the host has issued it") {
  // n ops in a chain (each reads the previous one's output), one kernel each (residual adds).
  auto chain = [](int n, bool compiled) {
    Builder b(1);
    b.p.training.compile = compiled;
    std::vector<TensorId> t{b.tensor("t0")};
    b.segment(SegmentKind::head);
    for (int i = 0; i < n; ++i) {
      t.push_back(b.tensor(fmt::format("t{}", i + 1)));
      b.op(fmt::format("add{}", i), ElementwiseOp{ElementwiseOp::Fn::add, 0}, {t[static_cast<size_t>(i)]}, {t.back()},
           i > 0 ? std::vector<int>{i - 1} : std::vector<int>{});
    }
    return b.p;
  };
  CostParams c;
  c.eager_dispatch_us = 10;
  c.compiled_dispatch_us = 3;
  SECTION("a Program of tiny kernels is host bound: step = n x dispatch (+ the last kernel)") {
    // Op i is issued at (i + 1) x 10 us and runs 1 us: the last starts at 100, ends at 101. The stream waited
    // 10 + 9 x 9 = 91 us for the host; compute (kernels + waits) is the whole step.
    Program p = chain(10, false);
    Timeline t = schedule(p, costs({std::vector<double>(10, 1.0)}), c);
    CHECK(t.segments[0].time(0, 9).start == Approx(100));
    CHECK(t.step_time_us == Approx(101));
    CHECK(t.host_wait_us == Approx(91));
    CHECK(t.compute_us == Approx(101));
    CHECK(t.segments[0].time(0, 9).wait == Wait::host);
  }
  SECTION("compiled: the per-kernel cost is compiled_dispatch_us") {
    Program p = chain(10, true);
    Timeline t = schedule(p, costs({std::vector<double>(10, 1.0)}), c);
    CHECK(t.step_time_us == Approx(10 * 3 + 1));
  }
  SECTION("a Program of large kernels is not: only the first dispatch shows") {
    // The host issues op i at (i + 1) x 10 us, long before op i - 1 ends: step = 10 + 10 x 1000.
    Program p = chain(10, false);
    Timeline t = schedule(p, costs({std::vector<double>(10, 1000.0)}), c);
    CHECK(t.step_time_us == Approx(10 + 10 * 1000));
    CHECK(t.host_wait_us == Approx(10));
  }
}

TEST_CASE("host dispatch: kernels launched per op, eager composite modules and compiled ones") {
  Builder b(1);
  TensorId x = b.tensor("x"), y = b.tensor("y");
  b.segment(SegmentKind::head);
  b.op("norm", ElementwiseOp{ElementwiseOp::Fn::rmsnorm, 0}, {x}, {y});
  b.op("act", ElementwiseOp{ElementwiseOp::Fn::swiglu, 0}, {x}, {y});
  b.op("rope", ElementwiseOp{ElementwiseOp::Fn::rope, 0}, {x}, {y});
  b.op("mm", GemmOp{}, {x}, {y});
  b.op("amax", CastFp8Op{CastFp8Op::Stage::amax}, {x}, {y});
  b.op("gather", CollectiveOp{CollectiveKind::all_gather, Group::tp}, {x}, {y});
  b.op("norm_bwd", ElementwiseOp{ElementwiseOp::Fn::rmsnorm_bwd, 0}, {x}, {y});
  const auto& ops = b.p.segments[0].ops;
  CostParams c;
  // The default traffic factors (tests/torch/count_eager_traffic.py): RMSNorm 9.0 forward, 14.7 backward; SiLU x
  // b 1.67; rope 5.1, rounded.
  SECTION("eager: the traffic factor's kernels (RMSNorm 9, its backward 15, SiLU x b 2, rope 5), else one") {
    b.p.training.compile = false;
    CHECK(launched_kernels(ops[0], b.p, c) == 9);
    CHECK(launched_kernels(ops[1], b.p, c) == 2);
    CHECK(launched_kernels(ops[2], b.p, c) == 5);
    CHECK(launched_kernels(ops[3], b.p, c) == 1);
    CHECK(launched_kernels(ops[4], b.p, c) == 1);
    CHECK(launched_kernels(ops[5], b.p, c) == 1);
    CHECK(launched_kernels(ops[6], b.p, c) == 15);
    CHECK(dispatch_us(ops[0], b.p, c, false) == 9 * c.eager_dispatch_us);
  }
  SECTION("compiled: one fused kernel each, the amax fused into an elementwise producer") {
    b.p.training.compile = true;
    CHECK(launched_kernels(ops[0], b.p, c) == 1);
    CHECK(launched_kernels(ops[1], b.p, c) == 1);
    // ops[4]'s x has no elementwise producer (producer_elementwise false): its amax is a reduction of its own
    CHECK(launched_kernels(ops[4], b.p, c) == 1);
    Op fused = ops[4];
    std::get<CastFp8Op>(fused.kind).producer_elementwise = true;
    CHECK(launched_kernels(fused, b.p, c) == 0);
    CHECK(dispatch_us(ops[0], b.p, c, false) == c.compiled_dispatch_us);
  }
}

TEST_CASE("torchtitan 0.3's CUDA graph: its forward and backward cost the host nothing, the optimizer step does") {
  Builder b(1);
  TensorId x = b.tensor("x"), y = b.tensor("y");
  b.segment(SegmentKind::head);
  b.op("norm", ElementwiseOp{ElementwiseOp::Fn::rmsnorm, 0}, {x}, {y});
  b.op("act", ElementwiseOp{ElementwiseOp::Fn::swiglu, 0}, {x}, {y});
  b.segment(SegmentKind::optimizer);
  b.op("adamw", ElementwiseOp{ElementwiseOp::Fn::rmsnorm, 0}, {x}, {y});
  b.p.segments[1].ops[0].phase = Phase::optimizer;
  b.p.training.compile = false;
  const CostParams c;
  const GpuSpec h100 = gpu_preset("h100-sxm"), cpu = gpu_preset("cpu");
  // Whether the step replays a graph: torchtitan 0.3's trainer on a CUDA device, without PP or EP (its
  // _validate_cuda_graphs refuses both with the default dispatcher); the dtensor family and the cpu device run eager.
  CHECK_FALSE(replays_cuda_graph(b.p, h100));
  b.p.plan.framework = Framework::torchtitan_0_3;
  CHECK(replays_cuda_graph(b.p, h100));
  CHECK_FALSE(replays_cuda_graph(b.p, cpu));
  b.p.plan.pp_degree = 2;
  CHECK_FALSE(replays_cuda_graph(b.p, h100));
  b.p.plan.pp_degree = 1;
  b.p.ep = 2;
  CHECK_FALSE(replays_cuda_graph(b.p, h100));
  b.p.ep = 1;
  // Replayed: the forward/backward ops issue nothing; the optimizer's op stays eager (RMSNorm's 9 kernels here).
  CHECK(dispatch_us(b.p.segments[0].ops[0], b.p, c, true) == 0);
  CHECK(dispatch_us(b.p.segments[1].ops[0], b.p, c, true) == 9 * c.eager_dispatch_us);
  // cost_ops: the step's host time is the optimizer's 9 x 10 us alone (eager: 9 + 2 + 9 kernels, 200 us).
  const OpCosts replayed = cost_ops(b.p, make_cluster(h100, 1, 1), c);
  CHECK(replayed.cuda_graph);
  CHECK(replayed.host_dispatch_us == Approx(9 * c.eager_dispatch_us));
  b.p.plan.framework = Framework::dtensor;
  const OpCosts eager = cost_ops(b.p, make_cluster(h100, 1, 1), c);
  CHECK_FALSE(eager.cuda_graph);
  CHECK(eager.host_dispatch_us == Approx(20 * c.eager_dispatch_us));
}

TEST_CASE(
    "eager modules: their measured kernel traffic, forward and backward apart, and the fused bytes when compiled") {
  // tests/torch/count_eager_traffic.py (torchtitan 9dec370's modules under eager autograd): RMSNorm 9.0x forward, 14.7x
  // backward; rope 5.1x / 5.4x; SiLU x b 1.67x / 1.8x the fused bytes the Program counts.
  Builder b(1);
  TensorId x = b.tensor("x"), y = b.tensor("y");
  b.segment(SegmentKind::head);
  const int64_t mib64 = int64_t{64} << 20;  // 67108864 bytes
  b.op("norm", ElementwiseOp{ElementwiseOp::Fn::rmsnorm, mib64}, {x}, {y});
  b.op("norm_bwd", ElementwiseOp{ElementwiseOp::Fn::rmsnorm_bwd, mib64}, {x}, {y});
  b.op("rope_bwd", ElementwiseOp{ElementwiseOp::Fn::rope_bwd, mib64}, {x}, {y});
  b.op("act_bwd", ElementwiseOp{ElementwiseOp::Fn::swiglu_bwd, mib64}, {x}, {y});
  const auto& ops = b.p.segments[0].ops;
  const GpuSpec h100 = gpu_preset("h100-sxm");
  const CostParams c;
  // One pass over 64 MiB at 3350 GB/s x 0.80: 67108864 / 2.68e12 s = 25.041 us; plus the 4 us launch.
  const double pass_us = 67108864.0 / (3350e9 * 0.80) * 1e6;
  CHECK(pass_us == Approx(25.041).epsilon(1e-4));
  SECTION("eager") {
    b.p.training.compile = false;
    CHECK(compute_cost(ops[0], b.p, h100, c).time_us == Approx(9.0 * pass_us + 4));   // 229.37 us
    CHECK(compute_cost(ops[1], b.p, h100, c).time_us == Approx(14.7 * pass_us + 4));  // 372.10 us
    CHECK(compute_cost(ops[2], b.p, h100, c).time_us == Approx(5.4 * pass_us + 4));   // 139.22 us
    CHECK(compute_cost(ops[3], b.p, h100, c).time_us == Approx(1.8 * pass_us + 4));   // 49.07 us
  }
  SECTION("compiled: one fused kernel each way") {
    b.p.training.compile = true;
    for (const Op& op : ops) CHECK(compute_cost(op, b.p, h100, c).time_us == Approx(pass_us + 4));
  }
}
