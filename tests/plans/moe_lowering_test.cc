// The lowering of a tiny mixture of experts (plans/lower/experts.cc) as torchtitan 0.3.0 runs it: op counts, the
// all-to-alls' bytes, the experts' FSDP on efsdp and their memory, recompute, and what it refuses.
#include <catch2/catch.hpp>
#include <string>

#include "plans/language/plan.h"
#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "sim/cost/cost_params.h"
#include "sim/memory.h"
#include "tests/fixtures.h"

using namespace tptune;

namespace {

Model tiny_moe() { return test::tiny_moe_model(); }

}  // namespace

namespace {

struct OpCount {
  int ep_all_to_all = 0, host_syncs = 0, grouped = 0;
  int64_t dispatch_bytes = 0, counts_bytes = 0;
  GemmOp w1;  // the first grouped GEMM (w1's forward)
};

// What one block's segment (`kind`) holds of the MoE (phase: forward, backward or recompute ops).
OpCount count(const Program& p, SegmentKind kind, Phase phase) {
  OpCount c;
  const Segment* s = p.segment(kind);
  REQUIRE(s != nullptr);
  for (const Op& op : s->ops) {
    if (op.phase != phase) continue;
    if (auto* col = std::get_if<CollectiveOp>(&op.kind); col && col->group == Group::ep) {
      ++c.ep_all_to_all;
      CHECK(col->kind == CollectiveKind::all_to_all);
      if (op.name == "moe.routed_experts.dispatch.all_to_all") c.dispatch_bytes = col->bytes;
      if (op.name == "moe.routed_experts.counts.all_to_all") c.counts_bytes = col->bytes;
    }
    if (auto* el = std::get_if<ElementwiseOp>(&op.kind); el && el->fn == ElementwiseOp::Fn::host_sync) ++c.host_syncs;
    if (auto* g = std::get_if<GemmOp>(&op.kind); g && g->groups > 1) {
      if (c.grouped++ == 0) c.w1 = *g;
    }
  }
  return c;
}

const CollectiveOp* find_collective(const Program& p, SegmentKind kind, const std::string& name) {
  for (const Op& op : p.segment(kind)->ops)
    if (op.name == name) return std::get_if<CollectiveOp>(&op.kind);
  return nullptr;
}

// tiny_moe at seq 16, local batch 2, sequence_parallel, with the toggles `t`.
Program lower_tiny(PlanToggles t) {
  t.local_batch_size = 2;
  return lower(tiny_moe(), Training{.seq_len = 16}, test::make_plan("sequence_parallel", t));
}

}  // namespace

