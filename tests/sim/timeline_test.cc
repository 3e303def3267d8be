// The timeline: hand-built Programs with hand-set durations (the expected times are worked out in the comments),
// and the fast schedule against the fully expanded reference on lowered Programs.
#include "sim/timeline/timeline.h"

#include <catch2/catch.hpp>

#include "plans/lower/lower.h"
#include "tests/fixtures.h"
#include "tests/program_builder.h"

using namespace tptune;
using tptune::test::small_model;
using Builder = tptune::test::ProgramBuilder;

namespace {

CollectiveOp coll(Group g) { return CollectiveOp{CollectiveKind::all_gather, g}; }

OpCosts costs(std::vector<std::vector<double>> d) { return OpCosts{std::move(d)}; }

// The schedule alone: no host dispatch, no slowdown of compute beside collectives (contention_dispatch_test.cc
// tests those), so that the times below are sums of the given durations.
CostParams schedule_only() {
  CostParams c;
  c.eager_dispatch_us = c.compiled_dispatch_us = 0;
  c.overlap_compute_slowdown = c.overlap_p2p_compute_slowdown = 0;
  return c;
}

}  // namespace

TEST_CASE("two-op overlap: a TP collective runs beside independent compute") {
  Builder b(1);
  TensorId x = b.tensor("x", false), a = b.tensor("a", false), g = b.tensor("g", false), o = b.tensor("o", false);
  b.segment(SegmentKind::head);
  b.op("mm1", GemmOp{}, {x}, {a});
  b.op("gather", coll(Group::tp), {x}, {g});
  b.op("mm2", GemmOp{}, {a, g}, {o}, {0, 1});
  CostParams c = schedule_only();
  SECTION("the collective hides behind the first matmul") {
    // mm1 [0, 100] on compute, gather [0, 60] on the TP stream, mm2 waits for both: [100, 150].
    Timeline t = schedule(b.p, costs({{100, 60, 50}}), c);
    CHECK(t.segments[0].time(0, 1).start == 0);
    CHECK(t.segments[0].time(0, 1).end == 60);
    CHECK(t.segments[0].time(0, 2).start == 100);
    CHECK(t.step_time_us == 150);
    CHECK(t.compute_us == 150);
    CHECK(t.exposed_tp_us == 0);
  }
  SECTION("a longer collective is exposed by what it outlasts the matmul") {
    // gather [0, 130]: mm2 starts at 130, 30 us after the compute stream went idle. Step 180.
    Timeline t = schedule(b.p, costs({{100, 130, 50}}), c);
    CHECK(t.segments[0].time(0, 2).start == 130);
    CHECK(t.step_time_us == 180);
    CHECK(t.exposed_tp_us == 30);
    CHECK(t.compute_us + t.exposed_tp_us + t.exposed_dp_us == t.step_time_us);
  }
  SECTION("where collectives cannot overlap compute (CPU ranks), the rank runs them in Program order") {
    // comm_overlaps_compute 0: mm1 [0, 100], gather [100, 160] on the rank's one thread, mm2 [160, 210]. The
    // compute stream is busy 150 us and waits 60 us for the gather: all of it is exposed, and the TP stream was
    // busy 60 us.
    c.comm_overlaps_compute = 0;
    Timeline t = schedule(b.p, costs({{100, 60, 50}}), c);
    CHECK(t.segments[0].time(0, 1).start == 100);
    CHECK(t.segments[0].time(0, 1).end == 160);
    CHECK(t.segments[0].time(0, 2).start == 160);
    CHECK(t.step_time_us == 210);
    CHECK(t.compute_us == 150);
    CHECK(t.exposed_tp_us == 60);
    CHECK(t.busy_us[static_cast<int>(Stream::tp)] == 60);
    CHECK(t.busy_us[static_cast<int>(Stream::compute)] == 150);
  }
}

