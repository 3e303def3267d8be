#include "plans/export/torchtitan_recipe.h"

#include <fmt/format.h>

#include <array>

namespace tptune {

const TorchtitanRecipe* torchtitan_recipe(const Model& m) {
  using AC = ActivationCheckpointing;
  static const std::array<TorchtitanRecipe, 3> recipes = {{
      {"llama3_8b", "8B", "llama3-8b", 1, 1, 8192, AC::selective, Float8Recipe::none, false, false},
      {"llama3_70b", "70B", "llama3-70b", 8, 8, 8192, AC::full, Float8Recipe::none, false, false},
      {"llama3_405b", "405B", "llama3-405b", 8, 2, 8192, AC::full, Float8Recipe::rowwise, true, true},
  }};
  for (const TorchtitanRecipe& r : recipes) {
    Model p;
    if (!model_preset(r.preset, p)) continue;
    if (m.dim == p.dim && m.n_layers == p.n_layers && m.n_heads == p.n_heads && m.n_kv_heads == p.n_kv_heads &&
        m.ffn_dim == p.ffn_dim && m.vocab_size == p.vocab_size && m.mlp == p.mlp && m.norm == p.norm &&
        m.norm_eps == p.norm_eps && m.rope_theta == p.rope_theta && m.head_dim() == p.head_dim() &&
        m.qkv_bias == p.qkv_bias && m.tie_word_embeddings == p.tie_word_embeddings && m.moe == p.moe &&
        m.mla == p.mla && m.qk_norm == p.qk_norm)
      return &r;
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
