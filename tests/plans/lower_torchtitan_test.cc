// The torchtitan 0.3 plan family (framework: torchtitan-0.3): collective counts derived by hand from torchtitan
// 0.3.0's sharding configs (models/common/decoder_sharding.py, models/llama3/sharding.py), ChunkedLossWrapper and
// _LossParallelCrossEntropy (components/loss.py), parallelize_llama and the AC wrappers
// (distributed/activation_checkpoint.py). Llama3-8B, seq 8192, local batch 1.
#include <catch2/catch.hpp>

#include "lowering_helpers.h"

using namespace tptune;
using namespace tptune::testing;
using K = CollectiveKind;

namespace {

constexpr int64_t kAct = int64_t{8192} * 4096 * 2;  // one (1, 8192, 4096) bf16 activation: 64 MiB

// torchtitan 0.3's preset `preset` with the toggles `t` and ChunkedLossWrapper's `chunks` (0: the framework's 8).
Plan tt_plan(const std::string& preset, PlanToggles t, int chunks = 0) {
  Plan base = test::toggles_plan(t, Framework::torchtitan_0_3);
  base.loss_chunks = chunks;
  return preset_plan(preset, base);
}

Program lower_tt(const std::string& preset, PlanToggles t, int chunks = 0, int64_t seq = 8192) {
  return lower(llama3_8b(), Training{.seq_len = seq}, tt_plan(preset, t, chunks));
}

int count(const std::vector<CollectiveRecord>& rs, K kind, Phase phase) {
  int n = 0;
  for (const auto& r : rs) n += r.group == Group::tp && r.kind == kind && r.phase == phase;
  return n;
}

int gemms_named(const Program& p, const std::string& name) {
  int n = 0;
  for (const auto& s : p.segments)
    for (const auto& op : s.ops) n += std::holds_alternative<GemmOp>(op.kind) && op.name == name;
  return n;
}

}  // namespace

TEST_CASE("torchtitan 0.3 without sequence parallel converts once per module boundary: 2 backward all-reduces") {
  Program p = lower_tt("vanilla", {.tp_degree = 8});
  // Forward: wo and w2 out_src P -> out_dst I: one all-reduce each.
  CHECK(block_count(p, "forward", K::all_reduce) == 2);
  // Backward: attention and feed_forward in_src I -> in_dst R is a no-op whose backward all-reduces the Partial
  // input gradient, once per boundary (wqkv alone at attention; w1 + w3 summed first at feed_forward). The seed's
  // DTensor plan does one per colwise linear: 5 (wq, wk, wv, w1, w3).
  CHECK(block_count(p, "backward", K::all_reduce) == 2);
  CHECK(block_count(p, "backward", K::all_gather) == 0);
  CHECK(block_count(p, "backward", K::reduce_scatter) == 0);
  for (const auto& r : block_collectives(p)) CHECK(r.bytes == kAct);
  Program seed = lower_preset("vanilla", {.tp_degree = 8, .loss_parallel = true});
  CHECK(block_count(seed, "backward", K::all_reduce) == 5);
  // Top level: embedding P -> I all-reduce forward; lm_head's input I -> R once (before chunking) -> one backward
  // all-reduce of the accumulated gradient; no norm all-reduces (norms are not parallelized without SP).
  auto emb = top_level(p, "tok_embeddings");
  REQUIRE(emb.size() == 1);
  CHECK(emb[0].kind == K::all_reduce);
  auto head = top_level(p, "lm_head");
  REQUIRE(head.size() == 1);
  CHECK(head[0].kind == K::all_reduce);
  CHECK(head[0].phase == Phase::backward);
  CHECK(head[0].bytes == kAct);
  CHECK(top_level(p, "norm").empty());
}

