// model.gqa repeat_kv (torchtitan's repeat_kv before SDPA, plans/model/model.h Gqa): the config key and its error, the
// copies the lowering adds (shapes and bytes derived by hand), the attention they feed (query heads on both sides),
// nothing added for the default enable_gqa or a model without grouped heads, the identity of a Program that repeats,
// and context parallelism rotating the repeated K/V (n_heads / n_kv_heads times the bytes).
#include <catch2/catch.hpp>

#include "plans/language/config.h"
#include "plans/lower/lower.h"
#include "plans/program/program_identity.h"
#include "plans/util/error.h"
#include "tests/error_text.h"
#include "tests/fixtures.h"

using namespace tptune;
using Catch::Matchers::Contains;
using tptune::test::error_of;

namespace {

Model tiny(Gqa gqa) {
  Model m = test::tiny_llama_model();  // 8 heads, 4 kv heads, head_dim 8
  m.gqa = gqa;
  return m;
}

Program lower_tiny(Gqa gqa, PlanToggles t = {}) {
  return lower(tiny(gqa), Training{.seq_len = 32}, test::make_plan("sequence_parallel", t));
}

const Op* find_op(const Program& p, SegmentKind kind, const std::string& name) {
  for (const Op& op : p.segment(kind)->ops)
    if (op.name == name && op.phase != Phase::recompute) return &op;
  return nullptr;
}

int count_fn(const Program& p, ElementwiseOp::Fn fn) {
  int n = 0;
  for (const Segment& s : p.segments)
    for (const Op& op : s.ops)
      if (const auto* e = std::get_if<ElementwiseOp>(&op.kind); e && e->fn == fn) ++n;
  return n;
}

int64_t cp_all_gather_bytes(const Program& p) {
  int64_t bytes = 0;
  for (const Op& op : p.segment(SegmentKind::block_fwd)->ops)
    if (const auto* c = std::get_if<CollectiveOp>(&op.kind);
        c && c->group == Group::cp && c->kind == CollectiveKind::all_gather)
      bytes += c->bytes;
  return bytes;
}

}  // namespace

TEST_CASE("repeat_kv: the config key model.gqa and its error", "[gqa][config]") {
  auto load = [](const std::string& gqa) {
    return load_config_string("model: {preset: llama3-8b" + gqa +
                                  "}\ntraining: {seq_len: 8}\ncluster: {gpu: h100-sxm, nodes: 1, gpus_per_node: 8}\n",
                              "c.yaml");
  };
  CHECK(load("").model.gqa == Gqa::enable_gqa);
  CHECK(load(", gqa: repeat_kv").model.gqa == Gqa::repeat_kv);
  CHECK(load(", gqa: repeat_kv").model.name == "llama3-8b");  // the same model: its kernel path, not its function
  CHECK(load(", gqa: enable_gqa").model.gqa == Gqa::enable_gqa);
  CHECK(error_of([&] { load(", gqa: repeat"); }) ==
        "c.yaml:1: model.gqa: expected one of enable_gqa, repeat_kv, got 'repeat'");
}

