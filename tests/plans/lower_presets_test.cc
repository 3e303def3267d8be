// Lowering of the two presets on Llama3-8B (dim 4096, 32 layers, 32/8 heads, ffn 14336, vocab 128256),
// seq 8192, local batch 1, bf16. Every expectation below is derived by hand from DTensor's rules
// (plans/language/placement.h).
//
// Sizes used throughout:
//   activation [1, 8192, 4096] bf16 = 8192 * 4096 * 2        = 67,108,864 B (64 MiB)
//   float8 activation                = 8192 * 4096 * 1        = 33,554,432 B
//   logits [1, 8192, 128256] bf16    = 8192 * 128256 * 2      = 2,101,346,304 B
//   loss statistics [1, 8192] fp32   = 8192 * 4               = 32,768 B
//   norm weight [4096] bf16          = 4096 * 2               = 8,192 B
#include <catch2/catch.hpp>
#include <map>

#include "lowering_helpers.h"

using namespace tptune;
using namespace tptune::testing;
using K = CollectiveKind;

constexpr int64_t kAct = 67108864, kAct8 = 33554432, kLogits = 2101346304, kStat = 32768, kNormW = 8192;

TEST_CASE("vanilla, tp 8, loss parallel off: all-reduces, more in backward than forward") {
  Program p = lower_preset("vanilla", {.tp_degree = 8});
  // Forward: wo and w2 are rowwise with output R: their local products are P -> all-reduce each.
  CHECK(block_count(p, "forward", K::all_reduce) == 2);
  CHECK(block_count(p, "forward", K::all_gather) == 0);
  CHECK(block_count(p, "forward", K::reduce_scatter) == 0);
  // Backward: wq, wk, wv, w1, w3 each wrap their plain input with from_local(R); the input gradient of a colwise
  // linear is dy (S(-1)) @ W (S(0)) = P, so each from_local backward all-reduces it: 5. wo/w2's forward P -> R
  // all-reduce has nothing in backward (a P source takes its gradient as R).
  CHECK(block_count(p, "backward", K::all_reduce) == 5);
  CHECK(block_count(p, "backward", K::reduce_scatter) == 0);
  for (const auto& r : block_collectives(p)) {
    CHECK(r.bytes == kAct);
    CHECK(r.global_shape == Shape{1, 8192, 4096});
    CHECK(r.dtype == DType::bf16);
  }
  // tok_embeddings rowwise R -> R: vocab-sharded lookup is P -> all-reduce; no backward collective.
  auto emb = top_level(p, "tok_embeddings");
  REQUIRE(emb.size() == 1);
  CHECK(emb[0].kind == K::all_reduce);
  CHECK(emb[0].phase == Phase::forward);
  // output colwise R -> R: logits S(-1) -> R all-gather (2.1 GB!) forward; its backward R -> S(-1) is a local slice;
  // the input's from_local(R) all-reduces the P gradient of dy @ W.
  auto out = top_level(p, "output");
  REQUIRE(out.size() == 2);
  CHECK(out[0].kind == K::all_gather);
  CHECK(out[0].bytes == kLogits);
  CHECK(out[0].global_shape == Shape{1, 8192, 128256});
  CHECK(out[1].kind == K::all_reduce);
  CHECK(out[1].phase == Phase::backward);
  CHECK(out[1].bytes == kAct);
  CHECK(top_level(p, "loss").empty());  // the loss runs on replicated logits
  // Per step: forward 1 + 32 * 2 + 1 = 66, backward 32 * 5 + 1 = 161.
  auto j = explain_json(p);
  int fwd = 0, bwd = 0;
  for (const auto& c : j["collectives"]) (c["phase"] == "forward" ? fwd : bwd) += 1;
  CHECK(fwd == 66);
  CHECK(bwd == 161);
}

TEST_CASE("vanilla with loss parallel keeps the logits sharded") {
  Program p = lower_preset("vanilla", {.tp_degree = 8, .loss_parallel = true});
  auto out = top_level(p, "output");
  REQUIRE(out.size() == 1);  // no logits all-gather; the backward all-reduce of the input gradient stays
  CHECK(out[0].kind == K::all_reduce);
  // Vocab-parallel cross-entropy: all-reduce max, sum of exp, target logit over [1, 8192] fp32.
  auto loss = top_level(p, "loss");
  REQUIRE(loss.size() == 3);
  CHECK(loss[0].reduce == ReduceOp::max);
  for (const auto& r : loss) CHECK(r.bytes == kStat);
}

