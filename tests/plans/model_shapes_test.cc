// A head_dim of its own (n_heads x head_dim != dim) and biases on q/k/v (qkv_bias): parameter counts of the bundled
// Mistral Nemo and Qwen2.5 configs against their model cards, the lowering's shapes and placements (DTensor's
// _partition_linear_fn: colwise bias S(0), rowwise bias Replicate added once), the bytes of the bias ops, the config
// YAML keys and the shrunk models.
#include <fmt/format.h>

#include <catch2/catch.hpp>

#include "plans/language/config.h"
#include "plans/language/resolve/shrink.h"
#include "plans/lower/lower.h"
#include "plans/model/hf_config.h"
#include "plans/util/error.h"
#include "tests/fixtures.h"

using namespace tptune;

namespace {

std::string source(const std::string& rel) { return std::string(TPTUNE_SOURCE_DIR) + "/" + rel; }

const TensorDesc& tensor_named(const Program& p, const std::string& name) {
  for (const TensorDesc& t : p.tensors)
    if (t.name == name) return t;
  throw Error("no tensor " + name);
}

bool has_tensor(const Program& p, const std::string& name) {
  for (const TensorDesc& t : p.tensors)
    if (t.name == name) return true;
  return false;
}

const Op& op_named(const Program& p, const std::string& name) {
  for (const Segment& s : p.segments)
    for (const Op& op : s.ops)
      if (op.name == name) return op;
  throw Error("no op " + name);
}

// A small model with its own head_dim and q/k/v biases: dim 48, 4 heads of 16 (n_heads x head_dim 64 != 48) over
// 2 kv heads, ffn 96, vocab 128.
Model free_head_model(bool qkv_bias) {
  Model m;
  m.name = "free-head";
  m.dim = 48;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.explicit_head_dim = 16;
  m.qkv_bias = qkv_bias;
  m.ffn_dim = 96;
  m.vocab_size = 128;
  return m;
}

Program lower_plan(const Model& m, const Plan& plan, int64_t seq = 8) {
  return lower(m, Training{.seq_len = seq}, plan);
}

}  // namespace

TEST_CASE("model shapes: parameter counts of the bundled configs equal the model cards", "[model_shapes]") {
  // Qwen/Qwen2.5-7B: dim 3584, 28 layers, 28 heads of 128, 4 kv heads, ffn 18944, vocab 152064, untied head.
  //   attention weights 3584 x (28 + 2x4) x 128 + 28 x 128 x 3584 = 16,515,072 + 12,845,056 = 29,360,128
  //   q/k/v biases (28 + 2x4) x 128 = 4,608; MLP 3 x 3584 x 18944 = 203,685,888; two norms 7,168
  //   block 233,057,792 x 28 = 6,525,618,176; embedding and output 2 x 152064 x 3584 = 1,089,994,752; final norm 3,584
  //   total 7,615,616,512: the card's 7.61B (and 6.53B without embedding and head: 6,525,621,760).
  const Model qwen = load_hf_config(source("examples/hf/qwen2.5-7b/config.json"));
  CHECK(qwen.qkv_bias);
  CHECK(qwen.explicit_head_dim == 0);
  CHECK(qwen.head_dim() == 128);
  CHECK(qwen.block_parameters() == 233057792);
  CHECK(qwen.total_parameters() == 7615616512);
  CHECK(qwen.total_parameters() - 2 * qwen.embedding_parameters() == 6525621760);

  // Qwen/Qwen2.5-0.5B: both features at once, q/k/v biases and tied embeddings. dim 896, 24 layers, 14 heads of 64,
  // 2 kv heads, ffn 4864, vocab 151936.
  //   attention 896 x (14 + 2x2) x 64 + 14 x 64 x 896 = 1,032,192 + 802,816 = 1,835,008; q/k/v biases (14 + 4) x 64
  //   = 1,152; MLP 3 x 896 x 4864 = 13,074,432; norms 1,792; block 14,912,384 x 24 = 357,897,216
  //   embedding (the output's weight too) 151936 x 896 = 136,134,656; final norm 896
  //   total 494,032,768: the card's 0.49B (0.36B non-embedding: 357,898,112).
  const Model small = load_hf_config(source("examples/hf/qwen2.5-0.5b/config.json"));
  CHECK(small.qkv_bias);
  CHECK(small.tie_word_embeddings);
  CHECK(small.block_parameters() == 14912384);
  CHECK(small.total_parameters() == 494032768);
  CHECK(small.total_parameters() - small.embedding_parameters() == 357898112);

  // mistralai/Mistral-Nemo-Base-2407: dim 5120, 40 layers, 32 heads of 128 (not 5120 / 32 = 160), 8 kv heads,
  // ffn 14336, vocab 131072, untied head.
  //   attention 5120 x (32 + 2x8) x 128 + 32 x 128 x 5120 = 31,457,280 + 20,971,520 = 52,428,800
  //   MLP 3 x 5120 x 14336 = 220,200,960; norms 10,240; block 272,640,000 x 40 = 10,905,600,000
  //   embedding and output 2 x 131072 x 5120 = 1,342,177,280; final norm 5,120
  //   total 12,247,782,400: the card's 12B (12.2B).
  const Model nemo = load_hf_config(source("examples/hf/mistral-nemo-12b/config.json"));
  CHECK(!nemo.qkv_bias);
  CHECK(nemo.explicit_head_dim == 128);
  CHECK(nemo.head_dim() == 128);
  CHECK(nemo.block_parameters() == 272640000);
  CHECK(nemo.total_parameters() == 12247782400);
  // torchtitan's MFU attention term uses head_dim: 12 x 40 layers x 32 heads x 128 x seq 4096 per token.
  CHECK(nemo.training_flops_per_token(4096) ==
        6.0 * static_cast<double>(12247782400 - 671088640) + 12.0 * 40 * 32 * 128 * 4096);
}