TEST_CASE("FSDP all-gathers are prefetched one block ahead") {
  // A block repeated over L layers: an all-gather of the layer's weight on the DP stream (no inputs, no deps: the
  // previous unit issues it, after its first compute op starts), then a matmul reading the residual stream (a layer
  // chain) and the weight.
  auto build = [](int layers) {
    Builder b(layers);
    TensorId src = b.tensor("x0", false), sink = b.tensor("xL", false);
    TensorId in = b.tensor("input", true), w = b.tensor("w", true), out = b.tensor("output", true);
    b.segment(SegmentKind::embed_fwd);
    b.op("embed", ElementwiseOp{}, {}, {src});
    b.segment(SegmentKind::block_fwd, layers);
    b.op("fsdp.all_gather", coll(Group::dp), {}, {w});
    b.op("mm", GemmOp{}, {in, w}, {out}, {0});
    b.segment(SegmentKind::head);
    b.op("head", ElementwiseOp{}, {sink}, {});
    b.p.chains.push_back({in, out, src, sink, false});
    return b.p;
  };
  CostParams c = schedule_only();
  SECTION("compute-bound: only the first all-gather is exposed") {
    // embed [0, 10]; it issues layer 0's all-gather when it starts: [0, 40]. Layer 0: mm [40, 140] (30 us exposed
    // after embed); it issues layer 1's all-gather when mm starts: [40, 80]; mm [140, 240]. Layer 2: all-gather
    // from 140: [140, 180]; mm [240, 340]. head [340, 350].
    Program p = build(3);
    Timeline t = schedule(p, costs({{10}, {40, 100}, {10}}), c);
    const SegmentTimes& blk = t.segments[1];
    CHECK(blk.time(0, 0).start == 0);
    CHECK(blk.time(1, 0).start == 40);
    CHECK(blk.time(2, 0).start == 140);
    CHECK(blk.time(2, 1).start == 240);
    CHECK(t.step_time_us == 350);
    CHECK(t.exposed_dp_us == 30);
    CHECK(t.compute_us == 320);
  }
  SECTION("communication-bound: every all-gather is partly exposed, and the steady state is extrapolated") {
    // Layer 0: all-gather [0, 150], mm [150, 250]. Layer 1: all-gather [150, 300] (issued at 150, the DP stream
    // free then), mm [300, 400]: 50 exposed. Each later layer is the previous one 150 us later: layer 4's mm is
    // [750, 850]; head [850, 860]. Exposed DP: 140 (embed ended at 10) + 4 x 50 = 340.
    Program p = build(5);
    Timeline t = schedule(p, costs({{10}, {150, 100}, {10}}), c);
    const SegmentTimes& blk = t.segments[1];
    CHECK(blk.steady_from == 1);
    CHECK(blk.period_us == 150);
    CHECK(blk.time(2, 0).start == 300);
    CHECK(blk.time(3, 1).end == 700);
    CHECK(blk.time(4, 1).end == 850);
    CHECK(t.step_time_us == 860);
    CHECK(t.exposed_dp_us == 340);
    // The reference agrees.
    Timeline r = schedule_expanded(p, costs({{10}, {150, 100}, {10}}), c);
    CHECK(r.step_time_us == 860);
    CHECK(r.exposed_dp_us == 340);
  }
}

