// Tied input/output embeddings (Model::tie_word_embeddings): one parameter, tok_embeddings.weight, used by the
// embedding and by the output projection, its gradient the sum of both uses'; placements that disagree are refused;
// under FSDP one unit [tok_embeddings, norm, output] with one all-gather and one reduce-scatter (torchtitan 0.3's
// apply_fsdp_to_decoder).
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "plans/export/export.h"
#include "plans/language/config.h"
#include "plans/language/resolve/shrink.h"
#include "plans/model/hf_config.h"
#include "tests/plans/lowering_helpers.h"

using namespace tptune;
using namespace tptune::testing;

namespace {

Model tied_tiny() {
  Model m = test::model_named("tiny-llama");  // dim 64, 2 layers, 8 heads (4 kv), ffn 128, vocab 256
  m.tie_word_embeddings = true;
  return m;
}

// Parameter tensors of a Program named `name`.
std::vector<TensorId> params_named(const Program& p, const std::string& name) {
  std::vector<TensorId> out;
  for (size_t i = 0; i < p.tensors.size(); ++i)
    if (p.tensors[i].role == TensorRole::parameter && p.tensors[i].name == name) out.push_back(static_cast<int>(i));
  return out;
}

// Every op of segments of kind `k`.
std::vector<const Op*> ops_of(const Program& p, SegmentKind k) {
  std::vector<const Op*> out;
  for (const Segment& s : p.segments)
    if (s.kind == k)
      for (const Op& op : s.ops) out.push_back(&op);
  return out;
}

const Op* find_op(const Program& p, SegmentKind k, const std::string& name) {
  for (const Op* op : ops_of(p, k))
    if (op->name == name) return op;
  return nullptr;
}

// FSDP collectives (group dp) of segments of kind `k`, as (kind, bytes).
std::vector<std::pair<CollectiveKind, int64_t>> fsdp_ops(const Program& p, SegmentKind k) {
  std::vector<std::pair<CollectiveKind, int64_t>> out;
  for (const Op* op : ops_of(p, k))
    if (auto* c = std::get_if<CollectiveOp>(&op->kind); c && c->group == Group::dp) out.push_back({c->kind, c->bytes});
  return out;
}

// Sum over parameter tensors of their global elements (block ones once per layer).
int64_t program_parameters(const Program& p) {
  int64_t n = 0;
  for (const TensorDesc& d : p.tensors)
    if (d.role == TensorRole::parameter) n += numel(d.global_shape) * (d.per_layer ? p.model.n_layers : 1);
  return n;
}

}  // namespace

TEST_CASE("tied embeddings: one parameter tensor, read by the embedding and the output projection", "[lower][tied]") {
  const Program p = lower(tied_tiny(), Training{.seq_len = 16}, make_plan("sequence_parallel", {.tp_degree = 2}));
  const auto emb = params_named(p, "tok_embeddings.weight");
  REQUIRE(emb.size() == 1);
  CHECK(params_named(p, "output.weight").empty());
  const TensorDesc& w = p.tensor(emb[0]);
  // tok_embeddings rowwise and output colwise both hold the weight S(0): rows of the vocab, 256 / 2 = 128 per rank.
  CHECK(w.placement.same_as(Placement::S(0), 2));
  CHECK(w.local_shape == Shape{128, 64});
  CHECK(w.global_shape == Shape{256, 64});
  const Op* fwd = find_op(p, SegmentKind::head, "output.fwd");
  REQUIRE(fwd);
  CHECK(std::count(fwd->inputs.begin(), fwd->inputs.end(), emb[0]) == 1);
  const Op* look = find_op(p, SegmentKind::embed_fwd, "tok_embeddings.fwd");
  REQUIRE(look);
  CHECK(std::count(look->inputs.begin(), look->inputs.end(), emb[0]) == 1);
  // One AdamW (one optimizer state pair) for it.
  int adamw = 0;
  for (const Op* op : ops_of(p, SegmentKind::optimizer))
    if (std::count(op->inputs.begin(), op->inputs.end(), emb[0])) ++adamw;
  CHECK(adamw == 1);
}