TEST_CASE("model shapes: q/k/v/o follow head_dim, not dim / n_heads", "[model_shapes]") {
  const Model m = free_head_model(false);
  // vanilla at tp 2: wq (4 x 16 = 64, 48) colwise -> local (32, 48); wk/wv (2 x 16 = 32, 48) -> (16, 48);
  // wo (48, 64) rowwise -> local (48, 32).
  const Program p = lower_plan(m, test::make_plan("vanilla", {.tp_degree = 2}));
  CHECK(tensor_named(p, "attention.wq.weight").global_shape == Shape{64, 48});
  CHECK(tensor_named(p, "attention.wq.weight").local_shape == Shape{32, 48});
  CHECK(tensor_named(p, "attention.wk.weight").global_shape == Shape{32, 48});
  CHECK(tensor_named(p, "attention.wv.weight").local_shape == Shape{16, 48});
  CHECK(tensor_named(p, "attention.wo.weight").global_shape == Shape{48, 64});
  CHECK(tensor_named(p, "attention.wo.weight").local_shape == Shape{48, 32});
  const auto& a = std::get<AttentionOp>(op_named(p, "attention.core.fwd").kind);
  CHECK(a.n_heads == 2);
  CHECK(a.n_kv_heads == 1);
  CHECK(a.head_dim == 16);
  // tp 4 does not divide the 2 kv heads: refused naming wk, as for any model.
  CHECK_THROWS_WITH(lower_plan(m, test::make_plan("vanilla", {.tp_degree = 4})),
                    Catch::Contains("layers.0.attention.wk") && Catch::Contains("tp 4 does not divide the 2 heads"));
  // The parameter count follows: attention 48 x (4 + 4) x 16 + 64 x 48 = 9,216; MLP 3 x 48 x 96 = 13,824; norms 96.
  CHECK(m.block_parameters() == 9216 + 13824 + 96);
}