TEST_CASE("backward: the next block's all-gather goes ahead of this block's reduce-scatter") {
  // block.bwd over 4 layers: all-gather (prefetched) 30 us, a 100 us gradient matmul, then a reduce-scatter of its
  // output 50 us on the DP stream. Issue order on the DP stream: AG(0) (issued at the start), then in unit k:
  // AG(k+1) when its matmul starts, RS(k) at its end. Unit 0: AG(0) [0, 30], mm [30, 130], AG(1) [30, 60],
  // RS(0) [130, 180]. Unit 1: mm [130, 230]; AG(2) issued at 130 waits for RS(0): [180, 210]; RS(1) [230, 280].
  // Unit 2: mm [230, 330]; AG(3) [280, 310]; RS(2) [330, 380]. Unit 3: mm [330, 430], RS(3) [430, 480]. With a
  // single DP stream in Program order instead, AG(k+1) would wait for RS(k) and the matmuls would stall.
  Builder b(4);
  TensorId w = b.tensor("w", true), g = b.tensor("g", true);
  b.segment(SegmentKind::block_bwd, 4);
  b.p.segments.back().reverse = true;
  b.op("fsdp.all_gather", coll(Group::dp), {}, {w});
  b.op("mm", GemmOp{}, {w}, {g}, {0});
  b.op("fsdp.reduce_scatter", CollectiveOp{CollectiveKind::reduce_scatter, Group::dp}, {g}, {g}, {1});
  CostParams c = schedule_only();
  OpCosts oc = costs({{30, 100, 50}});
  Timeline t = schedule(b.p, oc, c);
  const SegmentTimes& s = t.segments[0];
  CHECK(s.time(2, 0).start == 180);
  CHECK(s.time(2, 1).start == 230);
  CHECK(s.time(3, 1).start == 330);
  CHECK(t.step_time_us == 480);
  CHECK(t.exposed_dp_us == 30 + 50);  // the first all-gather, and the last reduce-scatter after the last matmul
  Timeline r = schedule_expanded(b.p, oc, c);
  CHECK(r.step_time_us == 480);
}

namespace {

void check_same(const Program& p, const Timeline& fast, const Timeline& ref) {
  REQUIRE(fast.segments.size() == ref.segments.size());
  for (size_t s = 0; s < fast.segments.size(); ++s) {
    const SegmentTimes& f = fast.segments[s];
    const SegmentTimes& r = ref.segments[s];
    REQUIRE(f.instances == r.instances);
    for (int i = 0; i < f.instances; ++i)
      for (int j = 0; j < f.ops; ++j) {
        INFO(to_string(p.segments[s].kind)
             << " instance " << i << " op " << p.segments[s].ops[static_cast<size_t>(j)].name);
        REQUIRE(f.time(i, j).start == Approx(r.time(i, j).start).margin(1e-6));
        REQUIRE(f.time(i, j).end == Approx(r.time(i, j).end).margin(1e-6));
      }
  }
  CHECK(fast.step_time_us == Approx(ref.step_time_us).margin(1e-6));
  CHECK(fast.compute_us == Approx(ref.compute_us).margin(1e-6));
  CHECK(fast.exposed_tp_us == Approx(ref.exposed_tp_us).margin(1e-6));
  CHECK(fast.exposed_dp_us == Approx(ref.exposed_dp_us).margin(1e-6));
  CHECK(fast.contention_us == Approx(ref.contention_us).margin(1e-6));
  CHECK(fast.host_wait_us == Approx(ref.host_wait_us).margin(1e-6));
}

}  // namespace