TEST_CASE("sequence_parallel, tp 8, loss parallel on: the torchtitan default") {
  Program p = lower_preset("sequence_parallel", {.tp_degree = 8, .loss_parallel = true});
  // Forward: attention and feed_forward PrepareModuleInput S(1) -> R all-gather; wo, w2 rowwise P -> S(1)
  // reduce-scatter.
  CHECK(block_count(p, "forward", K::all_gather) == 2);
  CHECK(block_count(p, "forward", K::reduce_scatter) == 2);
  CHECK(block_count(p, "forward", K::all_reduce) == 0);
  // Backward: the P -> S(1) reduce-scatters come back as all-gathers of R gradients; the S(1) -> R all-gathers come
  // back as reduce-scatters of the P gradient summed over wq/wk/wv (w1/w3); and the two sequence-parallel norms'
  // weight gradients are partial over the sequence shards -> 2 small all-reduces (Megatron's
  // allreduce_layernorm_grads).
  CHECK(block_count(p, "backward", K::all_gather) == 2);
  CHECK(block_count(p, "backward", K::reduce_scatter) == 2);
  CHECK(block_count(p, "backward", K::all_reduce) == 2);
  for (const auto& r : block_collectives(p)) CHECK(r.bytes == (r.kind == K::all_reduce ? kNormW : kAct));
  // Sequence parallel moves the same bytes per block as vanilla's all-reduces: an all-reduce is a reduce-scatter
  // plus an all-gather of the same full size. Vanilla forward: 2 x AR(64 MiB); SP forward: 2 x (AG + RS)(64 MiB).
  auto emb = top_level(p, "tok_embeddings");
  REQUIRE(emb.size() == 2);  // rowwise R -> S(1): P -> S(1) reduce-scatter; backward S(1) -> R all-gather
  CHECK(emb[0].kind == K::reduce_scatter);
  CHECK(emb[1].kind == K::all_gather);
  auto out = top_level(p, "output");
  REQUIRE(out.size() == 2);  // colwise S(1) -> R all-gather of the norm output; backward P -> S(1) reduce-scatter
  CHECK(out[0].kind == K::all_gather);
  CHECK(out[0].bytes == kAct);
  CHECK(out[1].kind == K::reduce_scatter);
  CHECK(top_level(p, "loss").size() == 3);
  auto norm = top_level(p, "norm");
  REQUIRE(norm.size() == 1);
  CHECK(norm[0].bytes == kNormW);
}

TEST_CASE("sequence_parallel without loss parallel gathers the logits") {
  Program p = lower_preset("sequence_parallel", {.tp_degree = 8, .loss_parallel = false});
  auto out = top_level(p, "output");
  REQUIRE(out.size() == 3);  // input AG, logits S(-1) -> R AG forward; input RS backward
  CHECK(out[1].kind == K::all_gather);
  CHECK(out[1].bytes == kLogits);
  CHECK(top_level(p, "loss").empty());
}

TEST_CASE("tp 2 moves the same full-tensor bytes with half-size local shards") {
  Program p2 = lower_preset("sequence_parallel", {.tp_degree = 2, .loss_parallel = true});
  Program p8 = lower_preset("sequence_parallel", {.tp_degree = 8, .loss_parallel = true});
  auto b2 = block_collectives(p2), b8 = block_collectives(p8);
  REQUIRE(b2.size() == b8.size());
  for (size_t i = 0; i < b2.size(); ++i) CHECK(b2[i].bytes == b8[i].bytes);
  // wq at tp 2: colwise weight (4096, 4096) -> local (2048, 4096); gemm m = 8192 tokens (gathered), n = 2048, k = 4096.
  const Segment* fwd = p2.segment(SegmentKind::block_fwd);
  bool found = false;
  for (const Op& op : fwd->ops)
    if (op.name == "attention.wq.fwd") {
      auto g = std::get<GemmOp>(op.kind);
      CHECK(g.m == 8192);
      CHECK(g.n == 2048);
      CHECK(g.k == 4096);
      found = true;
    }
  CHECK(found);
  // wk at tp 2: 8 kv heads x 128 = 1024 outputs -> 512 local.
  for (const auto& t : p2.tensors)
    if (t.name == "attention.wk.weight") CHECK(t.local_shape == Shape{512, 4096});
}

