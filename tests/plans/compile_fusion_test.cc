// torch.compile's fusions as the lowering's rewrite (plans/lower/rewrite/compile_fusion.h): which eager ops a compiled
// Program fuses, where the fused op sits, its input/output convention and its bytes, and that eager Programs and
// repeated rewrites are untouched.
#include "plans/lower/rewrite/compile_fusion.h"

#include <catch2/catch.hpp>

#include "../error_text.h"
#include "plans/lower/lower.h"
#include "plans/program/program_identity.h"
#include "tests/fixtures.h"

using namespace tptune;

namespace {

Program tiny(bool compile, PlanToggles t = {}) {
  Config cfg = test::example_config("tiny-llama.yaml");
  cfg.training.compile = compile;
  t.local_batch_size = cfg.training.local_batch_size;
  return lower(cfg.model, cfg.training, test::make_plan(t.tp_degree > 1 ? "sequence_parallel" : "vanilla", t));
}

const Op* find_fn(const Program& p, SegmentKind kind, ElementwiseOp::Fn fn) {
  for (const Segment& s : p.segments)
    if (s.kind == kind)
      for (const Op& op : s.ops)
        if (const auto* e = std::get_if<ElementwiseOp>(&op.kind); e && e->fn == fn) return &op;
  return nullptr;
}

}  // namespace

TEST_CASE("compiled block, tp 2 sequence parallel: the residual add inside the norm, q's and k's rope in one op",
          "[compile]") {
  // tiny-llama: dim 64, 8 heads and 4 kv heads of head_dim 8, seq 32, batch 2, fp32. Sequence parallel at tp 2: the
  // residual stream is S(1), (2, 16, 64) = 2048 elements, 8192 bytes per activation; q is (2, 32, 32) local (4 heads),
  // k (2, 32, 16) (2 kv heads).
  const Program p = tiny(true, {.tp_degree = 2});
  const Op* fwd = find_fn(p, SegmentKind::block_fwd, ElementwiseOp::Fn::add_rmsnorm);
  REQUIRE(fwd != nullptr);
  CHECK(fwd->fused == std::vector<std::string>{"ffn_norm.fwd", "attention.residual"});
  REQUIRE(fwd->inputs.size() == 3);
  REQUIRE(fwd->outputs.size() == 3);
  CHECK(p.tensor(fwd->inputs[2]).name == "ffn_norm.weight");
  CHECK(p.tensor(fwd->outputs[0]).name == "attention.residual");  // h, the stream the next residual add reads
  CHECK(p.tensor(fwd->outputs[1]).name == "ffn_norm.out");
  // read a, b; write h, y: 4 x 8192 = 32768 bytes (the eager add's 3 and norm's 2 activations made 40960).
  CHECK(std::get<ElementwiseOp>(fwd->kind).bytes == 32768);
  // attention_norm reads the block's input, which no add of this block writes: it stays a plain rmsnorm.
  CHECK(find_fn(p, SegmentKind::block_fwd, ElementwiseOp::Fn::rmsnorm) != nullptr);
  CHECK(find_fn(p, SegmentKind::block_fwd, ElementwiseOp::Fn::add) != nullptr);  // feed_forward's residual

  const Op* rope = find_fn(p, SegmentKind::block_fwd, ElementwiseOp::Fn::rope_qk);
  REQUIRE(rope != nullptr);
  CHECK(find_fn(p, SegmentKind::block_fwd, ElementwiseOp::Fn::rope) == nullptr);
  CHECK(rope->fused == std::vector<std::string>{"attention.q.rope", "attention.k.rope"});
  // q: 2 x 32 x 32 = 2048 elements, k: 1024; read and write each, 4 bytes: 2 x 3072 x 4 = 24576.
  CHECK(std::get<ElementwiseOp>(rope->kind).bytes == 24576);

  // Backward: both norms' input gradients meet the residual's gradient in one op each; 4 activations of 8192 bytes.
  int bwd_add = 0;
  for (const Segment& s : p.segments)
    if (s.kind == SegmentKind::block_bwd)
      for (const Op& op : s.ops)
        if (const auto* e = std::get_if<ElementwiseOp>(&op.kind); e && e->fn == ElementwiseOp::Fn::rmsnorm_bwd_add) {
          ++bwd_add;
          CHECK(e->bytes == 32768);
          CHECK(op.inputs.size() == 5);
          CHECK(op.fused.size() == 2);
        }
  CHECK(bwd_add == 2);
  CHECK(find_fn(p, SegmentKind::block_bwd, ElementwiseOp::Fn::rmsnorm_bwd) == nullptr);
  CHECK(find_fn(p, SegmentKind::block_bwd, ElementwiseOp::Fn::rope_qk_bwd) != nullptr);
}