TEST_CASE("the fast schedule equals the fully expanded one on lowered Programs") {
  struct Case {
    const char* preset;
    int tp, dp, nodes, gpn;
    ActivationCheckpointing ac;
    int64_t seq;
    bool async_tp = false;
    Float8Recipe float8 = Float8Recipe::none;
  };
  const Case cases[] = {
      {"sequence_parallel", 2, 4, 1, 8, ActivationCheckpointing::none, 256},
      {"sequence_parallel", 4, 2, 1, 8, ActivationCheckpointing::selective, 256},
      {"vanilla", 2, 2, 1, 4, ActivationCheckpointing::full, 256},
      {"sequence_parallel", 2, 8, 2, 8, ActivationCheckpointing::none, 4096},  // DP across nodes
      {"vanilla", 8, 1, 1, 8, ActivationCheckpointing::none, 4096},
      {"sequence_parallel", 1, 8, 1, 8, ActivationCheckpointing::selective, 2048},
      {"sequence_parallel", 4, 4, 2, 8, ActivationCheckpointing::none, 4096, true},
      {"sequence_parallel", 2, 4, 1, 8, ActivationCheckpointing::full, 2048, true, Float8Recipe::tensorwise},
      {"sequence_parallel", 8, 2, 2, 8, ActivationCheckpointing::selective, 8192, true},
      {"vanilla", 4, 2, 1, 8, ActivationCheckpointing::none, 1024, false, Float8Recipe::tensorwise},
  };
  int extrapolated = 0, contended = 0, host_bound = 0;
  for (const Case& k : cases) {
    for (int layers : {1, 2, 7}) {
      INFO(k.preset << " tp " << k.tp << " dp " << k.dp << " layers " << layers);
      Program p = test::lower_preset(k.preset,
                                     {.tp_degree = k.tp,
                                      .dp_shard = k.dp,
                                      .float8 = k.float8,
                                      .async_tp = k.async_tp,
                                      .loss_parallel = std::string(k.preset) == "sequence_parallel",
                                      .activation_checkpointing = k.ac},
                                     small_model(layers), k.seq);
      ClusterSpec cl = test::cluster_of("h100-sxm", k.nodes, k.gpn);
      // 0: the defaults (compute slowed beside collectives, eager or compiled host dispatch); 1: a host so slow
      // that it bounds every unit (the steady state's period is its dispatch); 2: no overlap (CPU ranks), no dispatch.
      for (int mode : {0, 1, 2}) {
        INFO("mode " << mode);
        const int overlap = mode == 2 ? 0 : 1;
        CostParams c;
        c.comm_overlaps_compute = overlap;
        if (mode == 1) c.eager_dispatch_us = c.compiled_dispatch_us = 400;
        if (mode == 2) c.eager_dispatch_us = c.compiled_dispatch_us = 0;
        OpCosts oc = cost_ops(p, cl, c);
        Timeline fast = schedule(p, oc, c);
        Timeline ref = schedule_expanded(p, oc, c);
        check_same(p, fast, ref);
        for (const auto& s : fast.segments) extrapolated += s.steady_from >= 0;
        contended += fast.contention_us > 0;
        host_bound += mode == 1 && fast.host_wait_us > 0;
        if (!overlap) {
          // One stream: the step is every op's duration, once per instance, with no gap; the compute time and the
          // exposed communication add up to it.
          double total = 0;
          for (size_t s = 0; s < p.segments.size(); ++s)
            for (double d : oc.duration_us[s]) total += d * fast.segments[s].instances;
          CHECK(fast.step_time_us == Approx(total).epsilon(1e-12));
          CHECK(fast.compute_us + fast.exposed_tp_us + fast.exposed_dp_us == Approx(total).epsilon(1e-12));
        }
      }
    }
  }
  CHECK(extrapolated > 10);  // the comparison exercised the extrapolation
  CHECK(contended > 10);     // compute slowed beside collectives
  CHECK(host_bound > 10);    // and steps held back by the host
}

