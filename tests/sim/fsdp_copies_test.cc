// FSDP2's copy kernels (sim/timeline/fsdp_copies.h): the bytes each moves for one all-gather and one reduce-scatter of
// a 1024 x 1024 bf16 weight over dp 4, and where cost_ops() puts their time. Hand arithmetic in the comments.
#include "sim/timeline/fsdp_copies.h"

#include <catch2/catch.hpp>

#include "sim/gpu_spec.h"
#include "sim/timeline/timeline.h"
#include "tests/fixtures.h"
#include "tests/program_builder.h"

using namespace tptune;
using Builder = tptune::test::ProgramBuilder;

namespace {

constexpr double kE = 1024.0 * 1024.0;  // elements of the weight

struct Toy {
  Builder b{1};
  TensorId x, w, y, dy, gw;
  Toy() {
    b.p.dp = 4;
    x = b.tensor("x");
    w = b.tensor("w");
    y = b.tensor("y");
    dy = b.tensor("dy");
    gw = b.tensor("w.grad");
    for (TensorId t : {w, gw}) {
      b.p.tensors[static_cast<size_t>(t)].local_shape = {1024, 1024};
      b.p.tensors[static_cast<size_t>(t)].dtype = DType::bf16;
    }
    b.segment(SegmentKind::head);
    // 0: the all-gather of w (bf16: S = 2 MiB), 1: the forward GEMM reading it, 2: the weight-gradient GEMM,
    // 3: the reduce-scatter of its gradient in fp32 (4 MiB).
    b.op("fsdp.all_gather",
         CollectiveOp{CollectiveKind::all_gather, Group::dp, ReduceOp::sum, DType::bf16, int64_t{2} * 1024 * 1024, 0,
                      -1},
         {}, {w});
    b.op("mm", GemmOp{}, {x, w}, {y}, {0});
    b.op("mm.dw", GemmOp{}, {x, dy}, {gw});
    b.op("fsdp.reduce_scatter",
         CollectiveOp{CollectiveKind::reduce_scatter, Group::dp, ReduceOp::sum, DType::fp32, int64_t{4} * 1024 * 1024,
                      -1, 0},
         {gw}, {gw}, {2});
  }
};

}  // namespace

TEST_CASE("fsdp copies: the bytes of copy-in, copy-out and the reduce-scatter's chunk_cat") {
  Toy t;
  const auto& ops = t.b.p.segments[0].ops;
  const FsdpCopyBytes ag = fsdp_copy_bytes(ops[0], t.b.p);
  // Copy-in, per rank, on the shard (E / 4 elements): the fp32 shard read (4 B) and written as bf16 (2 B), then
  // read and written again into the all-gather input (2 + 2 B): (4E + S) / 4 = 1.5 MiB and 2S / 4 = 1 MiB.
  CHECK(ag.copy_in_shard_cast == (4 * kE + 2 * kE) / 4);
  CHECK(ag.copy_in == 2 * (2 * kE) / 4);
  // Copy-out: the whole all-gather output read and written into the unsharded parameter: 2S = 4 MiB.
  CHECK(ag.copy_out == 2 * 2 * kE);
  CHECK(ag.reduce_scatter_pre == 0);
  // chunk_cat: each bf16 gradient element read (2 B) and written as fp32 (4 B): 6 MiB.
  const FsdpCopyBytes rs = fsdp_copy_bytes(ops[3], t.b.p);
  CHECK(rs.reduce_scatter_pre == 6 * kE);
  CHECK(rs.copy_out == 0);
  // Not a DP collective, or no FSDP: nothing.
  CHECK(fsdp_copy_bytes(ops[1], t.b.p).copy_out == 0);
  t.b.p.dp = 1;
  CHECK(fsdp_copy_bytes(ops[0], t.b.p).copy_out == 0);
}

