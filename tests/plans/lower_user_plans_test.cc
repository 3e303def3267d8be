// Hand-written plan YAML and every bad-input path of the lowering: errors name the module FQN and the two
// placements or sizes involved.
#include <catch2/catch.hpp>

#include "lowering_helpers.h"
#include "plans/language/plan.h"

using namespace tptune;
using namespace tptune::testing;
using Catch::Matchers::Contains;
using K = CollectiveKind;

namespace {
// Megatron-style sequence parallel written without PrepareModuleInput: every colwise linear gathers its own
// input. Same model as the presets; only the plan differs.
const char* kPerLinearGather = R"(
tp_degree: 4
loss_parallel: true
modules:
  tok_embeddings: {style: rowwise, input_layouts: R, output_layouts: S(1)}
  norm: sequence_parallel
  output: {style: colwise, input_layouts: S(1), output_layouts: S(-1), use_local_output: false}
  layers.*.attention_norm: sequence_parallel
  layers.*.ffn_norm: sequence_parallel
  layers.*.attention.wq: {style: colwise, input_layouts: S(1)}
  layers.*.attention.wk: {style: colwise, input_layouts: S(1)}
  layers.*.attention.wv: {style: colwise, input_layouts: S(1)}
  layers.*.attention.wo: {style: rowwise, output_layouts: S(1)}
  layers.*.feed_forward.w1: {style: colwise, input_layouts: S(1)}
  layers.*.feed_forward.w3: {style: colwise, input_layouts: S(1)}
  layers.*.feed_forward.w2: {style: rowwise, output_layouts: S(1)}
)";

}  // namespace

TEST_CASE("a hand-written plan lowers by the rules: one all-gather per colwise linear") {
  Plan plan = load_plan_string(kPerLinearGather, "megatron.yaml");
  Program p = lower(llama3_8b(), Training{.seq_len = 8192}, plan);
  // The norms hand DTensors S(1) to wq/wk/wv; each colwise declares input S(1) != desired R and redistributes on
  // its own: 3 all-gathers for attention + 2 for w1/w3 = 5 (the presets share one per module: 2).
  CHECK(block_count(p, "forward", K::all_gather) == 5);
  CHECK(block_count(p, "forward", K::reduce_scatter) == 2);
  // Backward: each of those redistributions sends its P gradient back to S(1): 5 reduce-scatters; wo/w2 outputs
  // come back as 2 all-gathers; the norm weights 2 all-reduces.
  CHECK(block_count(p, "backward", K::reduce_scatter) == 5);
  CHECK(block_count(p, "backward", K::all_gather) == 2);
  CHECK(block_count(p, "backward", K::all_reduce) == 2);
}

TEST_CASE("a TP degree that does not divide the heads names the projection") {
  Plan base;
  base.tp_degree = 16;  // 8 kv heads: wk's local output is 1024 / 16 = 64 features, half a 128-wide head
  std::string err = lowering_error(llama3_8b(), Training{.seq_len = 8192}, preset_plan("sequence_parallel", base));
  CHECK_THAT(err, Contains("layers.0.attention.wk") && Contains("tp 16 does not divide the 8 heads"));
  base.tp_degree = 64;  // 32 query heads: 4096 / 64 = 64 features
  err = lowering_error(llama3_8b(), Training{.seq_len = 8192}, preset_plan("vanilla", base));
  CHECK_THAT(err, Contains("layers.0.attention.wq") && Contains("does not divide the 32 heads"));
}

TEST_CASE("a TP degree that does not divide a sharded dim names the module and the sizes") {
  Plan base;
  base.tp_degree = 3;  // vocab 128256 = 3 * 42752 divides; wq's 4096 outputs do not
  std::string err = lowering_error(llama3_8b(), Training{.seq_len = 8192}, preset_plan("vanilla", base));
  CHECK_THAT(err, Contains("layers.0.attention.wq") && Contains("4096") && Contains("tp=3"));
  Model m = llama3_8b();
  m.ffn_dim = 1000;  // 1000 % 16 = 8
  base.tp_degree = 16;
  m.n_kv_heads = 16;
  err = lowering_error(m, Training{.seq_len = 8192}, preset_plan("vanilla", base));
  CHECK_THAT(err, Contains("layers.0.feed_forward.w1") && Contains("1000"));
  m = llama3_8b();
  m.vocab_size = 128257;  // odd vocab: the vocab-sharded embedding cannot split it
  base.tp_degree = 2;
  err = lowering_error(m, Training{.seq_len = 8192}, preset_plan("vanilla", base));
  CHECK_THAT(err, Contains("tok_embeddings") && Contains("128257"));
}

TEST_CASE("sequence parallel needs seq_len divisible by the TP degree") {
  Plan base;
  base.tp_degree = 2;
  std::string err = lowering_error(llama3_8b(), Training{.seq_len = 1001}, preset_plan("sequence_parallel", base));
  CHECK_THAT(err, Contains("tok_embeddings") && Contains("1001") && Contains("S(1)"));
  CHECK(lowering_error(llama3_8b(), Training{.seq_len = 1001}, preset_plan("vanilla", base)) == "<no error>");
}

