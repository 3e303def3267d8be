#include "plans/torchtitan_recipe.h"

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
        m.norm_eps == p.norm_eps && m.rope_theta == p.rope_theta && m.tie_word_embeddings == p.tie_word_embeddings)
      return &r;
  }
  return nullptr;
}

}  // namespace tptune