TEST_CASE("fsdp copies: each is a memory-bound kernel on the stream that runs it") {
  Toy t;
  const GpuSpec gpu = test::cluster_of("h100-sxm", 1, 8).gpu;  // 3350 GB/s
  CostParams c;                                                // memory_bound_efficiency 0.80, 4 us per kernel
  const double rate = 3350e9 * 0.80 / 1e6;                     // bytes per us: 2.68e6
  std::vector<std::vector<double>> d{{100, 100, 100, 100}};
  add_fsdp_copy_costs(t.b.p, gpu, c, d);
  // The all-gather (its stream waits for the copy-in stream): 1.5 MiB / 2.68e6 + 4 = 4.587 us, 1 MiB: 4.391 us.
  CHECK(d[0][0] == Approx(100 + (1.5 * kE / rate + 4) + (kE / rate + 4)));
  // The GEMM reading w pays the copy-out just before it on the compute stream: 4 MiB / 2.68e6 + 4 = 5.565 us.
  CHECK(d[0][1] == Approx(100 + 4 * kE / rate + 4));
  CHECK(d[0][1] == Approx(105.565).epsilon(1e-4));
  // The GEMM writing the gradient pays the chunk_cat: 6 MiB / 2.68e6 + 4 = 6.348 us; the reduce-scatter nothing.
  CHECK(d[0][2] == Approx(100 + 6 * kE / rate + 4));
  CHECK(d[0][3] == 100);
  // The same durations, with each op's copies recorded beside it (what the trace and the top ops show as slices of
  // their own): copy-in before the all-gather, copy-out before the GEMM reading w, the chunk_cat after the GEMM
  // writing its gradient.
  std::vector<std::vector<double>> d_shares{{100, 100, 100, 100}};
  std::vector<std::vector<FsdpCopyShare>> shares;
  add_fsdp_copy_costs(t.b.p, gpu, c, d_shares, &shares);
  CHECK(d_shares == d);
  REQUIRE(shares.size() == 1);
  REQUIRE(shares[0].size() == 4);
  CHECK(shares[0][0].before_us == Approx(d[0][0] - 100));
  CHECK(shares[0][0].after_us == 0);
  CHECK(shares[0][1].before_us == Approx(d[0][1] - 100));
  CHECK(shares[0][1].after_us == 0);
  CHECK(shares[0][2].before_us == 0);
  CHECK(shares[0][2].after_us == Approx(d[0][2] - 100));
  CHECK(shares[0][3].before_us == 0);
  CHECK(shares[0][3].after_us == 0);
  const auto& ops = t.b.p.segments[0].ops;
  CHECK(fsdp_copy_name(ops[0], true) == "fsdp.all_gather.copy_in");
  CHECK(fsdp_copy_name(ops[1], true) == "fsdp.all_gather.copy_out");
  CHECK(fsdp_copy_name(ops[2], false) == "fsdp.reduce_scatter.copy_in");
  SECTION("fsdp_copy_traffic_factor scales the bytes; 0 prices none (the cpu device)") {
    std::vector<std::vector<double>> d2{{100, 100, 100, 100}};
    c.fsdp_copy_traffic_factor = 2;
    add_fsdp_copy_costs(t.b.p, gpu, c, d2);
    CHECK(d2[0][1] == Approx(100 + 8 * kE / rate + 4));
    std::vector<std::vector<double>> d0{{100, 100, 100, 100}};
    c.fsdp_copy_traffic_factor = 0;
    add_fsdp_copy_costs(t.b.p, gpu, c, d0);
    CHECK(d0 == std::vector<std::vector<double>>{{100, 100, 100, 100}});
  }
}

TEST_CASE("fsdp copies: cost_ops() adds them to a lowered FSDP Program, and only there") {
  const ClusterSpec cl = test::cluster_of("h100-sxm", 1, 8);
  CostParams with, without;
  without.fsdp_copy_traffic_factor = 0;
  auto total = [&](const Program& p, const CostParams& c) {
    OpCosts oc = cost_ops(p, cl, c);
    double sum = 0;
    for (size_t s = 0; s < p.segments.size(); ++s)
      for (double x : oc.duration_us[s]) sum += x * segment_instances(p, p.segments[s]);
    return sum;
  };
  Program fsdp = test::lower_preset("sequence_parallel", {.tp_degree = 2, .dp_shard = 4}, test::small_model(2), 256);
  CHECK(total(fsdp, with) > total(fsdp, without));
  Program tp_only = test::lower_preset("sequence_parallel", {.tp_degree = 8}, test::small_model(2), 256);
  CHECK(total(tp_only, with) == total(tp_only, without));
}

TEST_CASE("fsdp copies: an OpCosts reused for a Program without FSDP keeps no earlier Program's copies") {
  // The search prices thousands of Programs into one OpCosts (cost_ops(p, cluster, c, out)); a dp 1 candidate after a
  // dp 4 one must not inherit the dp 4 candidate's copy shares in its top ops and trace.
  const ClusterSpec cl = test::cluster_of("h100-sxm", 1, 8);
  const CostParams c;
  OpCosts reused;
  cost_ops(test::lower_preset("sequence_parallel", {.tp_degree = 2, .dp_shard = 4}, test::small_model(2), 256), cl, c,
           reused);
  CHECK_FALSE(reused.fsdp_copies.empty());
  cost_ops(test::lower_preset("sequence_parallel", {.tp_degree = 8}, test::small_model(2), 256), cl, c, reused);
  CHECK(reused.fsdp_copies.empty());
}