TEST_CASE("torchtitan 0.3's chunked loss: 3 all-reduces per chunk, each over its share of the rows") {
  for (int chunks : {8, 4, 1}) {
    Program p = lower_tt("sequence_parallel", {.tp_degree = 8}, chunks);
    auto loss = top_level(p, "loss");
    // _LossParallelCrossEntropy.forward: all-reduce(max), all-reduce(sum) of the shifted sum-exp, all-reduce(sum)
    // of the target log-prob; backward none. Each over [1, 8192 / chunks] fp32.
    REQUIRE(loss.size() == static_cast<size_t>(3 * chunks));
    for (const auto& r : loss) {
      CHECK(r.phase == Phase::forward);
      CHECK(r.bytes == 8192 / chunks * 4);
    }
    CHECK(count(loss, K::all_reduce, Phase::forward) == 3 * chunks);
    // The lm_head GEMMs run once per chunk, on 8192 / chunks tokens; the vocab-sharded logits never exist whole.
    CHECK(gemms_named(p, "lm_head.fwd") == chunks);
    for (const auto& s : p.segments)
      for (const auto& op : s.ops)
        if (auto* g = std::get_if<GemmOp>(&op.kind); g && op.name == "lm_head.fwd") {
          CHECK(g->m == 8192 / chunks);
          CHECK(g->n == 128256 / 8);
        }
  }
  // Defaults: the llama3 recipes' ChunkedLossWrapper.Config.num_chunks = 8.
  CHECK(tt_plan("sequence_parallel", {.tp_degree = 8}).chunks() == 8);
  // Equal chunks or an error naming the module.
  Training tr;
  tr.seq_len = 8190;
  CHECK_THAT(lowering_error(llama3_8b(), tr, tt_plan("sequence_parallel", {.tp_degree = 2})),
             Catch::Contains("lm_head: the sequence (8190) is not divisible by loss_chunks 8"));
}

TEST_CASE("torchtitan 0.3 with sequence parallel: the seed's SP collectives, FSDP reduces the norm gradients") {
  Program p = lower_tt("sequence_parallel", {.tp_degree = 8});
  CHECK(block_count(p, "forward", K::all_gather) == 2);
  CHECK(block_count(p, "forward", K::reduce_scatter) == 2);
  CHECK(block_count(p, "backward", K::all_gather) == 2);
  CHECK(block_count(p, "backward", K::reduce_scatter) == 2);
  // parallelize_llama always applies fully_shard, so even at dp_shard 1 FSDP's post-backward all-reduces the two
  // Partial norm-weight gradients in backward (norm_config: "pending BWD AR handled by FSDP").
  int bwd_ar = 0, opt_ar = 0;
  for (const auto& r : block_collectives(p)) {
    bwd_ar += r.kind == K::all_reduce && r.phase == Phase::backward;
    opt_ar += r.phase == Phase::optimizer;
  }
  CHECK(bwd_ar == 2);
  CHECK(opt_ar == 0);
  // The seed at dp_shard 1 (no FSDP): the same two all-reduces, at the optimizer step.
  Program seed = lower_preset("sequence_parallel", {.tp_degree = 8, .loss_parallel = true});
  int seed_bwd = 0, seed_opt = 0;
  for (const auto& r : block_collectives(seed)) {
    seed_bwd += r.kind == K::all_reduce && r.phase == Phase::backward;
    seed_opt += r.kind == K::all_reduce && r.phase == Phase::optimizer;
  }
  CHECK(seed_bwd == 0);
  CHECK(seed_opt == 2);
  // The root norm's out_dst R all-gathers once before chunking; its backward reduce-scatters the accumulated grad.
  auto head = top_level(p, "lm_head");
  REQUIRE(head.size() == 2);
  CHECK(head[0].kind == K::all_gather);
  CHECK(head[1].kind == K::reduce_scatter);
}

TEST_CASE("torchtitan 0.3 fuses q, k, v into one wqkv GEMM of the summed width") {
  Program p = lower_tt("sequence_parallel", {.tp_degree = 8});
  // (32 + 2 x 8) heads x 128 / tp 8 = 768 local outputs, one GEMM; no wq/wk/wv.
  const Segment* fwd = p.segment(SegmentKind::block_fwd);
  REQUIRE(fwd);
  int wqkv = 0, separate = 0;
  for (const auto& op : fwd->ops) {
    if (auto* g = std::get_if<GemmOp>(&op.kind)) {
      if (op.name == "attention.wqkv.fwd") {
        ++wqkv;
        CHECK(g->n == 768);
        CHECK(g->k == 4096);
      }
      separate += op.name == "attention.wq.fwd" || op.name == "attention.wk.fwd" || op.name == "attention.wv.fwd";
    }
  }
  CHECK(wqkv == 1);
  CHECK(separate == 0);
  // A colwise shard of the fused weight must hold whole kv groups: tp 16 with 8 kv heads cannot.
  Training tr;
  CHECK_THAT(lowering_error(llama3_8b(), tr, tt_plan("sequence_parallel", {.tp_degree = 16})),
             Catch::Contains("layers.0.attention.wqkv: tp 16 does not divide the 8 kv heads"));
}