TEST_CASE("layouts that cannot compose are errors naming the module and placements") {
  Plan base;
  base.tp_degree = 4;
  SECTION("rowwise wo declared to take a replicated input") {
    // wo receives the plain local heads [1, 8192, 1024]; declaring R makes the DTensor's global [.., 1024], which
    // rowwise slices again to 256 features while its weight shard expects 1024.
    Plan p = preset_plan("vanilla", base);
    p.modules.push_back({"layers.*.attention.wo", ParallelStyle::rowwise(), 0});
    p.modules.back().style.input_layout = Placement::R();
    std::string err = lowering_error(llama3_8b(), Training{.seq_len = 8192}, p);
    CHECK_THAT(err, Contains("layers.0.attention.wo") && Contains("S(-1)") && Contains("[1, 8192, 256]") &&
                        Contains("expects 1024"));
  }
  SECTION("a DTensor reaching a module that is not in the plan") {
    // sequence_parallel without the norm entries: attention_norm would get the embedding's plain S(1) local tensor
    // (fine), but dropping the attention PrepareModuleInput hands wq a DTensor? No: keep the norms and drop the
    // feed_forward input preparation so that the sequence-parallel ffn_norm's DTensor meets a plain w1.
    Plan p = preset_plan("sequence_parallel", base);
    std::vector<PlanEntry> kept;
    for (auto& e : p.modules)
      if (e.pattern.find("feed_forward") == std::string::npos) kept.push_back(e);
    p.modules = kept;
    std::string err = lowering_error(llama3_8b(), Training{.seq_len = 8192}, p);
    CHECK_THAT(err, Contains("layers.0.feed_forward.w1") && Contains("DTensor S(1)") &&
                        Contains("mixed torch.Tensor and DTensor"));
  }
  SECTION("a colwise style on a norm") {
    Plan p = preset_plan("vanilla", base);
    p.modules.push_back({"layers.*.ffn_norm", ParallelStyle::colwise(), 0});
    CHECK_THAT(lowering_error(llama3_8b(), Training{.seq_len = 8192}, p),
               Contains("layers.0.ffn_norm") && Contains("colwise") && Contains("not to a norm"));
  }
  SECTION("loss parallel without vocab-sharded logits") {
    Plan p = preset_plan("sequence_parallel", base);
    p.loss_parallel = true;  // modules were made for loss_parallel = false: output R, local
    CHECK_THAT(lowering_error(llama3_8b(), Training{.seq_len = 8192}, p),
               Contains("output") && Contains("loss_parallel needs"));
  }
  SECTION("sharded logits without loss parallel") {
    Plan lp = base;
    lp.loss_parallel = true;
    Plan p = preset_plan("sequence_parallel", lp);
    p.loss_parallel = false;
    CHECK_THAT(lowering_error(llama3_8b(), Training{.seq_len = 8192}, p),
               Contains("output") && Contains("S(-1)") && Contains("loss_parallel is off"));
  }
  SECTION("async TP without sequence parallel") {
    Plan a = base;
    a.async_tp = true;
    CHECK_THAT(lowering_error(llama3_8b(), Training{.seq_len = 8192}, preset_plan("vanilla", a)),
               Contains("async_tp needs sequence-parallel collectives"));
  }
}

TEST_CASE("a wrong declaration whose shapes compose lowers (DTensor trusts from_local): verify must catch it") {
  // rowwise wo declaring output P "skips" the all-reduce: the plain P tensor is added to the R residual. Lowering,
  // like torch, cannot see it; tp-run verify does (tests/integration).
  Plan base;
  base.tp_degree = 2;
  Plan p = preset_plan("vanilla", base);
  p.modules.push_back({"layers.*.attention.wo", ParallelStyle::rowwise(), 0});
  p.modules.back().style.output_layout = Placement::P();
  Program prog = lower(llama3_8b(), Training{.seq_len = 8192}, p);
  CHECK(block_count(prog, "forward", K::all_reduce) == 1);  // only w2's
}

TEST_CASE("wk and wv sharded differently is refused at lowering, naming the attention module") {
  // A verify mutant that lowering used to accept and tp-run refused mid-run: wv declares output R, so each rank
  // holds all 8 value heads (1024 features) but only 8 / 2 = 4 key heads (512 features).
  const char* plan_yaml = R"(
tp_degree: 2
modules:
  layers.*.attention.wq: colwise
  layers.*.attention.wk: colwise
  layers.*.attention.wv: {style: colwise, output_layouts: R}
  layers.*.attention.wo: rowwise
)";
  std::string err = lowering_error(llama3_8b(), Training{.seq_len = 8192}, load_plan_string(plan_yaml, "kv.yaml"));
  CHECK_THAT(err, Contains("layers.0.attention") && Contains("local key heads (4) and value heads (8) differ"));
}