TEST_CASE("repeat_kv: k and v copied to the query heads before attention, summed back in backward", "[gqa][lower]") {
  // tp 2: 4 query heads and 2 kv heads per rank, so each kv head is copied r = 2 times. k (b 1, s 32, 2 x 8 = 16)
  // -> (1, 32, 4 x 8 = 32); bytes: read 1 x 32 x 16 + write 1 x 32 x 32 = 1536 elements of bf16 = 3072 B.
  const Program p = lower_tiny(Gqa::repeat_kv, {.tp_degree = 2});
  for (const char* kv : {"k", "v"}) {
    INFO(kv);
    const Op* fwd = find_op(p, SegmentKind::block_fwd, std::string("attention.") + kv + ".repeat_kv");
    REQUIRE(fwd != nullptr);
    const auto& e = std::get<ElementwiseOp>(fwd->kind);
    CHECK(e.fn == ElementwiseOp::Fn::repeat_kv);
    CHECK(e.bytes == 3072);
    CHECK(p.tensor(fwd->inputs[0]).local_shape == Shape{1, 32, 16});
    CHECK(p.tensor(fwd->outputs[0]).local_shape == Shape{1, 32, 32});
    // Global: the model's 4 kv heads x 2 = its 8 query heads, sharded over tp as k is.
    CHECK(p.tensor(fwd->outputs[0]).global_shape == Shape{1, 32, 64});
    const Op* bwd = find_op(p, SegmentKind::block_bwd, std::string("attention.") + kv + ".repeat_kv_bwd");
    REQUIRE(bwd != nullptr);
    CHECK(std::get<ElementwiseOp>(bwd->kind).fn == ElementwiseOp::Fn::repeat_kv_bwd);
    CHECK(p.tensor(bwd->inputs[0]).local_shape == Shape{1, 32, 32});
    CHECK(p.tensor(bwd->outputs[0]).local_shape == Shape{1, 32, 16});
  }
  const Op* core = find_op(p, SegmentKind::block_fwd, "attention.core.fwd");
  REQUIRE(core != nullptr);
  const auto& a = std::get<AttentionOp>(core->kind);
  CHECK(a.n_heads == 4);
  CHECK(a.n_kv_heads == 4);  // SDPA receives the repeated heads
  CHECK(p.tensor(core->inputs[1]).local_shape == Shape{1, 32, 32});
}

TEST_CASE("repeat_kv: nothing added for enable_gqa or a model without grouped heads", "[gqa][lower]") {
  CHECK(count_fn(lower_tiny(Gqa::enable_gqa, {.tp_degree = 2}), ElementwiseOp::Fn::repeat_kv) == 0);
  const Program grouped = lower_tiny(Gqa::enable_gqa, {.tp_degree = 2});
  CHECK(std::get<AttentionOp>(find_op(grouped, SegmentKind::block_fwd, "attention.core.fwd")->kind).n_kv_heads == 2);
  Model mha = tiny(Gqa::repeat_kv);
  mha.n_kv_heads = mha.n_heads;
  const Program p = lower(mha, Training{.seq_len = 32}, test::make_plan("sequence_parallel", {.tp_degree = 2}));
  CHECK(count_fn(p, ElementwiseOp::Fn::repeat_kv) == 0);
  CHECK(count_fn(p, ElementwiseOp::Fn::repeat_kv_bwd) == 0);
  // With it: k and v of each of the 2 blocks, forward and backward (the backward once per block, recompute aside).
  CHECK(count_fn(lower_tiny(Gqa::repeat_kv, {.tp_degree = 2}), ElementwiseOp::Fn::repeat_kv) == 2);
  CHECK(count_fn(lower_tiny(Gqa::repeat_kv, {.tp_degree = 2}), ElementwiseOp::Fn::repeat_kv_bwd) == 2);
}

TEST_CASE("repeat_kv: a Program that repeats says so in its identity", "[gqa][lower]") {
  const nlohmann::json mine = program_identity(lower_tiny(Gqa::repeat_kv, {.tp_degree = 2}));
  CHECK(mine["model"]["gqa"] == "repeat_kv");
  CHECK_FALSE(program_identity(lower_tiny(Gqa::enable_gqa, {.tp_degree = 2}))["model"].contains("gqa"));
}

TEST_CASE("repeat_kv: context parallelism gathers the repeated K/V", "[gqa][cp][lower]") {
  // tp 1, cp 4, seq 32: s_l = 8. enable_gqa: cat(K, V) = 2 x 1 x 8 x 4 kv heads x 8 = 512 elements, 1024 B of bf16,
  // all-gathered from 4 ranks: 4096 B. repeat_kv: 8 heads, twice that: 8192 B.
  CHECK(cp_all_gather_bytes(lower_tiny(Gqa::enable_gqa, {.cp_degree = 4})) == 4096);
  CHECK(cp_all_gather_bytes(lower_tiny(Gqa::repeat_kv, {.cp_degree = 4})) == 8192);
}