TEST_CASE("eager Programs have no fused op, and the rewrite of a compiled Program is a fixed point", "[compile]") {
  const Program eager = tiny(false, {.tp_degree = 2});
  for (const Segment& s : eager.segments)
    for (const Op& op : s.ops) {
      CHECK(op.fused.empty());
      if (const auto* e = std::get_if<ElementwiseOp>(&op.kind)) {
        CHECK(e->fn != ElementwiseOp::Fn::add_rmsnorm);
        CHECK(e->fn != ElementwiseOp::Fn::rope_qk);
        CHECK(e->amax_of == -1);
      }
    }
  Program compiled = tiny(true, {.tp_degree = 2, .float8 = Float8Recipe::tensorwise});
  const std::vector<bool> again = apply_compile_fusion(compiled);
  CHECK(std::find(again.begin(), again.end(), true) == again.end());
}

TEST_CASE("float8 tensorwise, compiled: the amax of a norm's or SwiGLU's output is the producer's last output",
          "[compile]") {
  // The eager Program reads x twice (the amax stage, then the cast); compiled, the producer writes the amax too.
  const Program p = tiny(true, {.tp_degree = 2, .float8 = Float8Recipe::tensorwise});
  const Op* sw = find_fn(p, SegmentKind::block_fwd, ElementwiseOp::Fn::swiglu);
  REQUIRE(sw != nullptr);
  const auto& e = std::get<ElementwiseOp>(sw->kind);
  REQUIRE(e.amax_of == 0);  // the amax of y = silu(a) * b, w2's input
  REQUIRE(sw->outputs.size() == 2);
  CHECK(p.tensor(sw->outputs[1]).dtype == DType::fp32);
  CHECK(p.tensor(sw->outputs[1]).local_shape == Shape{1});
  // swiglu (2, 32, 64) local at tp 2: 4096 elements, 3 activations of 4 bytes + the 4-byte amax.
  CHECK(e.bytes == 3 * 4096 * 4 + 4);
  REQUIRE(sw->fused.size() == 2);
  CHECK(sw->fused[1].find("amax") != std::string::npos);
  for (const Segment& s : p.segments)
    for (const Op& op : s.ops)
      if (const auto* c = std::get_if<CastFp8Op>(&op.kind); c && c->stage == CastFp8Op::Stage::amax)
        CHECK_FALSE(c->producer_elementwise);  // only amaxes of GEMM, attention or collective outputs stay
}

TEST_CASE("a compiled Program's identity says so, and a profile of the other mode is another Program", "[compile]") {
  const Program compiled = tiny(true), eager = tiny(false);
  CHECK(program_identity(compiled)["training"]["compile"] == true);
  CHECK_FALSE(program_identity(eager)["training"].contains("compile"));  // as every profile before it
  CHECK_NOTHROW(check_same_program(program_identity(compiled), compiled, "p.json"));
  CHECK_NOTHROW(check_same_program(program_identity(eager), eager, "p.json"));
  const std::string hint = "; profile the simulated config and plan (tp-run profile CONFIG --plan ...)";
  CHECK(test::error_of([&] { check_same_program(program_identity(eager), compiled, "p.json"); }) ==
        "p.json: a profile of another model or plan: training.compile missing (profile) vs true (simulated)" + hint);
  CHECK(test::error_of([&] { check_same_program(program_identity(compiled), eager, "p.json"); }) ==
        "p.json: a profile of another model or plan: training.compile true (profile) vs false (simulated)" + hint);
}
