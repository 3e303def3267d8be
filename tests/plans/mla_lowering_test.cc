// Multi-head latent attention (plans/lower/mla.cc) as torchtitan 0.3.0's DeepSeek-V3 shards it
// (models/deepseek_v3/sharding.py): the per-rank shapes at tp 2, which projections are colwise, rowwise or replicated,
// the attention core's q/k and v head widths, the collectives, and what it refuses.
#include <catch2/catch.hpp>
#include <string>

#include "plans/export/torchtitan_recipe.h"
#include "plans/lower/lower.h"
#include "plans/lower/parameter_count.h"
#include "plans/util/error.h"
#include "tests/fixtures.h"

using namespace tptune;

namespace {

// tiny-moe (dim 64, 8 heads, 8 experts of 32, top 2, a shared expert of 64) with latent attention: q through wq_a
// (rank 16), q_norm and wq_b; kv through wkv_a (kv rank 16 + rope 8), kv_norm and wkv_b; q/k heads of nope 8 + rope 8
// = 16, v heads of 8.
Model tiny_mla(int64_t q_lora_rank = 16) {
  Model m = test::tiny_moe_model();
  m.name = "tiny-mla";
  m.mla = {q_lora_rank, 16, 8, 8, 8};
  return m;
}

const Op* find_op(const Program& p, SegmentKind kind, const std::string& name) {
  for (const Op& op : p.segment(kind)->ops)
    if (op.name == name) return &op;
  return nullptr;
}

const GemmOp& gemm(const Program& p, const std::string& name) {
  const Op* op = find_op(p, SegmentKind::block_fwd, name);
  REQUIRE(op != nullptr);
  const GemmOp* g = std::get_if<GemmOp>(&op->kind);
  REQUIRE(g != nullptr);
  return *g;
}

const TensorDesc& param(const Program& p, const std::string& name) {
  for (const TensorDesc& t : p.tensors)
    if (t.role == TensorRole::parameter && t.name == name) return t;
  FAIL("no parameter " << name);
  return p.tensors.front();
}

std::string lower_error(const Model& m, PlanToggles t) {
  t.local_batch_size = 2;
  try {
    lower(m, Training{.seq_len = 16}, test::make_plan("sequence_parallel", t));
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST_CASE("latent attention at tp 2: wq_b and wkv_b colwise, wo rowwise, the low-rank projections replicated",
          "[mla][lower]") {
  // Sequence parallel at tp 2, 2 sequences of 16: the attention's input is all-gathered to the 32 tokens.
  const Program p = lower(tiny_mla(), Training{.seq_len = 16},
                          test::make_plan("sequence_parallel", {.tp_degree = 2, .local_batch_size = 2}));
  // Replicated (sharding.py: "low-rank projections and norms keep Replicate weights"): whole weights, every rank runs
  // the whole GEMM on the 32 tokens. wq_a (16, 64); wkv_a (16 + 8, 64).
  CHECK(param(p, "attention.wq_a.weight").local_shape == Shape{16, 64});
  CHECK(param(p, "attention.wq_a.weight").param_shard_dim == -1);
  CHECK(param(p, "attention.wkv_a.weight").local_shape == Shape{24, 64});
  CHECK(param(p, "attention.wkv_a.weight").param_shard_dim == -1);
  CHECK(param(p, "attention.q_norm.weight").local_shape == Shape{16});
  CHECK(param(p, "attention.kv_norm.weight").local_shape == Shape{16});
  const GemmOp& wq_a = gemm(p, "attention.wq_a.fwd");
  CHECK((wq_a.m == 32 && wq_a.n == 16 && wq_a.k == 64));
  const GemmOp& wkv_a = gemm(p, "attention.wkv_a.fwd");
  CHECK((wkv_a.m == 32 && wkv_a.n == 24 && wkv_a.k == 64));
  // Colwise: wq_b (8 heads x 16, 16) -> S(0), 4 heads a rank: (64, 16); wkv_b (8 x (8 + 8), 16) -> (64, 16).
  CHECK(param(p, "attention.wq_b.weight").global_shape == Shape{128, 16});
  CHECK(param(p, "attention.wq_b.weight").local_shape == Shape{64, 16});
  CHECK(param(p, "attention.wq_b.weight").param_shard_dim == 0);
  CHECK(param(p, "attention.wkv_b.weight").local_shape == Shape{64, 16});
  CHECK(param(p, "attention.wkv_b.weight").param_shard_dim == 0);
  // Rowwise wo: (dim 64, 8 heads x v 8) -> S(1): (64, 32), its input 4 heads x 8.
  CHECK(param(p, "attention.wo.weight").local_shape == Shape{64, 32});
  CHECK(param(p, "attention.wo.weight").param_shard_dim == 1);
  const GemmOp& wo = gemm(p, "attention.wo.fwd");
  CHECK((wo.m == 32 && wo.n == 64 && wo.k == 32));
  // The core on 4 local heads: q/k of 16, v of 8. FLOPs: causal b x h x s^2 x (16 + 8) = 2 x 4 x 256 x 24 = 49,152
  // (QK^T 2 x 4 x 256 x 16 x 2 / 2 = 32,768 plus PV 16,384); backward 2.5 x = 122,880.
  const Op* core = find_op(p, SegmentKind::block_fwd, "attention.core.fwd");
  REQUIRE(core != nullptr);
  const AttentionOp& a = std::get<AttentionOp>(core->kind);
  CHECK((a.batch == 2 && a.seq == 16 && a.n_heads == 4 && a.n_kv_heads == 4 && a.head_dim == 16));
  CHECK(a.v_head_dim == 8);
  CHECK(a.flops() == 49'152);
  AttentionOp b = a;
  b.backward = true;
  CHECK(b.flops() == 122'880);
  // Rope on the rope part only: q's 4 heads x 8 and k_pe's 8 (replicated, shared by the heads).
  const Op* q_rope = find_op(p, SegmentKind::block_fwd, "attention.q.rope");
  const Op* k_rope = find_op(p, SegmentKind::block_fwd, "attention.k_pe.rope");
  REQUIRE((q_rope && k_rope));
  CHECK(std::get<ElementwiseOp>(q_rope->kind).flops == 3 * 32 * 4 * 8);
  CHECK(std::get<ElementwiseOp>(k_rope->kind).flops == 3 * 32 * 8);
  // TP collectives of the attention: forward the input's all-gather and wo's reduce-scatter; backward the mirror
  // (wo's gradient all-gathered, the input's reduce-scattered): the gradient stays Partial through the replicated
  // projections and norms, so no activation all-reduce is added.
  auto tp_collectives = [&](SegmentKind kind) {
    std::vector<CollectiveKind> out;
    for (const Op& op : p.segment(kind)->ops)
      if (auto* c = std::get_if<CollectiveOp>(&op.kind);
          c && c->group == Group::tp && op.module.rfind("attention", 0) == 0 && op.phase != Phase::recompute)
        out.push_back(c->kind);
    return out;
  };
  CHECK(tp_collectives(SegmentKind::block_fwd) ==
        std::vector<CollectiveKind>{CollectiveKind::all_gather, CollectiveKind::reduce_scatter});
  CHECK(tp_collectives(SegmentKind::block_bwd) ==
        std::vector<CollectiveKind>{CollectiveKind::all_gather, CollectiveKind::reduce_scatter});
}

TEST_CASE("latent attention's parameters per rank are the model's: at tp 1 all of them, at tp 2 the shards",
          "[mla][lower]") {
  // tiny_mla without dense blocks: the lowered parameters sum to Model::total_parameters() (plans/model/model.cc),
  // both for wq_a/q_norm/wq_b and for one wq (q_lora_rank 0).
  for (int64_t q_lora : {16, 0}) {
    const Model m = tiny_mla(q_lora);
    const Program p = lower(m, Training{.seq_len = 16}, test::make_plan("sequence_parallel", {.local_batch_size = 2}));
    CHECK(parameter_count(p).per_rank == m.total_parameters());
  }
  // Attention per block, q_lora 16: wq_a 16 x 64 = 1,024 + q_norm 16 + wq_b 128 x 16 = 2,048 + wkv_a 24 x 64 = 1,536
  // + kv_norm 16 + wkv_b 128 x 16 = 2,048 + wo 64 x 64 = 4,096: 10,784; at tp 2 the three sharded ones halve (4,096)
  // and the replicated 2,592 stay: 6,688 a rank.
  const Model m = tiny_mla();
  const Program one = lower(m, Training{.seq_len = 16}, test::make_plan("sequence_parallel", {.local_batch_size = 2}));
  const Program two =
      lower(m, Training{.seq_len = 16}, test::make_plan("sequence_parallel", {.tp_degree = 2, .local_batch_size = 2}));
  int64_t attention_one = 0, attention_two = 0;
  for (const auto& [p, sum] : {std::pair{&one, &attention_one}, std::pair{&two, &attention_two}})
    for (const TensorDesc& t : p->tensors)
      if (t.role == TensorRole::parameter && t.name.rfind("attention.", 0) == 0) *sum += numel(t.local_shape);
  CHECK(attention_one == 10'784);
  CHECK(attention_two == 6'688);
}

TEST_CASE("latent attention: what its lowering does not cover is a one-line error", "[mla][lower]") {
  Model six = tiny_mla();
  six.n_heads = 6;
  six.n_kv_heads = 6;
  six.dim = 48;
  CHECK(lower_error(six, {.tp_degree = 4}) ==
        "layers.0.attention.wq_b: tp 4 does not divide the 6 heads: a colwise latent-attention up-projection shards "
        "whole heads");
  CHECK(lower_error(tiny_mla(), {.tp_degree = 2, .cp_degree = 2}) ==
        "preset:sequence_parallel: cp_degree 2: context parallelism of multi-head latent attention (model.mla) is not "
        "lowered (its ring attention has one head_dim for q, k and v)");
  Model dense_first = tiny_mla();  // (a dense first block beside latent attention: lowered)
  dense_first.moe.dense_layers = 1;
  CHECK(lower_error(dense_first, {}) == "<no error>");
}

TEST_CASE("latent attention is not torchtitan's llama3: no llama3 recipe, and its exports say why", "[mla][export]") {
  Model m = test::llama3_8b();
  REQUIRE(torchtitan_recipe(m) != nullptr);  // Llama 3 8B's shapes are the llama3_8b recipe's
  CHECK(torchtitan_llama3_lacks(m).empty());
  m.mla = {1536, 512, 128, 64, 128};
  CHECK(torchtitan_recipe(m) == nullptr);
  CHECK(torchtitan_llama3_lacks(m) ==
        "multi-head latent attention (model.mla: torchtitan's deepseek_v3, not its llama3)");
}