TEST_CASE("a ScheduleCache gives the schedule without it: kept for one structure, rebuilt for another") {
  // The search's pattern (sim/search/eval.h): one structure and policy at local batch 1, 2 and 4 (the same
  // structure: built once, then kept), another policy (another structure: built), the first again (kept beside the
  // second), and the same Program with collectives that cannot overlap compute (other CostParams words: built).
  auto at = [](int64_t batch, ActivationCheckpointing ac) {
    return test::lower_preset("sequence_parallel",
                              {.tp_degree = 2,
                               .dp_shard = 4,
                               .async_tp = true,
                               .loss_parallel = true,
                               .activation_checkpointing = ac,
                               .local_batch_size = batch},
                              small_model(5), 512);
  };
  const ClusterSpec cl = test::cluster_of("h100-sxm", 1, 8);
  CostParams serial;
  serial.comm_overlaps_compute = 0;
  struct Step {
    Program p;
    CostParams c;
    size_t hits, misses;  // the cache's counts after it
  };
  const Step steps[] = {
      {at(1, ActivationCheckpointing::selective), CostParams{}, 0, 1},
      {at(2, ActivationCheckpointing::selective), CostParams{}, 1, 1},
      {at(4, ActivationCheckpointing::selective), CostParams{}, 2, 1},
      {at(1, ActivationCheckpointing::full), CostParams{}, 2, 2},
      {at(2, ActivationCheckpointing::selective), CostParams{}, 3, 2},
      {at(2, ActivationCheckpointing::selective), serial, 3, 3},
  };
  ScheduleCache cache;
  for (size_t k = 0; k < std::size(steps); ++k) {
    INFO("step " << k);
    const Step& x = steps[k];
    const OpCosts oc = cost_ops(x.p, cl, x.c);
    const Timeline got = schedule(x.p, oc, x.c, cache);
    const Timeline want = schedule(x.p, oc, x.c);
    CHECK(cache.hits == x.hits);
    CHECK(cache.misses == x.misses);
    // Bit for bit: the same arithmetic whichever way the structure came.
    REQUIRE(got.segments.size() == want.segments.size());
    CHECK(got.step_time_us == want.step_time_us);
    CHECK(got.compute_us == want.compute_us);
    CHECK(got.exposed_tp_us == want.exposed_tp_us);
    CHECK(got.exposed_dp_us == want.exposed_dp_us);
    CHECK(got.contention_us == want.contention_us);
    CHECK(got.host_wait_us == want.host_wait_us);
    for (size_t s = 0; s < got.segments.size(); ++s) {
      const SegmentTimes &g = got.segments[s], &w = want.segments[s];
      REQUIRE(g.instances == w.instances);
      CHECK(g.steady_from == w.steady_from);
      for (int i = 0; i < g.instances; ++i)
        for (int j = 0; j < g.ops; ++j) {
          REQUIRE(g.time(i, j).start == w.time(i, j).start);
          REQUIRE(g.time(i, j).end == w.time(i, j).end);
        }
    }
    if (k == 0) check_same(x.p, got, schedule_expanded(x.p, oc, x.c));  // and both are the reference's
  }
}

TEST_CASE("a ScheduleCache keeps the kMaxKept structures used last") {
  // One Program under kMaxKept + 1 CostParams whose slowdowns differ: as many structures (the words hold them).
  const Program p = test::lower_preset("sequence_parallel",
                                       {.tp_degree = 2,
                                        .dp_shard = 4,
                                        .async_tp = true,
                                        .loss_parallel = true,
                                        .activation_checkpointing = ActivationCheckpointing::selective,
                                        .local_batch_size = 1},
                                       small_model(5), 512);
  const ClusterSpec cl = test::cluster_of("h100-sxm", 1, 8);
  ScheduleCache cache;
  auto run = [&](size_t i) {
    CostParams c;
    c.overlap_compute_slowdown = 0.01 * static_cast<double>(i + 1);
    const OpCosts oc = cost_ops(p, cl, c);
    const Timeline got = schedule(p, oc, c, cache);
    CHECK(got.step_time_us == schedule(p, oc, c).step_time_us);
  };
  const size_t n = ScheduleCache::kMaxKept;
  for (size_t i = 0; i < n; ++i) run(i);
  CHECK(cache.misses == n);
  run(0);  // kept (the one used longest ago), and now used last
  CHECK(cache.hits == 1);
  run(n);  // one more: drops the one used longest ago, 1
  CHECK(cache.misses == n + 1);
  run(0);
  CHECK(cache.hits == 2);
  run(1);  // dropped: built again
  CHECK(cache.misses == n + 2);
  CHECK(cache.hits == 2);
}