TEST_CASE("float8 tensorwise on sequence_parallel: fp8 all-gathers and amax all-reduces") {
  Program p =
      lower_preset("sequence_parallel", {.tp_degree = 8, .float8 = Float8Recipe::tensorwise, .loss_parallel = true});
  // PrepareFloat8ModuleInput casts the S(1) input to e4m3 before gathering: the all-gathers move 1 B/element.
  for (const auto& r : block_collectives(p))
    if (r.kind == K::all_gather && r.phase == Phase::forward) {
      CHECK(r.dtype == DType::fp8_e4m3);
      CHECK(r.bytes == kAct8);
    }
  // Reduce-scatters of the rowwise outputs stay bf16.
  CHECK(block_count(p, "forward", K::reduce_scatter) == 2);
  // amax all-reduce(max), forward: the two sharded module inputs (attention, feed_forward: S(1)), the seven
  // sharded weights (wq wk wv wo w1 w3 w2), the rowwise inputs of wo and w2 (S(-1)) = 2 + 7 + 2 = 11.
  CHECK(block_count(p, "forward", K::all_reduce, ReduceOp::max) == 11);
  // Backward: grad_output of the five colwise linears is S(-1) (sharded) -> 5 amax all-reduces; Float8RowwiseParallel
  // casts the S(1) gradient of wo's and w2's outputs before its all-gather (torchao's _NoopFwToFloat8BwDynamic after
  // the output redistribution) -> 2 more; plus the 2 norm-weight sum all-reduces.
  CHECK(block_count(p, "backward", K::all_reduce, ReduceOp::max) == 7);
  for (const auto& r : block_collectives(p))
    if (r.kind == K::all_gather && r.phase == Phase::backward) {
      CHECK(r.dtype == DType::fp8_e5m2);
      CHECK(r.bytes == kAct8);
    }
  CHECK(block_count(p, "backward", K::all_reduce, ReduceOp::sum) == 2);
  // Which amax reductions torch.compile can fold into the kernel that produces their tensor: the norm outputs
  // (attention and feed_forward inputs), the SwiGLU output (w2's input) and its backward (w1/w3's gradients), rope's
  // backward (wq/wk's gradients), the residual stream's gradient sum (wo's output gradient, cast before its
  // all-gather); not the attention output (wo's input), the block's incoming gradient (w2's output: it comes from the
  // next block's compiled graph), attention's dV (wv), or the weights (FSDP's all-gather or the parameter itself).
  std::map<std::string, bool> fused;
  for (SegmentKind k : {SegmentKind::block_fwd, SegmentKind::block_bwd})
    for (const Op& op : p.segment(k)->ops)
      if (const auto* c = std::get_if<CastFp8Op>(&op.kind); c && c->stage == CastFp8Op::Stage::amax)
        fused[op.name] = c->producer_elementwise;
  const std::map<std::string, bool> want = {{"attention.amax_input", true},
                                            {"feed_forward.amax_input", true},
                                            {"feed_forward.w2.amax_input", true},
                                            {"attention.wo.amax_input", false},
                                            {"attention.wq.amax_weight", false},
                                            {"feed_forward.w2.amax_weight", false},
                                            {"feed_forward.w1.amax_grad_output", true},
                                            {"feed_forward.w3.amax_grad_output", true},
                                            {"attention.wq.amax_grad_output", true},
                                            {"attention.wk.amax_grad_output", true},
                                            {"attention.wv.amax_grad_output", false},
                                            {"attention.wo.amax_grad_output", true},
                                            {"feed_forward.w2.amax_grad_output", false}};
  for (const auto& [name, elementwise] : want) {
    INFO(name);
    REQUIRE(fused.count(name) == 1);
    CHECK(fused.at(name) == elementwise);
  }
  // The three GEMMs of a linear run in float8.
  for (const Op& op : p.segment(SegmentKind::block_bwd)->ops)
    if (op.name == "attention.wq.bwd_input") {
      auto g = std::get<GemmOp>(op.kind);
      CHECK(g.a_dtype == DType::fp8_e5m2);
      CHECK(g.b_dtype == DType::fp8_e4m3);
    }
}