TEST_CASE("model shapes: colwise biases are S(0) shards, their gradient the token sum of dy", "[model_shapes]") {
  const Model m = free_head_model(true);
  const Program p = lower_plan(m, test::make_plan("sequence_parallel", {.tp_degree = 2}));
  const TensorDesc& bq = tensor_named(p, "attention.wq.bias");
  CHECK(bq.role == TensorRole::parameter);
  CHECK(bq.global_shape == Shape{64});
  CHECK(bq.local_shape == Shape{32});
  CHECK(bq.param_shard_dim == 0);
  CHECK(bq.placement.is_shard());
  CHECK(tensor_named(p, "attention.wk.bias").local_shape == Shape{16});
  CHECK(!has_tensor(p, "attention.wo.bias"));  // Qwen2's o_proj has none
  CHECK(!has_tensor(p, "feed_forward.w1.bias"));
  // Forward: after the matmul, bias_add {mm, b} -> {out}; batch 1 x seq 8 tokens x 32 local features, bf16:
  // bytes = (2 x 8 x 32 + 32) x 2 = 1,088; one add per element (256 flops); bias_split 1 (an S(-1) output).
  const Op& add = op_named(p, "attention.wq.bias_add");
  const auto& ew = std::get<ElementwiseOp>(add.kind);
  CHECK(ew.fn == ElementwiseOp::Fn::bias_add);
  CHECK(ew.bytes == 1088);
  CHECK(ew.flops == 256);
  CHECK(ew.bias_split == 1);
  CHECK(p.tensor(add.inputs[1]).name == "attention.wq.bias");
  CHECK(p.tensor(add.outputs[0]).name == "attention.wq.out");
  // Backward: bias_grad {dy} -> {db}, reads 8 x 32 and writes 32 elements: (256 + 32) x 2 = 576 bytes; db is the
  // final gradient of the S(0) bias (no collective: each rank sums its own features).
  const Op& grad = op_named(p, "attention.wq.bwd_bias");
  const auto& gw = std::get<ElementwiseOp>(grad.kind);
  CHECK(gw.fn == ElementwiseOp::Fn::bias_grad);
  CHECK(gw.bytes == 576);
  const TensorDesc& db = p.tensor(grad.outputs[0]);
  CHECK(db.role == TensorRole::param_grad);
  CHECK(db.param == "attention.wq.bias");
  CHECK(db.local_shape == Shape{32});
  CHECK(db.param_shard_dim == 0);
}

TEST_CASE("model shapes: a rowwise bias stays Replicate and is added once to the Partial sum", "[model_shapes]") {
  const Model m = free_head_model(true);
  Plan plan = test::make_plan("vanilla", {.tp_degree = 2});
  for (const char* w : {"wq", "wk", "wv"}) {
    ParallelStyle s = ParallelStyle::rowwise();
    s.input_layout = Placement::R();
    plan.modules.push_back({fmt::format("layers.*.attention.{}", w), s});
  }
  ParallelStyle wo = ParallelStyle::rowwise();
  wo.input_layout = Placement::R();
  plan.modules.push_back({"layers.*.attention.wo", wo});
  const Program p = lower_plan(m, plan);
  const TensorDesc& bq = tensor_named(p, "attention.wq.bias");
  CHECK(bq.placement.is_replicate());
  CHECK(bq.param_shard_dim == -1);
  CHECK(bq.local_shape == Shape{64});
  // The matmul's Partial output gets b / 2 on each rank (DTensor's Replicate -> Partial divides by the group size);
  // the all-reduce then holds b once. Bytes: (2 x 8 x 64 + 64) x 2 = 2,176.
  const Op& add = op_named(p, "attention.wq.bias_add");
  const auto& ew = std::get<ElementwiseOp>(add.kind);
  CHECK(ew.bias_split == 2);
  CHECK(ew.bytes == 2176);
  CHECK(p.tensor(add.outputs[0]).placement.is_partial());
  // Backward: dy of the Replicate output is R; db (the sum over tokens) is Replicate, 64 wide, and final.
  const Op& grad = op_named(p, "attention.wq.bwd_bias");
  const TensorDesc& db = p.tensor(grad.outputs[0]);
  CHECK(db.role == TensorRole::param_grad);
  CHECK(db.local_shape == Shape{64});
  CHECK(db.placement.is_replicate());
}