TEST_CASE("extrapolation stops where a later instance waits for a value from another segment") {
  // block.fwd (5 layers): a 10 us matmul on the residual chain, then a 100 us DP collective writing a per-layer
  // tensor `s`; DP collectives queue on their stream, so s of layer i is ready at 100 (i + 1) (each may start once
  // the previous layer started, which is long before). head: 200 us of compute, [50, 250]. block.bwd (5 layers, in
  // layer order here): a 30 us op reading s of its layer. Instance i would start at 250 + 30 i: layers 0-2 find s
  // ready (100, 200, 300 <= 250, 280, 310), layer 3 must wait for 400 and layer 4 for 500.
  Builder b(5);
  TensorId src = b.tensor("x0", false), sink = b.tensor("xL", false);
  TensorId in = b.tensor("input", true), out = b.tensor("output", true), s = b.tensor("s", true);
  TensorId g = b.tensor("g", true);
  b.segment(SegmentKind::embed_fwd);
  b.op("embed", ElementwiseOp{}, {}, {src});
  b.segment(SegmentKind::block_fwd, 5);
  b.op("mm", GemmOp{}, {in}, {out});
  b.op("stat", coll(Group::dp), {out}, {s}, {0});
  b.segment(SegmentKind::head);
  b.op("head", ElementwiseOp{}, {sink}, {});
  b.segment(SegmentKind::block_bwd, 5);
  b.op("use", ElementwiseOp{}, {s}, {g});
  b.p.chains.push_back({in, out, src, sink, false});
  CostParams c = schedule_only();
  OpCosts oc = costs({{0}, {10, 100}, {200}, {30}});
  Timeline fast = schedule(b.p, oc, c);
  Timeline ref = schedule_expanded(b.p, oc, c);
  const SegmentTimes& bwd = fast.segments[3];
  // Layers 3 and 4: [410, 440], [510, 540].
  CHECK(bwd.time(2, 0).start == 310);
  CHECK(bwd.time(3, 0).start == 410);
  CHECK(bwd.time(4, 0).start == 510);
  CHECK(fast.step_time_us == 540);
  CHECK(ref.step_time_us == 540);
  CHECK(ref.segments[3].time(3, 0).start == 410);
}

TEST_CASE("the fast schedule equals the expanded one on full-size Programs, compute slowed beside collectives") {
  // The goldens' shapes: Llama 3 8B (32 layers) with FSDP beside TP, where the DP collectives of one segment still
  // run while the next one starts (the fast path must not extrapolate over their contention).
  struct Case {
    int tp, dp;
    Float8Recipe float8;
    bool async_tp;
  };
  for (const Case& k : {Case{4, 2, Float8Recipe::tensorwise, false}, Case{1, 8, Float8Recipe::none, false},
                        Case{4, 2, Float8Recipe::none, true}}) {
    INFO("tp " << k.tp << " dp " << k.dp);
    Program p = test::lower_preset(
        "sequence_parallel",
        {.tp_degree = k.tp, .dp_shard = k.dp, .float8 = k.float8, .async_tp = k.async_tp, .loss_parallel = true},
        test::llama3_8b(), 8192);
    ClusterSpec cl = test::cluster_of("h100-sxm", 1, 8);
    CostParams c;
    OpCosts oc = cost_ops(p, cl, c);
    check_same(p, schedule(p, oc, c), schedule_expanded(p, oc, c));
  }
}

TEST_CASE(
    "405B beside FSDP's long collectives: the fast schedule extrapolates every block segment, and equals the "
    "expanded one") {
  // The search's and the callgrind gate's workload: Llama 3 405B at tp 8 over 128 FSDP ranks. The DP reduce-scatters
  // of the backward run through all 126 units of the short per-block segment that follows, and eager dispatch issues
  // that segment's units slower than the GPU runs them (the host's lead from the long segments covers it): neither
  // may keep the fast path from extrapolating, and what it extrapolates must be exact.
  Program p = test::lower_preset("sequence_parallel", {.tp_degree = 8, .dp_shard = 128, .loss_parallel = true},
                                 test::model_named("llama3-405b"), 8192);
  ClusterSpec cl = test::cluster_of("h100-sxm", 128, 8);
  CostParams c;
  OpCosts oc = cost_ops(p, cl, c);
  const Timeline fast = schedule(p, oc, c);
  check_same(p, fast, schedule_expanded(p, oc, c));
  for (size_t s = 0; s < fast.segments.size(); ++s) {
    INFO("segment " << s);
    if (fast.segments[s].instances >= 126) CHECK(fast.segments[s].steady_from >= 0);
  }
}