TEST_CASE("torchtitan 0.3 activation checkpointing: no early stop, reduce-scatters recomputed") {
  // full: early_stop=False re-runs the whole block, both reduce-scatters included: backward = own 2 AG + 2 RS plus
  // the recomputed 2 AG + 2 RS. The seed (early stop) recomputes only wo's reduce-scatter (w2's output feeds only the
  // next block): 4 AG + 3 RS.
  Program full =
      lower_tt("sequence_parallel", {.tp_degree = 8, .activation_checkpointing = ActivationCheckpointing::full});
  CHECK(block_count(full, "backward", K::all_gather) == 4);
  CHECK(block_count(full, "backward", K::reduce_scatter) == 4);
  int recomputed_rs = 0;
  for (const auto& r : block_collectives(full))
    recomputed_rs += r.phase == Phase::recompute && r.kind == K::reduce_scatter;
  CHECK(recomputed_rs == 2);
  // selective: the policy saves functional reduce_scatter_tensor outputs, which spmd_types does not issue, so the
  // reduce-scatters are recomputed too: 4 AG + 4 RS (the seed: 4 AG + 2 RS).
  Program sel =
      lower_tt("sequence_parallel", {.tp_degree = 8, .activation_checkpointing = ActivationCheckpointing::selective});
  CHECK(block_count(sel, "backward", K::all_gather) == 4);
  CHECK(block_count(sel, "backward", K::reduce_scatter) == 4);
}

TEST_CASE("torchtitan 0.3 float8: rowwise recipes only, bf16 TP collectives, no amax all-reduces") {
  Training tr;
  CHECK_THAT(lowering_error(llama3_8b(), tr,
                            tt_plan("sequence_parallel", {.tp_degree = 8, .float8 = Float8Recipe::tensorwise})),
             Catch::Contains("Float8LinearConverter has the recipes rowwise and rowwise_with_gw_hp only"));
  for (Float8Recipe f : {Float8Recipe::rowwise, Float8Recipe::rowwise_with_gw_hp}) {
    Program p = lower_tt("sequence_parallel", {.tp_degree = 8, .float8 = f});
    for (const auto& r : step_collectives(p)) {
      CHECK((r.reduce == ReduceOp::sum || r.module == "loss"));  // the loss's max is the only max reduction
      if (r.kind == K::all_gather) CHECK(r.dtype == DType::bf16);
    }
  }
  // rowwise_with_gw_hp keeps the weight-gradient GEMMs in bf16; rowwise runs them in float8.
  auto gw_dtype = [](const Program& p) {
    for (const auto& op : p.segment(SegmentKind::block_bwd)->ops)
      if (auto* g = std::get_if<GemmOp>(&op.kind); g && op.name == "feed_forward.w1.bwd_weight") return g->a_dtype;
    return DType::fp32;
  };
  CHECK(gw_dtype(lower_tt("sequence_parallel", {.tp_degree = 8, .float8 = Float8Recipe::rowwise_with_gw_hp})) ==
        DType::bf16);
  CHECK(is_float8(gw_dtype(lower_tt("sequence_parallel", {.tp_degree = 8, .float8 = Float8Recipe::rowwise}))));
}

TEST_CASE("torchtitan 0.3 refuses what it cannot do") {
  Plan p = tt_plan("sequence_parallel", {.tp_degree = 8});
  p.loss_parallel = false;
  Training tr;
  CHECK_THAT(lowering_error(llama3_8b(), tr, p), Catch::Contains("always runs the vocab-parallel loss under TP"));
  // Async TP is an inductor pass: explicit compile false is an error (unset means: compiled, as the 405B recipe).
  Plan a = tt_plan("sequence_parallel", {.tp_degree = 8, .async_tp = true});
  tr.compile = false;
  CHECK_THAT(lowering_error(llama3_8b(), tr, a), Catch::Contains("async_tp needs torch.compile"));
  tr.compile.reset();
  CHECK(lowering_error(llama3_8b(), tr, a) == "<no error>");
}