TEST_CASE("tied embeddings: the head's weight gradient is added to the embedding's before the optimizer",
          "[lower][tied]") {
  const Program p = lower(tied_tiny(), Training{.seq_len = 16}, make_plan("sequence_parallel", {.tp_degree = 2}));
  const TensorId w = params_named(p, "tok_embeddings.weight").at(0);
  const Op* head_dw = find_op(p, SegmentKind::head, "output.bwd_weight");
  const Op* emb_dw = find_op(p, SegmentKind::embed_bwd, "tok_embeddings.bwd");
  const Op* add = find_op(p, SegmentKind::embed_bwd, "tok_embeddings.weight.grad_tied_add");
  REQUIRE(head_dw);
  REQUIRE(emb_dw);
  REQUIRE(add);
  const auto* acc = std::get_if<ElementwiseOp>(&add->kind);
  REQUIRE(acc);
  CHECK(acc->fn == ElementwiseOp::Fn::accumulate);
  // {a, y} -> {y += a}: a is the head's gradient, y the embedding's.
  CHECK(add->inputs == std::vector<TensorId>{head_dw->outputs[0], emb_dw->outputs[0]});
  CHECK(add->outputs == std::vector<TensorId>{emb_dw->outputs[0]});
  // Local gradient (128, 64) bf16: read both and write one, 3 x 8192 x 2 B = 49152 B; one add per element.
  CHECK(acc->bytes == 49152);
  CHECK(acc->flops == 8192);
  // The head's gradient is an ordinary gradient; the sum is the parameter's gradient, which AdamW reads.
  CHECK(p.tensor(head_dw->outputs[0]).role == TensorRole::gradient);
  const TensorDesc& g = p.tensor(emb_dw->outputs[0]);
  CHECK(g.role == TensorRole::param_grad);
  CHECK(g.param == "tok_embeddings.weight");
  int param_grads = 0;
  for (const TensorDesc& d : p.tensors)
    if (d.role == TensorRole::param_grad && d.param == "tok_embeddings.weight") ++param_grads;
  CHECK(param_grads == 1);
  bool adamw_reads_sum = false;
  for (const Op* op : ops_of(p, SegmentKind::optimizer))
    if (op->inputs.size() == 4 && op->inputs[0] == w) adamw_reads_sum = op->inputs[1] == emb_dw->outputs[0];
  CHECK(adamw_reads_sum);
}

