#pragma once
// torchtitan 0.3's llama3 recipes: what `torchrun -m torchtitan.train --module llama3 --config <recipe>` trains when
// the user changes nothing. Read from torchtitan 0.3.0 (PyPI wheel torchtitan-0.3.0-py3-none-any.whl),
// torchtitan/models/llama3/config_registry.py (byte for byte the file at pytorch/torchtitan commit 203f9a806),
// functions llama3_8b / llama3_70b / llama3_405b, with the defaults of torchtitan/config/configs.py (ParallelismConfig:
// tensor_parallel_degree 1, enable_sequence_parallel True, data_parallel_shard_degree -1 = the rest of the world;
// CompileConfig off) and torchtitan/components/quantization/float8.py (Float8LinearConverter.Config.recipe_name
// "rowwise"):
//
//   recipe        flavor  tp  local batch  seq_len  AC         float8                     compile, async TP
//   llama3_8b     8B      1   1            8192     selective  none                       off
//   llama3_70b    70B     8   8            8192     full       none                       off
//   llama3_405b   405B    8   2            8192     full       rowwise (lm_head bf16)     on, on
//
// Each flavor's model (models/llama3/__init__.py _8b/_70b/_405b: dims, fused wqkv, RMSNorm eps 1e-5, rope theta
// 500000) is tptune's llama3-8b/70b/405b preset; a model is a recipe's only when every dimension equals it.

#include <string>

#include "plans/language/plan.h"
#include "plans/model/model.h"

namespace tptune {

struct TorchtitanRecipe {
  const char* function;  // config_registry function: "llama3_70b"
  const char* flavor;    // model_registry flavor: "70B"
  const char* preset;    // tptune's model preset with the flavor's dimensions: "llama3-70b"
  int tp_degree;
  int64_t local_batch_size;
  int64_t seq_len;
  ActivationCheckpointing activation_checkpointing;
  Float8Recipe float8;
  bool compile, async_tp;
};

// The recipe whose model equals `m` in every dimension tptune models (dim, layers, heads, kv heads, ffn_dim, vocab,
// MLP, norm, eps, rope theta; not the name: an HF config.json of Meta-Llama-3-8B is llama3_8b through its
// dimensions), or nullptr.
const TorchtitanRecipe* torchtitan_recipe(const Model& m);

// What torchtitan's llama3 model (models/llama3/model/args.py TransformerModelArgs: head_dim is always dim //
// n_heads, every Linear is bias=False) cannot express in `m`, as one phrase naming the feature ("head_dim 128 (dim
// 5120 / 32 heads = 160)", "biases on q/k/v (qkv_bias)"), or "" when it can. The torchtitan exports refuse such a
// model rather than emit a config that trains another one.
std::string torchtitan_llama3_lacks(const Model& m);

}  // namespace tptune