TEST_CASE("model shapes: FSDP gathers the biases in bf16 with their block, float8 keeps them high precision",
          "[model_shapes]") {
  const Model m = free_head_model(true);
  // Float8 tensorwise: no cast of a bias (torchao's Float8Linear adds it after the scaled matmul, in high precision).
  const Program f8 = lower_plan(m, test::make_plan("vanilla", {.tp_degree = 2, .float8 = Float8Recipe::tensorwise}));
  CHECK(!has_tensor(f8, "attention.wq.bias.fp8"));
  CHECK(has_tensor(f8, "attention.wq.weight.fp8"));
  const Op& add = op_named(f8, "attention.wq.bias_add");
  CHECK(f8.tensor(add.inputs[0]).dtype == DType::bf16);
  CHECK(f8.tensor(add.inputs[1]).dtype == DType::bf16);
  // dp_shard 2: the biases are among the block's parameters FSDP all-gathers (and their gradients reduce-scattered).
  const Program fsdp = lower_plan(m, test::make_plan("vanilla", {.tp_degree = 2, .dp_shard = 2}));
  bool gathers_bias = false;
  for (const Segment& s : fsdp.segments)
    for (const Op& op : s.ops)
      if (op.name == "fsdp.all_gather" && s.kind == SegmentKind::block_fwd)
        for (TensorId t : op.outputs) gathers_bias |= fsdp.tensor(t).name == "attention.wq.bias";
  CHECK(gathers_bias);
}

TEST_CASE("model shapes: config YAML keys model.head_dim and model.qkv_bias", "[model_shapes]") {
  auto model_of = [](const std::string& extra) {
    return load_config_string("model: {dim: 48, n_layers: 2, n_heads: 4, n_kv_heads: 2, ffn_dim: 96, vocab_size: 128" +
                                  extra +
                                  "}\ntraining: {seq_len: 8}\ncluster: {gpu: h100-sxm, nodes: 1, gpus_per_node: 8}\n",
                              "c.yaml")
        .model;
  };
  const Model m = model_of(", head_dim: 16, qkv_bias: true");
  CHECK(m.explicit_head_dim == 16);
  CHECK(m.head_dim() == 16);
  CHECK(m.qkv_bias);
  CHECK(model_of("").head_dim() == 12);
  CHECK(!model_of("").qkv_bias);
  auto error = [&](const std::string& extra) {
    try {
      model_of(extra);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK_THAT(error(", head_dim: 15"), Catch::Contains("model.head_dim") && Catch::Contains("expected an even size"));
  CHECK_THAT(error(", head_dim: 0"), Catch::Contains("model.head_dim: expected an integer in 2..65536"));
  CHECK_THAT(error(", qkv_bias: maybe"), Catch::Contains("model.qkv_bias"));
}

TEST_CASE("model shapes: shrinking keeps a free head_dim and the biases", "[model_shapes]") {
  const Model nemo = load_hf_config(source("examples/hf/mistral-nemo-12b/config.json"));
  const Shrunk s = shrink_for_verify(nemo, Training{}, test::make_plan("vanilla", {.tp_degree = 2}));
  // kv 8 -> 2 (tp 2 divides it), heads 2 x 4 = 8, head_dim 128 -> 8, dim: the first multiple of 2 above 8 x 8 = 64,
  // 66 (5120 is even), so n_heads x head_dim (64) != dim (66) as in the real model.
  CHECK(s.model.explicit_head_dim == 8);
  CHECK(s.model.n_heads == 8);
  CHECK(s.model.dim == 66);
  CHECK(s.model.n_heads * s.model.head_dim() != s.model.dim);
  const Model qwen = load_hf_config(source("examples/hf/qwen2.5-7b/config.json"));
  const Shrunk q = shrink_for_verify(qwen, Training{}, test::make_plan("vanilla", {.tp_degree = 2}));
  CHECK(q.model.qkv_bias);
  CHECK(has_tensor(lower(q.model, q.training, test::make_plan("vanilla", {.tp_degree = 2})), "attention.wk.bias"));
}