TEST_CASE("tied embeddings: the Program's parameters are the model's, the shared weight once", "[lower][tied]") {
  // tiny-llama: embedding 256 x 64 = 16,384; 2 blocks of 36,992 (model_test.cc); final norm 64. Tied:
  // 16,384 + 73,984 + 64 = 90,432; untied adds the output's 16,384: 106,816.
  Model m = tied_tiny();
  CHECK(m.total_parameters() == 90'432);
  for (int tp : {1, 2}) {
    const Program p = lower(m, Training{.seq_len = 16}, make_plan("sequence_parallel", {.tp_degree = tp}));
    CHECK(program_parameters(p) == 90'432);
  }
  m.tie_word_embeddings = false;
  CHECK(m.total_parameters() == 106'816);
  CHECK(program_parameters(lower(m, Training{.seq_len = 16}, make_plan("sequence_parallel", {.tp_degree = 2}))) ==
        106'816);
}

TEST_CASE("tied embeddings: the two uses must place the one weight alike", "[lower][tied]") {
  const Training t{.seq_len = 16};
  SECTION("tok_embeddings colwise holds it S(1), output colwise S(0)") {
    Plan plan = make_plan("sequence_parallel", {.tp_degree = 2});
    for (PlanEntry& e : plan.modules)
      if (e.pattern == "tok_embeddings") e.style.kind = StyleKind::colwise;  // output S(-1) -> S(1): all-to-all
    CHECK(lowering_error(tied_tiny(), t, plan) ==
          "output: its weight is tok_embeddings.weight (tie_word_embeddings), which tok_embeddings holds on the model "
          "dim (S(1)) but this style would hold on the vocab dim (S(0)): a tied weight is one parameter with one "
          "placement (torchtitan refuses a tied parameter with conflicting sharding configs); make tok_embeddings "
          "rowwise and output colwise (both S(0)), or parallelize neither");
    Model untied = tied_tiny();
    untied.tie_word_embeddings = false;
    CHECK(lowering_error(untied, t, plan) == "<no error>");
  }
  SECTION("output not parallelized holds it R") {
    Plan plan = make_plan("sequence_parallel", {.tp_degree = 2});
    plan.modules.erase(std::remove_if(plan.modules.begin(), plan.modules.end(),
                                      [](const PlanEntry& e) { return e.pattern == "output"; }),
                       plan.modules.end());
    // (The weight is checked before the input: the error names the tie, not the DTensor the norm hands over.)
    const std::string err = lowering_error(tied_tiny(), t, plan);
    CHECK_THAT(err, Catch::StartsWith("output: its weight is tok_embeddings.weight (tie_word_embeddings), which "
                                      "tok_embeddings holds on the vocab dim (S(0)) but this style would hold "
                                      "replicated (R)"));
  }
  SECTION("loss_parallel changes the logits' layout, not the weight's: accepted either way") {
    for (bool lp : {false, true})
      CHECK(lowering_error(tied_tiny(), t, make_plan("sequence_parallel", {.tp_degree = 2, .loss_parallel = lp})) ==
            "<no error>");
  }
}

TEST_CASE("tied embeddings under FSDP: one unit, gathered once before the embedding, reduce-scattered once",
          "[lower][tied]") {
  const Training t{.seq_len = 16};
  const Plan plan = make_plan("sequence_parallel", {.tp_degree = 2, .dp_shard = 2});
  const Program p = lower(tied_tiny(), t, plan);
  // The unit's parameters at tp 2: tok_embeddings.weight (128, 64) = 8,192 and norm.weight (64): 8,256 elements.
  // All-gather in bf16: 16,512 B; reduce-scatter of the gradients in fp32: 33,024 B.
  using K = CollectiveKind;
  CHECK(fsdp_ops(p, SegmentKind::embed_fwd) == std::vector<std::pair<K, int64_t>>{{K::all_gather, 16'512}});
  CHECK(fsdp_ops(p, SegmentKind::head).empty());
  CHECK(fsdp_ops(p, SegmentKind::embed_bwd) == std::vector<std::pair<K, int64_t>>{{K::reduce_scatter, 33'024}});
  // Its reduce-scatter follows the tied add: it reduces the summed gradient.
  const auto bwd = ops_of(p, SegmentKind::embed_bwd);
  const auto at = [&](const std::string& name) {
    return std::find_if(bwd.begin(), bwd.end(), [&](const Op* op) { return op->name == name; }) - bwd.begin();
  };
  CHECK(at("tok_embeddings.weight.grad_tied_add") < at("fsdp.reduce_scatter"));
  // Untied: the embedding (8,192 elements) and the head (norm + output, 8,256) are two units; the embedding is
  // gathered again for its backward.
  Model untied = tied_tiny();
  untied.tie_word_embeddings = false;
  const Program u = lower(untied, t, plan);
  CHECK(fsdp_ops(u, SegmentKind::embed_fwd) == std::vector<std::pair<K, int64_t>>{{K::all_gather, 16'384}});
  CHECK(fsdp_ops(u, SegmentKind::head) ==
        std::vector<std::pair<K, int64_t>>{{K::all_gather, 16'512}, {K::reduce_scatter, 33'024}});
  CHECK(fsdp_ops(u, SegmentKind::embed_bwd) ==
        std::vector<std::pair<K, int64_t>>{{K::all_gather, 16'384}, {K::reduce_scatter, 32'768}});
}

TEST_CASE("tied embeddings: torchtitan 0.3's chunked loss uses the tied weight too", "[lower][tied]") {
  Plan plan = make_plan("sequence_parallel", {.tp_degree = 2}, Framework::torchtitan_0_3);
  const Program p = lower(tied_tiny(), Training{.seq_len = 16}, plan);
  CHECK(params_named(p, "tok_embeddings.weight").size() == 1);
  CHECK(params_named(p, "lm_head.weight").empty());
  CHECK(find_op(p, SegmentKind::embed_bwd, "tok_embeddings.weight.grad_tied_add") != nullptr);
  CHECK(program_parameters(p) == 90'432);
}

namespace {
std::string source(const std::string& rel) { return std::string(TPTUNE_SOURCE_DIR) + "/" + rel; }
}  // namespace

TEST_CASE("tied embeddings: the Llama 3.2 1B and 3B config.json have the model cards' parameter counts",
          "[hf_config][tied]") {
  // meta-llama/Llama-3.2-1B: hidden 2048, 16 layers, 32 heads of 64, 8 kv heads, intermediate 8192, vocab 128256.
  //   Embedding 128,256 x 2,048 = 262,668,288 (also the output's weight: counted once).
  //   Block: wq 2048x2048 + wk, wv 2 x (512x2048) = 2048 x (32 + 16) x 64 = 6,291,456; wo 2048x2048 = 4,194,304;
  //   MLP 3 x 2048 x 8192 = 50,331,648; norms 2 x 2048 = 4,096: 60,821,504. 16 blocks: 973,144,064.
  //   Final norm 2,048. Total 262,668,288 + 973,144,064 + 2,048 = 1,235,814,400 (the card's 1.24B).
  const Model b1 = load_hf_config(source("examples/hf/llama3.2-1b/config.json"));
  CHECK(b1.tie_word_embeddings);
  CHECK(b1.block_parameters() == 60'821'504);
  CHECK(b1.total_parameters() == 1'235'814'400);
  // meta-llama/Llama-3.2-3B: hidden 3072, 28 layers, 24 heads of 128, 8 kv heads, intermediate 8192, vocab 128256.
  //   Embedding 128,256 x 3,072 = 394,002,432.
  //   Block: 3072 x (24 + 16) x 128 = 15,728,640; wo 3072x3072 = 9,437,184; MLP 3 x 3072 x 8192 = 75,497,472;
  //   norms 6,144: 100,669,440. 28 blocks: 2,818,744,320. Final norm 3,072.
  //   Total 394,002,432 + 2,818,744,320 + 3,072 = 3,212,749,824 (the card's 3.21B).
  const Model b3 = load_hf_config(source("examples/hf/llama3.2-3b/config.json"));
  CHECK(b3.tie_word_embeddings);
  CHECK(b3.block_parameters() == 100'669'440);
  CHECK(b3.total_parameters() == 3'212'749'824);
  // Lowered (tp 2, sequence parallel), the Program holds exactly those parameters, the table once.
  const Program p = lower(b1, Training{.seq_len = 64}, make_plan("sequence_parallel", {.tp_degree = 2}));
  CHECK(program_parameters(p) == 1'235'814'400);
}

TEST_CASE("tied embeddings: tie_word_embeddings from config.json and the config YAML", "[hf_config][tied]") {
  const std::string base =
      R"("architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
          "num_hidden_layers": 2, "vocab_size": 100)";
  CHECK(parse_hf_config("{" + base + ", \"tie_word_embeddings\": true}", "c.json").tie_word_embeddings);
  CHECK_FALSE(parse_hf_config("{" + base + ", \"tie_word_embeddings\": false}", "c.json").tie_word_embeddings);
  CHECK_FALSE(parse_hf_config("{" + base + "}", "c.json").tie_word_embeddings);  // LlamaConfig's default
  const Config cfg = test::make_config({.model = "{preset: tiny-llama, tie_word_embeddings: true}"});
  CHECK(cfg.model.tie_word_embeddings);
  try {
    test::make_config({.model = "{preset: tiny-llama, tie_word_embeddings: maybe}"});
    FAIL("accepted tie_word_embeddings: maybe");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("model.tie_word_embeddings"));
  }
}

TEST_CASE("tied embeddings: the torchtitan exports refuse a tied model, naming the feature", "[export][tied]") {
  const Model b1 = load_hf_config(source("examples/hf/llama3.2-1b/config.json"));
  ExportContext ctx;
  ctx.model = b1;
  ctx.nodes = 1;
  ctx.gpus_per_node = 2;
  ctx.n_layers = b1.n_layers;
  const Plan plan = make_plan("sequence_parallel", {.tp_degree = 2}, Framework::torchtitan_0_3);
  auto err = [&](ExportFormat f) {
    try {
      export_plan(plan, f, ctx);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  CHECK(err(ExportFormat::torchtitan) ==
        "model 'meta-llama/Llama-3.2-1B': tied input/output embeddings (tie_word_embeddings): torchtitan 0.3 ties them "
        "only in its llama3 1B and 3B flavors, for which it has no recipe (config_registry: llama3_8b, llama3_70b, "
        "llama3_405b), so --format torchtitan cannot name one that trains this model; --format python prints the "
        "plan's parallelize_module dict");
  CHECK(err(ExportFormat::torchtitan_toml) ==
        "model 'meta-llama/Llama-3.2-1B': tied input/output embeddings (tie_word_embeddings): torchtitan's llama3 "
        "before 0.3 has no weight tying, so this job config would train another (untied) model; --format python "
        "prints the plan's parallelize_module dict");
  CHECK(err(ExportFormat::python) == "<no error>");
  // The same dims untied: the TOML is written (no recipe has them, so the 0.3 command still refuses, generically).
  ctx.model->tie_word_embeddings = false;
  CHECK(err(ExportFormat::torchtitan_toml) == "<no error>");
  CHECK_THAT(err(ExportFormat::torchtitan), Catch::Contains("not the dimensions of torchtitan 0.3's llama3"));
}

TEST_CASE("tied embeddings: --shrink keeps the tie", "[shrink][tied]") {
  const Model b3 = load_hf_config(source("examples/hf/llama3.2-3b/config.json"));
  const Shrunk s = shrink_for_verify(b3, Training{.seq_len = 8192}, make_plan("sequence_parallel", {.tp_degree = 2}));
  CHECK(s.model.tie_word_embeddings);
  // The shrunk model (24 heads / 8 kv heads: 2 kv heads, 6 heads of 8, dim 48; vocab 80) still lowers with one table.
  const Program p = lower(s.model, s.training, make_plan("sequence_parallel", {.tp_degree = 2}));
  CHECK(params_named(p, "tok_embeddings.weight").size() == 1);
  CHECK(program_parameters(p) == s.model.total_parameters());
}