TEST_CASE("expert parallel: a tiny MoE at tp 2 x ep 4 lowers the dispatch and combine as torchtitan 0.3.0 runs them",
          "[moe][lower]") {
  // dp_shard 4 x tp 2 = 8 ranks, ep 4, efsdp 4 x 2 / 4 = 2. With EP on the router's input is each tp rank's sequence
  // shard: T = 2 sequences x 16 / 2 = 16 tokens, N = T x top_k 2 = 32 routed copies. Balanced: each rank receives 32
  // rows, over 8 / 4 = 2 local experts of m = 32 x 4 / 8 = 16 rows.
  const Program p = lower_tiny({.tp_degree = 2, .dp_shard = 4, .ep_degree = 4});
  CHECK(p.ep == 4);
  CHECK(p.efsdp == 2);
  const OpCount f = count(p, SegmentKind::block_fwd, Phase::forward);
  CHECK(f.ep_all_to_all == 3);  // counts, dispatch, combine
  CHECK(f.host_syncs == 1);     // the .tolist() of the exchanged counts
  // The dispatch: ep 4 x 32 rows x dim 64 x 2 B = 16,384 B in the group (4,096 B sent per rank: 8 rows = N / ep to
  // each peer). The counts: ep 4 x 8 experts x 8 B = 256.
  CHECK(f.dispatch_bytes == 16'384);
  CHECK(f.counts_bytes == 256);
  CHECK(f.grouped == 3);  // w1, w3, w2
  CHECK(f.w1.groups == 2);
  CHECK(f.w1.m == 16);
  CHECK(f.w1.n == 32);
  CHECK(f.w1.k == 64);
  CHECK(f.w1.flops() == 2 * 2 * 16 * 32 * 64);
  const OpCount b = count(p, SegmentKind::block_bwd, Phase::backward);
  CHECK(b.ep_all_to_all == 2);  // the combine's and the dispatch's backward; the counts exchange is under no_grad
  CHECK(b.host_syncs == 0);
  CHECK(b.grouped == 6);  // input and weight gradients of w2, w1, w3
  // The experts' FSDP on efsdp: local w1, w3 (2, 32, 64) and w2 (2, 64, 32) = 3 x 4,096 elements, all-gathered in
  // bf16 (24,576 B) and reduce-scattered in fp32 (49,152 B) on their own group.
  const CollectiveOp* ag = find_collective(p, SegmentKind::block_fwd, "fsdp.experts.all_gather");
  REQUIRE(ag != nullptr);
  CHECK(ag->group == Group::efsdp);
  CHECK(ag->bytes == 24'576);
  const CollectiveOp* rs = find_collective(p, SegmentKind::block_bwd, "fsdp.experts.reduce_scatter");
  REQUIRE(rs != nullptr);
  CHECK(rs->group == Group::efsdp);
  CHECK(rs->bytes == 49'152);
  // The optimizer pre-hook: tokens_per_expert (8 x 4 B) all-reduced over dp and, with EP on, tp.
  const CollectiveOp* dp_sum = find_collective(p, SegmentKind::block_optimizer, "moe.tokens_per_expert.dp.all_reduce");
  REQUIRE(dp_sum != nullptr);
  CHECK(dp_sum->bytes == 32);
  CHECK(find_collective(p, SegmentKind::block_optimizer, "moe.tokens_per_expert.tp.all_reduce") != nullptr);
}

TEST_CASE("expert parallel: memory holds the experts' states sharded over efsdp", "[moe][lower][memory]") {
  // Expert elements per rank: ep 4 at tp 2: 2 layers x 3 x 2 x 32 x 64 = 24,576, whose fp32 master copy over efsdp 2
  // is 4 x 24,576 / 2 = 49,152 B beside the other parameters' 4 x elements / dp 4.
  const Program p = lower_tiny({.tp_degree = 2, .dp_shard = 4, .ep_degree = 4});
  double other = 0;
  for (const TensorDesc& d : p.tensors)
    if (d.role == TensorRole::parameter && !d.expert)
      other += static_cast<double>(numel(d.local_shape)) * (d.per_layer ? 2 : 1);  // (2 layers)
  const MemoryParts m = memory_parts(p, default_cost_params());
  CHECK(m.master_params == Approx(4 * other / 4 + 49'152));
  CHECK(m.optimizer == Approx(8 * other / 4 + 98'304));
}

TEST_CASE("expert parallel: EP off with TP shards every expert's ffn dim, routing imbalance grows the busiest group",
          "[moe][lower]") {
  // tp 2, ep 1: the router's input is replicated (T = 32 tokens, N = 64 copies) and the 8 experts are TP-sharded:
  // w1 (8, 32 / 2, 64), m = 64 / 8 = 8 rows per expert, no all-to-all.
  Program p = lower_tiny({.tp_degree = 2, .dp_shard = 4});
  OpCount f = count(p, SegmentKind::block_fwd, Phase::forward);
  CHECK(f.ep_all_to_all == 0);
  CHECK(f.host_syncs == 0);
  CHECK(f.w1.groups == 8);
  CHECK(f.w1.m == 8);
  CHECK(f.w1.n == 16);
  // The router scores' gradient is a partial sum over tp (each rank's rows are its ffn shard's share): all-reduced
  // over tp before the router's backward reads it.
  {
    const Segment* bwd = p.segment(SegmentKind::block_bwd);
    REQUIRE(bwd != nullptr);
    int scores_sums = 0;
    for (const Op& op : bwd->ops)
      if (auto* c = std::get_if<CollectiveOp>(&op.kind);
          c && c->group == Group::tp && c->kind == CollectiveKind::all_reduce && op.module == "moe.router")
        ++scores_sums;
    CHECK(scores_sums == 1);
  }
  // moe_imbalance 1.5 at ep 4: the busiest rank receives 1.5 x 32 = 48 rows, m = ceil(32 x 1.5 x 4 / 8) = 24, and
  // the dispatch moves ep 4 x 48 x 64 x 2 B = 24,576 B.
  Plan plan =
      test::make_plan("sequence_parallel", {.tp_degree = 2, .dp_shard = 4, .local_batch_size = 2, .ep_degree = 4});
  p = lower(tiny_moe(), Training{.seq_len = 16, .moe_imbalance = 1.5}, plan);
  f = count(p, SegmentKind::block_fwd, Phase::forward);
  CHECK(f.w1.m == 24);
  CHECK(f.dispatch_bytes == 24'576);
}

TEST_CASE("expert parallel: selective AC saves the all-to-alls, full AC without early stop re-runs them",
          "[moe][lower][ac]") {
  Program p = lower_tiny(
      {.tp_degree = 2, .dp_shard = 4, .activation_checkpointing = ActivationCheckpointing::selective, .ep_degree = 4});
  CHECK(count(p, SegmentKind::block_bwd, Phase::recompute).ep_all_to_all == 0);
  Plan plan = test::make_plan("sequence_parallel",
                              {.tp_degree = 2,
                               .dp_shard = 4,
                               .activation_checkpointing = ActivationCheckpointing::full,
                               .local_batch_size = 2,
                               .ep_degree = 4},
                              Framework::torchtitan_0_3);
  p = lower(tiny_moe(), Training{.seq_len = 16}, plan);
  const OpCount r = count(p, SegmentKind::block_bwd, Phase::recompute);
  CHECK(r.ep_all_to_all == 3);
  CHECK(r.host_syncs == 1);
  CHECK(r.grouped == 3);
}

TEST_CASE("expert parallel: what the MoE lowering does not plan is a one-line error", "[moe][lower]") {
  auto error = [](const Model& m, PlanToggles t) {
    t.local_batch_size = 2;
    try {
      lower(m, Training{.seq_len = 16}, test::make_plan("sequence_parallel", t));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  const Model m = tiny_moe();
  CHECK(error(m, {.tp_degree = 2, .dp_shard = 4, .ep_degree = 3}).find("ep_degree 3 does not divide dp_shard 4") !=
        std::string::npos);
  CHECK(error(m, {.tp_degree = 2, .async_tp = true}) ==
        "preset:sequence_parallel: async_tp: not lowered for a mixture-of-experts model (its MoE blocks have no "
        "micro-pipelined TP in torchtitan 0.3.0)");
  Model odd = m;
  odd.moe.expert_ffn_dim = 33;
  CHECK(error(odd, {.tp_degree = 2}) ==
        "layers.0.moe.routed_experts: tp 2 does not divide expert_ffn_dim 33: with ep_degree 1 each expert's w1/w3 are "
        "Shard(1) and w2 Shard(2) on tp (models/common/moe_sharding.py)");
  Model dense_first = m;  // (dense first blocks lower: tests/plans/dense_first_test.cc; not with an ac_layers split)
  dense_first.moe.dense_layers = 1;
  CHECK(error(dense_first, {}) == "<no error>");
}
