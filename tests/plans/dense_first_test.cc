// A mixture of experts whose first blocks keep a dense MLP (model.moe.dense_layers: DeepSeek-V3's
// first_k_dense_replace): two block templates in one Program (plans/program/program.h "Structure"), their layer ranges
// and the one residual chain, the FLOPs of a step by hand, parameters and memory against the published counts, that
// each template is the dense model's or the all-MoE model's block, and what it refuses (a plan's ac_layers split).
#include <catch2/catch.hpp>
#include <string>

#include "plans/language/plan.h"
#include "plans/lower/lower.h"
#include "plans/lower/parameter_count.h"
#include "plans/model/hf_config.h"
#include "plans/util/error.h"
#include "sim/cost/cost_params.h"
#include "sim/memory.h"
#include "sim/simulate.h"
#include "tests/fixtures.h"

using namespace tptune;

namespace {

// tiny_moe_model() (dim 64, 8 heads over 4 kv heads, 8 experts of 32, top 2, a shared expert of 64) with `layers`
// blocks, the first `dense` of them with the dense MLP of ffn 128.
Model dense_first(int64_t layers = 3, int64_t dense = 1) {
  Model m = test::tiny_moe_model();
  m.name = "tiny-dense-first-moe";
  m.n_layers = layers;
  m.moe.dense_layers = dense;
  return m;
}

// At seq 16, local batch 2, sequence_parallel, with the toggles `t`.
Program lower_tiny(const Model& m, PlanToggles t) {
  t.local_batch_size = 2;
  return lower(m, Training{.seq_len = 16}, test::make_plan("sequence_parallel", t));
}

std::string lower_error(const Model& m, PlanToggles t) {
  try {
    lower_tiny(m, t);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

bool has_fn(const Segment& s, ElementwiseOp::Fn fn) {
  for (const Op& op : s.ops)
    if (const auto* el = std::get_if<ElementwiseOp>(&op.kind); el && el->fn == fn) return true;
  return false;
}
bool has_module(const Segment& s, const std::string& prefix) {
  for (const Op& op : s.ops)
    if (op.module.rfind(prefix, 0) == 0) return true;
  return false;
}
bool reads(const Segment& s, TensorId t) {
  for (const Op& op : s.ops)
    for (TensorId x : op.inputs)
      if (x == t) return true;
  return false;
}
bool writes(const Segment& s, TensorId t) {
  for (const Op& op : s.ops)
    for (TensorId x : op.outputs)
      if (x == t) return true;
  return false;
}

// The op lists of two segments alike: names, phases, kinds, GEMM shapes, elementwise bytes, collective bytes and
// groups (their tensor ids differ: the Programs differ elsewhere).
void check_same_ops(const Segment& a, const Segment& b) {
  REQUIRE(a.ops.size() == b.ops.size());
  for (size_t j = 0; j < a.ops.size(); ++j) {
    const Op &x = a.ops[j], &y = b.ops[j];
    INFO(x.name << " vs " << y.name);
    CHECK(x.name == y.name);
    CHECK(x.phase == y.phase);
    REQUIRE(x.kind.index() == y.kind.index());
    CHECK(x.deps == y.deps);
    if (const auto* g = std::get_if<GemmOp>(&x.kind)) {
      const auto& h = std::get<GemmOp>(y.kind);
      CHECK((g->m == h.m && g->n == h.n && g->k == h.k && g->groups == h.groups));
    }
    if (const auto* el = std::get_if<ElementwiseOp>(&x.kind)) {
      CHECK(el->fn == std::get<ElementwiseOp>(y.kind).fn);
      CHECK(el->bytes == std::get<ElementwiseOp>(y.kind).bytes);
    }
    if (const auto* c = std::get_if<CollectiveOp>(&x.kind)) {
      CHECK(c->group == std::get<CollectiveOp>(y.kind).group);
      CHECK(c->bytes == std::get<CollectiveOp>(y.kind).bytes);
    }
  }
}

}  // namespace

TEST_CASE("dense first blocks: two block templates with their layer ranges and one residual chain",
          "[moe][dense_first][lower]") {
  const Program p = lower_tiny(dense_first(), {.activation_checkpointing = ActivationCheckpointing::full});
  using K = SegmentKind;
  struct Want {
    K kind;
    int first_layer, layer_count;
    bool reverse;
  };
  const Want want[] = {{K::embed_fwd, 0, 0, false},       {K::block_fwd, 0, 1, false},
                       {K::block_fwd, 1, 2, false},       {K::head, 0, 0, false},
                       {K::block_bwd, 1, 2, true},        {K::block_bwd, 0, 1, true},
                       {K::embed_bwd, 0, 0, false},       {K::block_optimizer, 0, 1, false},
                       {K::block_optimizer, 1, 2, false}, {K::optimizer, 0, 0, false}};
  REQUIRE(p.segments.size() == std::size(want));
  for (size_t i = 0; i < std::size(want); ++i) {
    const Segment& s = p.segments[i];
    INFO("segment " << i << " " << to_string(s.kind));
    CHECK(s.kind == want[i].kind);
    CHECK(s.first_layer == want[i].first_layer);
    CHECK(s.layer_count == want[i].layer_count);
    CHECK(s.reverse == want[i].reverse);
    CHECK(s.repeat == std::max(1, want[i].layer_count));
    if (is_block(s.kind)) CHECK(segment_instances(p, s) == want[i].layer_count);
  }
  // The dense blocks (segments 1, 5, 7) have the dense MLP and no router; the MoE blocks (2, 4, 8) the reverse.
  for (size_t i : {1, 5}) {
    CHECK(has_module(p.segments[i], "feed_forward.w1"));
    CHECK_FALSE(has_fn(p.segments[i], ElementwiseOp::Fn::moe_router));
  }
  for (size_t i : {2, 4}) {
    CHECK_FALSE(has_module(p.segments[i], "feed_forward"));
    CHECK(has_fn(p.segments[i], ElementwiseOp::Fn::moe_router));
  }
  // Full AC: each backward recomputes its own forward (the MoE blocks' their router, the dense blocks' none).
  for (const Segment* s : {&p.segments[4], &p.segments[5]}) {
    bool router_again = false, dense_again = false;
    for (const Op& op : s->ops) {
      if (op.phase != Phase::recompute) continue;
      const auto* el = std::get_if<ElementwiseOp>(&op.kind);
      router_again |= el && el->fn == ElementwiseOp::Fn::moe_router;
      dense_again |= op.module.rfind("feed_forward", 0) == 0;
    }
    CHECK(router_again == (s == &p.segments[4]));
    CHECK(dense_again == (s == &p.segments[5]));
  }
  CHECK(has_module(p.segments[8], "moe"));  // the tokens_per_expert all-reduce's block: the MoE optimizer step
  // One chain forward and one backward: both templates read the block input and write the block output (the
  // gradients alike), which every layer has.
  REQUIRE(p.chains.size() == 2);
  const LayerChain &fwd = p.chains[0], &bwd = p.chains[1];
  for (size_t i : {1, 2}) {
    CHECK(reads(p.segments[i], fwd.in));
    CHECK(writes(p.segments[i], fwd.out));
  }
  for (size_t i : {4, 5}) {
    CHECK(reads(p.segments[i], bwd.in));
    CHECK(writes(p.segments[i], bwd.out));
  }
  for (TensorId t : {fwd.in, fwd.out, bwd.in, bwd.out}) CHECK(p.tensor(t).layer_count == 0);
  // Each variant's parameters have its layers; their names are the same in both (layers.N.attention.wq.weight).
  int dense_params = 0, moe_params = 0;
  for (const TensorDesc& t : p.tensors) {
    if (t.role != TensorRole::parameter || !t.per_layer) continue;
    const bool dense = t.first_layer == 0;
    CHECK(t.layer_count == (dense ? 1 : 2));
    CHECK(p.copies(t) == t.layer_count);
    (dense ? dense_params : moe_params) += 1;
    if (t.name.rfind("feed_forward", 0) == 0) CHECK(dense);
    if (t.name.rfind("moe", 0) == 0) CHECK_FALSE(dense);
    CHECK(t.name.find(".2") == std::string::npos);  // (no "attention.wq.weight.2")
  }
  CHECK(dense_params == 2 + 4 + 3);        // norms, wq wk wv wo, w1 w2 w3
  CHECK(moe_params == 2 + 4 + 1 + 3 + 3);  // norms, attention, router gate, routed w1 w2 w3, shared w1 w2 w3
  // expand(): layer 1 (the first MoE block) reads what layer 0 (the dense block) wrote.
  const FlatProgram flat = expand(p);
  const Segment& moe_fwd = p.segments[2];
  bool linked = false;
  for (const FlatOp& f : flat.ops) {
    if (f.layer != 1 || f.op < moe_fwd.ops.data() || f.op >= moe_fwd.ops.data() + moe_fwd.ops.size()) continue;
    for (size_t i = 0; i < f.op->inputs.size(); ++i) {
      if (f.op->inputs[i] != fwd.in) continue;
      for (const FlatOp& w : flat.ops)
        if (w.layer == 0 && std::find(w.outputs.begin(), w.outputs.end(), f.inputs[i]) != w.outputs.end())
          linked = true;
    }
  }
  CHECK(linked);
}

TEST_CASE("dense first blocks: the FLOPs of a step, by hand", "[moe][dense_first][lower]") {
  // T = 2 sequences x 16 = 32 tokens, dim 64, 8 heads of 8 over 4 kv heads, tp 1, ep 1, full AC.
  //   attention projections: wq, wo 2 x 32 x 64 x 64 = 262,144 each, wk, wv 2 x 32 x 64 x 32 = 131,072 each: 786,432
  //   attention core (causal): b h s s (d + dv) = 2 x 8 x 16 x 16 x 16 = 65,536; backward 2.5x = 163,840
  //   dense MLP (ffn 128): 3 x 2 x 32 x 64 x 128 = 1,572,864
  //   MoE: router gate 2 x 32 x 64 x 8 = 32,768; routed experts (64 copies, balanced: 8 groups of 8 rows)
  //   3 x 2 x 8 x 8 x 64 x 32 = 786,432; shared expert (ffn 64) 3 x 2 x 32 x 64 x 64 = 786,432: 1,605,632
  // A dense block's forward GEMMs 786,432 + 1,572,864 = 2,359,296, a MoE block's 786,432 + 1,605,632 = 2,392,064.
  // 3 blocks, the first dense: forward 1 x 2,359,296 + 2 x 2,392,064 = 7,143,424; backward (input and weight
  // gradients) 2x = 14,286,848. Full AC with early stop (the DTensor family's torch) recomputes the forward up to the
  // last op whose output the backward reads: not a block's last GEMM, the dense w2 (2 x 32 x 128 x 64 = 524,288) and
  // the shared expert's w2 (2 x 32 x 64 x 64 = 262,144; the routed w2's output is re-made, the combine's backward reads
  // it): 7,143,424 - 1 x 524,288 - 2 x 262,144 = 6,094,848. Attention 3 x 65,536 = 196,608 forward and recompute,
  // 3 x 163,840 = 491,520 backward.
  const Program p = lower_tiny(dense_first(), {.activation_checkpointing = ActivationCheckpointing::full});
  int64_t gemm[4] = {}, attention[4] = {};  // by Phase
  int64_t dense_fwd = 0, moe_fwd = 0;
  for (const Segment& s : p.segments) {
    if (!is_block(s.kind)) continue;
    const int64_t n = segment_instances(p, s);
    for (const Op& op : s.ops) {
      const auto phase = static_cast<size_t>(op.phase);
      if (const auto* g = std::get_if<GemmOp>(&op.kind)) {
        gemm[phase] += n * g->flops();
        if (op.phase == Phase::forward && s.kind == SegmentKind::block_fwd)
          (s.first_layer == 0 ? dense_fwd : moe_fwd) += g->flops();
      }
      if (const auto* a = std::get_if<AttentionOp>(&op.kind)) attention[phase] += n * a->flops();
    }
  }
  CHECK(dense_fwd == 2'359'296);
  CHECK(moe_fwd == 2'392'064);
  CHECK(gemm[static_cast<size_t>(Phase::forward)] == 7'143'424);
  CHECK(gemm[static_cast<size_t>(Phase::backward)] == 14'286'848);
  CHECK(gemm[static_cast<size_t>(Phase::recompute)] == 6'094'848);
  CHECK(attention[static_cast<size_t>(Phase::forward)] == 196'608);
  CHECK(attention[static_cast<size_t>(Phase::backward)] == 491'520);
  CHECK(attention[static_cast<size_t>(Phase::recompute)] == 196'608);
}

TEST_CASE("dense first blocks: each template is the dense model's or the all-MoE model's block",
          "[moe][dense_first][lower]") {
  // tp 2 x dp_shard 2 x ep 2 (efsdp 2), full AC: the dense blocks' segments are those of the same model without
  // experts, the MoE blocks' those of the same model with every block MoE (op for op), and so are the bytes each block
  // saves for backward.
  const PlanToggles t{
      .tp_degree = 2, .dp_shard = 2, .activation_checkpointing = ActivationCheckpointing::full, .ep_degree = 2};
  const Program p = lower_tiny(dense_first(), t);
  Model all_moe = dense_first();
  all_moe.moe.dense_layers = 0;
  Model dense = dense_first();
  dense.moe = MoeSpec{};
  PlanToggles dense_t = t;
  dense_t.ep_degree = 1;
  const Program q = lower_tiny(all_moe, t), d = lower_tiny(dense, dense_t);
  check_same_ops(p.segments[1], *d.segment(SegmentKind::block_fwd));
  check_same_ops(p.segments[5], *d.segment(SegmentKind::block_bwd));
  check_same_ops(p.segments[7], *d.segment(SegmentKind::block_optimizer));
  check_same_ops(p.segments[2], *q.segment(SegmentKind::block_fwd));
  check_same_ops(p.segments[4], *q.segment(SegmentKind::block_bwd));
  check_same_ops(p.segments[8], *q.segment(SegmentKind::block_optimizer));
  const CostParams c = default_cost_params();
  const MemoryParts mp = memory_parts(p, c), mq = memory_parts(q, c), md = memory_parts(d, c);
  CHECK(mp.blocks == 2);
  CHECK(mp.dense_blocks == 1);
  CHECK(mp.saved_per_block == mq.saved_per_block);
  CHECK(mp.saved_per_dense_block == md.saved_per_block);
  CHECK(mp.block_params == std::max(mq.block_params, md.block_params));
  // The whole step simulates: the mean block forward lies between the dense model's and the all-MoE model's.
  const ClusterSpec cl = test::cluster_of("h100-sxm", 1);
  const StepReport rp = simulate(p, cl, c), rq = simulate(q, cl, c), rd = simulate(d, cl, c);
  CHECK(rp.step_time_ms > 0);
  CHECK(rp.memory.dense_blocks == 1);
  CHECK(rp.memory.activations == mp.saved_per_block * 2 + mp.saved_per_dense_block);
  CHECK(rp.block_forward_ms >= std::min(rq.block_forward_ms, rd.block_forward_ms) * (1 - 1e-9));
  CHECK(rp.block_forward_ms <= std::max(rq.block_forward_ms, rd.block_forward_ms) * (1 + 1e-9));
}

TEST_CASE("dense first blocks: DeepSeek-V3 16B and 671B lower from their config.json with the published counts",
          "[moe][dense_first][hf_config]") {
  const std::string dir = std::string(TPTUNE_SOURCE_DIR) + "/examples/hf/";
  struct Case {
    const char* config;
    int64_t layers, dense, total;
  };
  // tests/plans/moe_model_test.cc derives both totals from the published shapes.
  for (const Case& k : {Case{"deepseek-v3-16b", 27, 1, 15'706'484'224}, Case{"deepseek-v3", 61, 3, 671'026'404'352}}) {
    INFO(k.config);
    const Model m = load_hf_config(dir + k.config + "/config.json");
    CHECK(m.dense_first_blocks() == k.dense);
    const Program p = lower(m, Training{.seq_len = 4096}, test::make_plan("sequence_parallel", {}));
    const ParameterCount n = parameter_count(p);
    CHECK(n.total == k.total);
    CHECK(n.per_rank == k.total);  // tp 1, dp 1, ep 1: every parameter on the one rank
    const MemoryParts parts = memory_parts(p, default_cost_params());
    CHECK(parts.master_params == 4.0 * static_cast<double>(k.total));  // fp32 master weights, once each
    CHECK(parts.optimizer == 8.0 * static_cast<double>(k.total));
    CHECK(parts.dense_blocks == k.dense);
    CHECK(parts.blocks == k.layers - k.dense);
  }
}

TEST_CASE("dense first blocks: a plan's ac_layers split is refused with its keys, every block or none lowers",
          "[moe][dense_first][lower]") {
  CHECK(lower_error(dense_first(), {.activation_checkpointing = ActivationCheckpointing::full, .ac_layers = 1}) ==
        "preset:sequence_parallel: ac_layers 1: not lowered for a model with model.moe.dense_layers 1 (its dense and "
        "MoE blocks are two block templates, each checkpointed whole); expected 0 or 3 (every block)");
  CHECK(lower_error(dense_first(), {.activation_checkpointing = ActivationCheckpointing::selective, .ac_layers = 3}) ==
        "(no error)");
  // Every block dense (dense_layers = n_layers): one template, no MoE op.
  const Program all_dense = lower_tiny(dense_first(3, 3), {});
  CHECK(all_dense.segments.size() == 7);
  CHECK_FALSE(has_fn(*all_dense.segment(SegmentKind::block_fwd), ElementwiseOp::Fn::moe_router));
}
