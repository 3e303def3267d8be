#include "plans/export/torchtitan_recipe.h"

#include <fmt/format.h>

#include <array>

namespace tptune {

namespace {

using AC = ActivationCheckpointing;

// torchtitan 0.3.0 models/qwen3/__init__.py `_30b_a3b`, in tptune's terms (the recipe table in the header).
Model qwen3_30b_a3b_model() {
  Model m;
  m.dim = 2048;
  m.n_layers = 48;
  m.n_heads = 32;
  m.n_kv_heads = 4;
  m.explicit_head_dim = 128;
  m.vocab_size = 151936;
  m.norm_eps = 1e-6;
  m.rope_theta = 1e6;
  m.qk_norm = true;
  m.moe.experts = 128;
  m.moe.top_k = 8;
  m.moe.expert_ffn_dim = 768;
  m.moe.score = RouterScore::softmax;
  m.moe.route_norm = true;
  return m;
}

bool same_block(const Model& m, const Model& p) {
  return m.dim == p.dim && m.n_layers == p.n_layers && m.n_heads == p.n_heads && m.n_kv_heads == p.n_kv_heads &&
         m.vocab_size == p.vocab_size && m.mlp == p.mlp && m.norm == p.norm && m.norm_eps == p.norm_eps &&
         m.rope_theta == p.rope_theta && m.head_dim() == p.head_dim() && m.qkv_bias == p.qkv_bias &&
         m.tie_word_embeddings == p.tie_word_embeddings && m.qk_norm == p.qk_norm && m.moe == p.moe && m.mla == p.mla;
}

}  // namespace

const TorchtitanRecipe* torchtitan_recipe(const Model& m) {
  struct Entry {
    TorchtitanRecipe recipe;
    const char* preset;  // tptune's model preset with the flavor's dimensions; nullptr: qwen3_30b_a3b_model()
  };
  static const std::array<Entry, 4> recipes = {{
      {{"llama3", "llama3_8b", "8B", 1, 1, 8192, AC::selective, Float8Recipe::none, false, false}, "llama3-8b"},
      {{"llama3", "llama3_70b", "70B", 8, 8, 8192, AC::full, Float8Recipe::none, false, false}, "llama3-70b"},
      {{"llama3", "llama3_405b", "405B", 8, 2, 8192, AC::full, Float8Recipe::rowwise, true, true}, "llama3-405b"},
      {{"qwen3", "qwen3_30b_a3b", "30B-A3B", 1, 2, 4096, AC::full, Float8Recipe::none, false, false}, nullptr},
  }};
  for (const Entry& e : recipes) {
    Model p;
    if (e.preset) {
      if (!model_preset(e.preset, p)) continue;
      if (same_block(m, p) && m.ffn_dim == p.ffn_dim) return &e.recipe;
    } else if (same_block(m, qwen3_30b_a3b_model())) {  // no dense block: the config's ffn_dim is never built
      return &e.recipe;
    }
  }
  return nullptr;
}

std::string torchtitan_llama3_lacks(const Model& m) {
  std::string lacks;
  auto add = [&](const std::string& what) { lacks.append(lacks.empty() ? "" : " and ").append(what); };
  if (m.n_heads > 0 && m.head_dim() * m.n_heads != m.dim)
    add(fmt::format("head_dim {} (n_heads {} x head_dim {} != dim {}; torchtitan's llama3 uses dim / n_heads)",
                    m.head_dim(), m.n_heads, m.head_dim(), m.dim));
  if (m.qkv_bias) add("biases on q/k/v (qkv_bias; torchtitan's llama3 Linears have bias=False)");
  if (m.mla.kv_lora_rank > 0) add("multi-head latent attention (model.mla: torchtitan's deepseek_v3, not its llama3)");
  return lacks;
}

}  // namespace tptune