TEST_CASE("torchtitan 0.3 clips the gradient norm before the optimizer: an all-reduce on dp, then on tp") {
  // Trainer.train_step -> dist_utils.clip_grad_norm_(max_norm=1.0) -> get_total_norm: the stack of the per-gradient
  // norms (_NormPartial on the [dp_shard, tp] mesh) is all-reduced once per sharded mesh dim, 4 B per gradient (torch
  // 2.15.0 on a fake process group: plans/lower/lower.cc, grad_norm()).
  Model tiny;
  REQUIRE(model_preset("tiny-llama", tiny));  // dim 64, 2 layers, 8 heads, 4 kv heads, ffn 128, vocab 256
  Training tr;
  tr.seq_len = 32;
  Plan plan = tt_plan("sequence_parallel", {.tp_degree = 2, .dp_shard = 2}, 2);
  const Program p = lower(tiny, tr, plan);
  const Segment* clip = p.segment(SegmentKind::grad_norm);
  REQUIRE(clip != nullptr);
  CHECK(clip->repeat == 1);
  REQUIRE(clip->ops.size() == 4);
  CHECK(clip->ops[0].name == "grad_norm.local");
  CHECK(clip->ops[3].name == "grad_norm.clip");
  const auto* dp = std::get_if<CollectiveOp>(&clip->ops[1].kind);
  const auto* tp = std::get_if<CollectiveOp>(&clip->ops[2].kind);
  REQUIRE(dp != nullptr);
  REQUIRE(tp != nullptr);
  // 17 gradients: 7 per block (attention_norm, wqkv, wo, ffn_norm, w1, w2, w3) x 2 layers + tok_embeddings, norm,
  // lm_head; one fp32 squared norm each: 68 bytes.
  CHECK((dp->kind == K::all_reduce && dp->group == Group::dp && dp->bytes == 17 * 4));
  CHECK((tp->kind == K::all_reduce && tp->group == Group::tp && tp->bytes == 17 * 4));
  for (const Op& op : clip->ops) CHECK(op.phase == Phase::optimizer);
  // Local gradient elements per rank (tp 2, then FSDP's dp_shard 2):
  //   block: attention_norm 64 + wqkv (8 + 2x4) x 8 = 128 x 64 / 2 = 4096 + wo 64 x 64 / 2 = 2048 + ffn_norm 64
  //          + w1, w3 128 x 64 / 2 = 4096 each + w2 64 x 128 / 2 = 4096  = 18560, / dp 2 = 9280, x 2 layers = 18560
  //   tok_embeddings 256 x 64 / 2 / 2 = 4096, norm 64 / 2 = 32, lm_head 256 x 64 / 2 / 2 = 4096
  //   total 26784: norm reads 4 B each (fp32 FSDP gradients), the clip reads and writes them.
  const auto* local = std::get_if<ElementwiseOp>(&clip->ops[0].kind);
  const auto* mul = std::get_if<ElementwiseOp>(&clip->ops[3].kind);
  REQUIRE(local != nullptr);
  REQUIRE(mul != nullptr);
  CHECK(local->bytes == 26784 * 4);
  CHECK(mul->bytes == 26784 * 8);
  // Before the optimizer's segments, after the backward.
  size_t at = 0, block_opt = 0;
  for (size_t i = 0; i < p.segments.size(); ++i) {
    if (p.segments[i].kind == SegmentKind::grad_norm) at = i;
    if (p.segments[i].kind == SegmentKind::block_optimizer) block_opt = i;
  }
  CHECK(at + 1 == block_opt);
  CHECK(p.segments[at - 1].kind == SegmentKind::embed_bwd);
  // tp 1, dp 1: no collective, the local norm and the clip still run. The seed (a user's loop) does not clip.
  const Program one = lower(tiny, tr, tt_plan("vanilla", {.tp_degree = 1}, 2));
  REQUIRE(one.segment(SegmentKind::grad_norm) != nullptr);
  CHECK(one.segment(SegmentKind::grad_norm)->ops.size() == 2);
  CHECK(lower_preset("sequence_parallel", {.tp_degree = 2}, tiny, 32).segment(SegmentKind::grad_norm) == nullptr);
}
