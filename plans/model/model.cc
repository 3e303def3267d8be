#include "plans/model/model.h"

#include <array>

#include "plans/util/checked_math.h"
#include "plans/util/enum_names.h"

namespace tptune {

// Mlp's enumerators, in declaration order.
constexpr std::string_view kMlpNames[] = {"swiglu", "gelu"};
static_assert(std::size(kMlpNames) == enum_count(Mlp::gelu));

std::string_view to_string(Mlp m) { return name_of(kMlpNames, m); }

// Norm's enumerators, in declaration order.
constexpr std::string_view kNormNames[] = {"rmsnorm", "layernorm"};
static_assert(std::size(kNormNames) == enum_count(Norm::layernorm));

std::string_view to_string(Norm n) { return name_of(kNormNames, n); }

// Gqa's enumerators, in declaration order.
constexpr std::string_view kGqaNames[] = {"enable_gqa", "repeat_kv"};
static_assert(std::size(kGqaNames) == enum_count(Gqa::repeat_kv));

std::string_view to_string(Gqa g) { return name_of(kGqaNames, g); }

// RouterScore's enumerators, in declaration order.
constexpr std::string_view kRouterScoreNames[] = {"softmax", "sigmoid"};
static_assert(std::size(kRouterScoreNames) == enum_count(RouterScore::sigmoid));

std::string_view to_string(RouterScore r) { return name_of(kRouterScoreNames, r); }

// Parameters of one norm over `dim`: a weight, and for layernorm also a bias.
static int64_t norm_parameters(const Model& m) { return (m.norm == Norm::layernorm ? 2 : 1) * m.dim; }

int64_t Model::block_parameters() const {
  const int64_t hd = head_dim();
  // wq (n_heads*hd, dim), wk and wv (n_kv_heads*hd, dim), wo (dim, n_heads*hd).
  const int64_t attention = dim * (n_heads + 2 * n_kv_heads) * hd + n_heads * hd * dim;
  // q, k and v biases (n_heads*hd, n_kv_heads*hd, n_kv_heads*hd) when qkv_bias.
  const int64_t biases = qkv_bias ? (n_heads + 2 * n_kv_heads) * hd : 0;
  // swiglu: w1, w3 (ffn_dim, dim) and w2 (dim, ffn_dim); gelu: w1 and w2.
  const int64_t mlp_matrices = mlp == Mlp::swiglu ? 3 : 2;
  const int64_t feed_forward = mlp_matrices * dim * ffn_dim;
  // attention_norm and ffn_norm.
  return attention + biases + feed_forward + 2 * norm_parameters(*this);
}

namespace {

// The attention of one block with its norms and biases (not the block's two norms).
int64_t attention_parameters(const Model& m) {
  const MlaSpec& a = m.mla;
  if (a.kv_lora_rank == 0) {
    const int64_t hd = m.head_dim();
    const int64_t qkv = checked_mul({m.dim, m.n_heads + 2 * m.n_kv_heads, hd}, "parameters of wq, wk and wv");
    const int64_t wo = checked_mul({m.n_heads, hd, m.dim}, "parameters of wo");
    const int64_t biases = m.qkv_bias ? (m.n_heads + 2 * m.n_kv_heads) * hd : 0;
    const int64_t qk_norms = m.qk_norm ? 2 * hd : 0;  // q_norm and k_norm: RMSNorm(head_dim), shared by the heads
    return checked_add(checked_add(qkv, wo, "attention parameters"), biases + qk_norms, "attention parameters");
  }
  // Multi-head latent attention (torchtitan/models/deepseek_v3/model.py Attention): q through wq, or through the
  // low-rank wq_a, q_norm and wq_b; k and v through wkv_a (the latent and the shared rope key), kv_norm and wkv_b.
  const int64_t qk_head = a.qk_nope_head_dim + a.qk_rope_head_dim;
  const int64_t q = a.q_lora_rank == 0 ? checked_mul({m.n_heads, qk_head, m.dim}, "parameters of wq")
                                       : checked_add(checked_mul(a.q_lora_rank, m.dim + m.n_heads * qk_head,
                                                                 "parameters of wq_a, "
                                                                 "wq_b"),
                                                     a.q_lora_rank, "parameters of q");
  const int64_t kv_a = checked_mul(a.kv_lora_rank + a.qk_rope_head_dim, m.dim, "parameters of wkv_a");
  const int64_t kv_b = checked_mul({a.kv_lora_rank, m.n_heads, a.qk_nope_head_dim + a.v_head_dim},
                                   "parameters of "
                                   "wkv_b");
  const int64_t wo = checked_mul({m.n_heads, a.v_head_dim, m.dim}, "parameters of wo");
  int64_t sum = checked_add(q, kv_a, "attention parameters");
  sum = checked_add(sum, kv_b, "attention parameters");
  sum = checked_add(sum, wo, "attention parameters");
  return checked_add(sum, a.kv_lora_rank, "attention parameters");  // kv_norm
}

// The MLP of block `layer` with `routed` of its routed experts counted (all of them, or top_k).
int64_t mlp_parameters(const Model& m, int64_t layer, bool active) {
  const int64_t matrices = m.mlp == Mlp::swiglu ? 3 : 2;
  if (m.moe.experts == 0 || layer < m.moe.dense_layers)
    return checked_mul({matrices, m.dim, m.ffn_dim}, "parameters of a dense MLP");
  const MoeSpec& e = m.moe;
  const int64_t routed = active ? e.top_k : e.experts;
  const int64_t experts = checked_mul({routed, 3, m.dim, e.expert_ffn_dim}, "parameters of the routed experts");
  const int64_t shared = checked_mul({3, m.dim, e.shared_ffn_dim}, "parameters of the shared experts");
  const int64_t router = checked_mul(m.dim, e.experts, "parameters of the router");
  const int64_t gate = e.shared_gate ? m.dim : 0;
  return checked_add(checked_add(experts, shared, "MoE parameters"), router + gate, "MoE parameters");
}

int64_t layer_count(const Model& m, int64_t layer, bool active) {
  const int64_t sum = checked_add(attention_parameters(m), mlp_parameters(m, layer, active), "block parameters");
  return checked_add(sum, 2 * norm_parameters(m), "block parameters");
}

// Embedding, final norm and (untied) output projection.
int64_t outside_blocks(const Model& m) {
  const int64_t output = m.tie_word_embeddings ? 0 : m.vocab_size * m.dim;
  return m.embedding_parameters() + norm_parameters(m) + output;
}

int64_t sum_layers(const Model& m, bool active) {
  int64_t sum = outside_blocks(m);
  for (int64_t l = 0; l < m.n_layers; ++l) sum = checked_add(sum, layer_count(m, l, active), "model parameters");
  return sum;
}

}  // namespace

int64_t Model::layer_parameters(int64_t layer) const { return layer_count(*this, layer, false); }
int64_t Model::layer_active_parameters(int64_t layer) const { return layer_count(*this, layer, true); }

int64_t Model::total_parameters() const {
  // tok_embeddings (vocab, dim) + blocks + final norm + output (vocab, dim); tied, the output's weight is the
  // embedding's and is not counted again.
  if (moe.experts > 0 || mla.kv_lora_rank > 0 || qk_norm) return sum_layers(*this, false);
  const int64_t output = tie_word_embeddings ? 0 : vocab_size * dim;
  return embedding_parameters() + n_layers * block_parameters() + norm_parameters(*this) + output;
}

int64_t Model::active_parameters() const { return moe.experts == 0 ? total_parameters() : sum_layers(*this, true); }

double Model::training_flops_per_token(int64_t seq_len) const {
  // 6 flops per parameter per token (2 forward, 4 backward) for every matmul weight, counted over all parameters
  // except the embedding lookup (torchtitan's convention, which also counts the small norm weights), plus attention:
  // per layer the scores q k^T and the weighted sum p v are 2 x (2 x seq x heads x head_dim) forward flops per token,
  // times 3 for forward + backward: 12 x layers x heads x head_dim x seq.
  // Tied, the one table is also the output projection's weight: every parameter counts (torchtitan's
  // nparams_for_matmul = nparams when enable_weight_tying).
  // A mixture of experts counts the parameters a token runs through (torchtitan's get_moe_model_nparams_and_flops:
  // the active ones).
  const int64_t counted = moe.experts > 0 ? active_parameters() : total_parameters();
  const int64_t matmul_params = tie_word_embeddings ? counted : counted - embedding_parameters();
  const double dense = 6.0 * static_cast<double>(matmul_params);
  // Latent attention: QK^T at nope + rope and PV at v_head_dim per head, 6 x layers x heads x (nope + rope + v) x seq
  // (torchtitan's DeepSeekV3Model.get_nparams_and_flops; the same as 12 x ... x head_dim when all three are equal).
  const double head_widths = mla.kv_lora_rank > 0
                                 ? static_cast<double>(mla.qk_nope_head_dim + mla.qk_rope_head_dim + mla.v_head_dim) / 2
                                 : static_cast<double>(head_dim());
  const double attention =
      12.0 * static_cast<double>(n_layers) * static_cast<double>(n_heads) * head_widths * static_cast<double>(seq_len);
  return dense + attention;
}

int64_t torchtitan_ffn_dim(int64_t dim, double ffn_dim_multiplier, int64_t multiple_of) {
  int64_t h = 4 * dim;
  h = (2 * h) / 3;  // int(2 * h / 3): h > 0, so truncation equals floor
  h = static_cast<int64_t>(ffn_dim_multiplier * static_cast<double>(h));  // int(multiplier * h), as Python does it
  return multiple_of * ((h + multiple_of - 1) / multiple_of);
}

namespace {

struct PresetDef {
  const char* name;
  Model model;
  double ffn_dim_multiplier = 0;  // 0: ffn_dim is fixed, not derived from dim
  int64_t multiple_of = 0;
};

Model llama3(const char* name, int64_t dim, int64_t layers, int64_t heads, int64_t kv_heads, double multiplier,
             int64_t multiple_of) {
  Model m;
  m.name = name;
  m.dim = dim;
  m.n_layers = layers;
  m.n_heads = heads;
  m.n_kv_heads = kv_heads;
  m.ffn_dim = torchtitan_ffn_dim(dim, multiplier, multiple_of);
  m.vocab_size = 128256;
  m.mlp = Mlp::swiglu;
  m.norm = Norm::rmsnorm;
  m.norm_eps = 1e-5;
  m.rope_theta = 500000.0;
  return m;
}

// Small models for tests and quick runs (the sizes of examples/tiny-*.yaml).
Model tiny(const char* name, Mlp mlp, Norm norm, int64_t heads, int64_t kv_heads) {
  Model m;
  m.name = name;
  m.dim = 64;
  m.n_layers = 2;
  m.n_heads = heads;
  m.n_kv_heads = kv_heads;
  m.ffn_dim = 128;
  m.vocab_size = 256;
  m.mlp = mlp;
  m.norm = norm;
  m.norm_eps = 1e-5;
  m.rope_theta = 10000.0;
  return m;
}

const std::array<PresetDef, 5>& presets() {
  // Llama 3 (torchtitan's llama3 model registry): the ffn_dim follows torchtitan_ffn_dim with the multipliers
  // listed in model.h (8B 1.3 / 1024, 70B 1.3 / 4096, 405B 1.2 / 4096).
  static const std::array<PresetDef, 5> p = {{
      {"llama3-8b", llama3("llama3-8b", 4096, 32, 32, 8, 1.3, 1024), 1.3, 1024},
      {"llama3-70b", llama3("llama3-70b", 8192, 80, 64, 8, 1.3, 4096), 1.3, 4096},
      {"llama3-405b", llama3("llama3-405b", 16384, 126, 128, 8, 1.2, 4096), 1.2, 4096},
      {"tiny-llama", tiny("tiny-llama", Mlp::swiglu, Norm::rmsnorm, 8, 4)},
      {"tiny-gpt", tiny("tiny-gpt", Mlp::gelu, Norm::layernorm, 4, 4)},
  }};
  return p;
}

}  // namespace

bool model_preset(std::string_view name, Model& out) {
  for (const auto& p : presets())
    if (name == p.name) {
      out = p.model;
      return true;
    }
  return false;
}

bool model_preset_ffn_rule(std::string_view name, double& ffn_dim_multiplier, int64_t& multiple_of) {
  for (const auto& p : presets())
    if (name == p.name && p.multiple_of > 0) {
      ffn_dim_multiplier = p.ffn_dim_multiplier;
      multiple_of = p.multiple_of;
      return true;
    }
  return false;
}

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : presets()) names.emplace_back(p.name);
  return names;
}

}  // namespace tptune