TEST_CASE("float8 tensorwise on vanilla: replicated inputs need no amax reduction") {
  Program p = lower_preset("vanilla", {.tp_degree = 8, .float8 = Float8Recipe::tensorwise});
  // Forward all-reduce(max): 7 sharded weights + the 2 rowwise S(-1) inputs = 9; the colwise inputs are R.
  CHECK(block_count(p, "forward", K::all_reduce, ReduceOp::max) == 9);
  CHECK(block_count(p, "forward", K::all_reduce, ReduceOp::sum) == 2);
  CHECK(block_count(p, "backward", K::all_reduce, ReduceOp::max) == 5);
  CHECK(block_count(p, "backward", K::all_reduce, ReduceOp::sum) == 5);
}

TEST_CASE("tp 1 is the unsharded model: no TP collectives at all") {
  Program p =
      lower_preset("sequence_parallel", {.tp_degree = 1, .float8 = Float8Recipe::tensorwise, .loss_parallel = true});
  for (const auto& r : step_collectives(p)) CHECK(r.group != Group::tp);
}

TEST_CASE("FSDP adds one parameter all-gather per block forward and backward and one gradient reduce-scatter") {
  Program p = lower_preset("sequence_parallel", {.tp_degree = 8, .dp_shard = 4, .loss_parallel = true});
  int ag_fwd = 0, ag_bwd = 0, rs = 0;
  int64_t bytes = 0;
  for (const auto& r : block_collectives(p)) {
    if (r.group != Group::dp) continue;
    if (r.kind == K::all_gather) (r.phase == Phase::forward ? ag_fwd : ag_bwd) += 1;
    if (r.kind == K::all_gather) bytes = r.bytes;
    if (r.kind == K::reduce_scatter) ++rs;
  }
  CHECK(ag_fwd == 1);
  CHECK(ag_bwd == 1);
  CHECK(rs == 1);
  // Block parameters per TP rank at tp 8, bf16: attention 4096*(4096+1024+1024)/8 + 4096*4096/8 = 5,242,880;
  // MLP 3 * 4096 * 14336 / 8 = 22,020,096; norms 2 * 4096 = 8,192 -> 27,271,168 elements * 2 B = 54,542,336 B.
  CHECK(bytes == 54542336);
}

TEST_CASE("async TP splits the sequence collectives into tp ring steps") {
  Program p = lower_preset("sequence_parallel", {.tp_degree = 4, .async_tp = true, .loss_parallel = true});
  // No plain sequence all-gather / reduce-scatter is left in the block forward; each becomes tp p2p steps
  // (all-gather: step 0 is the local copy, 3 transfers of 64 MiB / 4; reduce-scatter: 3 transfers).
  CHECK(block_count(p, "forward", K::all_gather) == 0);
  CHECK(block_count(p, "forward", K::reduce_scatter) == 0);
  CHECK(block_count(p, "forward", K::p2p) == 2 * 4 + 2 * 3);
  for (const auto& r : block_collectives(p))
    if (r.kind == K::p2p && r.bytes > 0) CHECK(r.bytes == kAct / 4);
  // wq's forward is 4 chunk GEMMs of 8192 / 4 = 2048 tokens.
  int chunks = 0;
  for (const Op& op : p.segment(SegmentKind::block_fwd)->ops)
    if (op.module == "attention.wq" && std::holds_alternative<GemmOp>(op.kind)) {
      CHECK(std::get<GemmOp>(op.kind).m == 2048);
      CHECK(op.chunk.pattern == ChunkRef::Pattern::all_gather);
      ++chunks;
    }
  CHECK(chunks == 4);
}

