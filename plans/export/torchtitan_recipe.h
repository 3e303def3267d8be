#pragma once
// torchtitan 0.3's recipes: what `torchrun -m torchtitan.train --module M --config <recipe>` trains when the user
// changes nothing. Read from torchtitan 0.3.0 (PyPI wheel torchtitan-0.3.0-py3-none-any.whl), each model's
// config_registry.py (torchtitan/models/llama3/config_registry.py, byte for byte the file at pytorch/torchtitan commit
// 203f9a806: llama3_8b / llama3_70b / llama3_405b; torchtitan/models/qwen3/config_registry.py: qwen3_30b_a3b), with
// the defaults of torchtitan/config/configs.py (ParallelismConfig: tensor_parallel_degree 1, enable_sequence_parallel
// True, data_parallel_shard_degree -1 = the rest of the world, expert_parallel_degree 1; CompileConfig off) and
// torchtitan/components/quantization/float8.py (Float8LinearConverter.Config.recipe_name "rowwise"):
//
//   module  recipe          flavor    tp  local batch  seq_len  AC         float8                  compile, async TP
//   llama3  llama3_8b       8B        1   1            8192     selective  none                    off
//   llama3  llama3_70b      70B       8   8            8192     full       none                    off
//   llama3  llama3_405b     405B      8   2            8192     full       rowwise (lm_head bf16)  on, on
//   qwen3   qwen3_30b_a3b   30B-A3B   1   2            4096     full       none                    off
//
// Each llama3 flavor's model (models/llama3/__init__.py _8b/_70b/_405b: dims, fused wqkv, RMSNorm eps 1e-5, rope theta
// 500000) is tptune's llama3-8b/70b/405b preset; qwen3's 30B-A3B (models/qwen3/__init__.py _30b_a3b: dim 2048, 48
// blocks, 32 heads of head_dim 128 over 4 kv heads, q/k RMSNorms, eps 1e-6, rope theta 1e6, vocab 151936, untied
// lm_head; every block a MoE of 128 experts of hidden 768, top 8, softmax scores renormalised over the top k
// (route_norm True), no shared expert) is Qwen/Qwen3-30B-A3B's config.json (examples/hf/qwen3-30b-a3b). A model is a
// recipe's only when every dimension equals it. Every model_registry defaults to attn_backend "flex"
// (plans/language/sdpa_backend.h).

#include <string>

#include "plans/language/plan.h"
#include "plans/model/model.h"

namespace tptune {

struct TorchtitanRecipe {
  const char* module;    // torchtitan.train's --module: "llama3", "qwen3"
  const char* function;  // config_registry function: "llama3_70b"
  const char* flavor;    // model_registry flavor: "70B"
  int tp_degree;
  int64_t local_batch_size;
  int64_t seq_len;
  ActivationCheckpointing activation_checkpointing;
  Float8Recipe float8;
  bool compile, async_tp;
};

// The recipe whose model equals `m` in every dimension tptune models (llama3: dim, layers, heads, kv heads, ffn_dim,
// vocab, MLP, norm, eps, rope theta; qwen3 MoE: those but ffn_dim (no dense block), the head_dim, q/k norms and the
// MoE spec; not the name: an HF config.json of Meta-Llama-3-8B is llama3_8b through its dimensions), or nullptr.
const TorchtitanRecipe* torchtitan_recipe(const Model& m);

// What torchtitan's llama3 model (models/llama3/model/args.py TransformerModelArgs: head_dim is always dim //
// n_heads, every Linear is bias=False) cannot express in `m`, as one phrase naming the feature ("head_dim 128 (dim
// 5120 / 32 heads = 160)", "biases on q/k/v (qkv_bias)"), or "" when it can. The torchtitan exports refuse such a
// model rather than emit a config that trains another one.
std::string torchtitan_llama3_lacks(const Model& m);

}  // namespace tptune
