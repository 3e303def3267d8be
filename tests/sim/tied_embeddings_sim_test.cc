// Tied embeddings in the simulator: the tied add is priced as the memory-bound op it is, and the tied unit's FSDP
// collectives (one all-gather, one reduce-scatter) move fewer bytes than the untied embedding and head units'.
#include <catch2/catch.hpp>

#include "plans/lower/lower.h"
#include "sim/cost/compute_cost.h"
#include "sim/simulate.h"
#include "tests/fixtures.h"

using namespace tptune;

namespace {

Model tiny(bool tied) {
  Model m = test::model_named("tiny-llama");  // dim 64, 2 layers, vocab 256
  m.tie_word_embeddings = tied;
  return m;
}

const Op* op_named(const Program& p, const std::string& name) {
  for (const Segment& s : p.segments)
    for (const Op& op : s.ops)
      if (op.name == name) return &op;
  return nullptr;
}

}  // namespace

TEST_CASE("tied embeddings: the tied add costs its bytes at memory-bound speed") {
  const Program p = lower(tiny(true), Training{.seq_len = 16}, test::make_plan("sequence_parallel", {.tp_degree = 2}));
  const Op* add = op_named(p, "tok_embeddings.weight.grad_tied_add");
  REQUIRE(add);
  const GpuSpec gpu = gpu_preset("h100-sxm");
  const CostParams c;
  // Local gradient (128, 64) bf16: 3 x 8,192 x 2 B = 49,152 B at 3,350 GB/s x memory_bound_efficiency, plus the
  // memory-bound launch overhead: 49,152 / (3.35e12 x 0.8) s = 0.01834 us + 4 us.
  const ComputeEstimate e = compute_cost(*add, p, gpu, c);
  CHECK(e.time_us == Approx(49152.0 / (3350e9 * c.memory_bound_efficiency) * 1e6 + c.memory_bound_overhead_us));
}

TEST_CASE("tied embeddings: one FSDP unit moves less than the embedding's and the head's") {
  const Training t{.seq_len = 16};
  const Plan plan = test::make_plan("sequence_parallel", {.tp_degree = 2, .dp_shard = 2});
  auto dp_bytes = [&](bool tied) {
    const Program p = lower(tiny(tied), t, plan);
    int64_t n = 0;
    for (const Segment& s : p.segments)
      if (s.kind == SegmentKind::embed_fwd || s.kind == SegmentKind::head || s.kind == SegmentKind::embed_bwd)
        for (const Op& op : s.ops)
          if (auto* c = std::get_if<CollectiveOp>(&op.kind); c && c->group == Group::dp) n += c->bytes;
    return n;
  };
  // Tied (tests/plans/tied_embeddings_test.cc): all-gather 16,512 + reduce-scatter 33,024 = 49,536 B.
  // Untied: embedding all-gathered twice (2 x 16,384) and reduce-scattered (32,768); head 16,512 + 33,024: 115,072 B.
  CHECK(dp_bytes(true) == 49'536);
  CHECK(dp_bytes(false) == 115'072);
  // Both simulate; the tied step moves less over dp.
  const ClusterSpec cl = test::cluster_of("h100-sxm", 1, 4);
  const StepReport st = simulate(lower(tiny(true), t, plan), cl, CostParams{});
  const StepReport su = simulate(lower(tiny(false), t, plan), cl, CostParams{});
  CHECK(st.step_time_ms > 0);
  CHECK(st.dp_comm_busy_ms < su.dp_comm_busy_ms);
}