TEST_CASE("async TP with float8 rowwise pipelines the reduce-scatters, the bf16 all-gathers feed the casts") {
  // What inductor's micro-pipeline pass does with torchao's rowwise Float8Linear (plans/lower/rewrite/async_tp.h): the
  // input is gathered in bf16 and cast after the gather (one scale per token row), so the all-gather is not fused; each
  // matmul -> reduce-scatter becomes tp chunk matmuls on float8 rows with their row scales and a ring of bf16
  // partials.
  Program p = lower_preset("sequence_parallel",
                           {.tp_degree = 4, .float8 = Float8Recipe::rowwise, .async_tp = true, .loss_parallel = true});
  // Forward: the attention and feed_forward inputs are gathered whole, in bf16 (64 MiB each, as without async TP).
  CHECK(block_count(p, "forward", K::all_gather) == 2);
  for (const auto& r : block_collectives(p))
    if (r.kind == K::all_gather && r.group == Group::tp && r.phase == Phase::forward) {
      CHECK(r.dtype == DType::bf16);
      CHECK(r.bytes == kAct);
    }
  // wo and w2's reduce-scatters are rings: 3 bf16 transfers of 64 MiB / 4 each, no reduce-scatter left.
  CHECK(block_count(p, "forward", K::reduce_scatter) == 0);
  CHECK(block_count(p, "forward", K::p2p) == 2 * 3);
  for (const auto& r : block_collectives(p))
    if (r.kind == K::p2p && r.phase == Phase::forward) {
      CHECK(r.dtype == DType::bf16);
      CHECK(r.bytes == kAct / 4);
    }
  // Rowwise scaling needs no amax all-reduce (scales are per row, computed locally).
  CHECK(block_count(p, "forward", K::all_reduce, ReduceOp::max) == 0);
  // wo's forward: 4 chunk GEMMs of 8192 / 4 = 2048 token rows, float8 operands, reading the float8 input, the
  // float8 weight and both scale tensors; the input's scales hold one fp32 per token row of the whole sequence
  // (1 x 8192), of which a chunk uses its 2048 rows.
  int chunks = 0;
  for (const Op& op : p.segment(SegmentKind::block_fwd)->ops)
    if (op.module == "attention.wo" && std::holds_alternative<GemmOp>(op.kind)) {
      const auto& g = std::get<GemmOp>(op.kind);
      CHECK(g.m == 2048);
      CHECK(g.a_dtype == DType::fp8_e4m3);
      CHECK(g.b_dtype == DType::fp8_e4m3);
      CHECK(op.chunk.pattern == ChunkRef::Pattern::reduce_scatter);
      REQUIRE(op.inputs.size() == 4);
      CHECK(p.tensor(op.inputs[2]).role == TensorRole::scale);
      CHECK(p.tensor(op.inputs[2]).local_shape == Shape{1, 8192});
      ++chunks;
    }
  CHECK(chunks == 4);
  // The colwise linears (wq wk wv, w1 w3) are not chunked in forward: their input comes from the cast.
  for (const Op& op : p.segment(SegmentKind::block_fwd)->ops)
    if (op.module == "attention.wq" && std::holds_alternative<GemmOp>(op.kind)) {
      CHECK(op.chunk.pattern == ChunkRef::Pattern::none);
      CHECK(std::get<GemmOp>(op.kind).m == 8192);
    }
}

TEST_CASE("activation checkpointing re-runs the forward in the block backward") {
  Program full =
      lower_preset("sequence_parallel",
                   {.tp_degree = 8, .loss_parallel = true, .activation_checkpointing = ActivationCheckpointing::full});
  // full: the recomputed forward repeats its all-gathers and reduce-scatters (those feeding saved-for-backward
  // values): backward = 2 AG + 2 RS (own) + forward's 2 AG + 1 RS (wo's; w2's output feeds only the next block).
  CHECK(block_count(full, "backward", K::all_gather) == 4);
  CHECK(block_count(full, "backward", K::reduce_scatter) == 3);
  Program sel = lower_preset(
      "sequence_parallel",
      {.tp_degree = 8, .loss_parallel = true, .activation_checkpointing = ActivationCheckpointing::selective});
  // selective (torchtitan's op policy): reduce-scatter outputs are saved, all-gathers are recomputed.
  CHECK(block_count(sel, "backward", K::all_gather) == 4);
  CHECK(block_count(sel, "backward", K::reduce_scatter) == 2);
}
