#pragma once
// The model: a decoder-only transformer named as torchtitan names it.
//
//   tok_embeddings                       Embedding(vocab_size, dim)
//   layers.N.attention_norm              RMSNorm/LayerNorm(dim)
//   layers.N.attention.{wq,wk,wv,wo}     wq (n_heads*head_dim, dim), wk/wv (n_kv_heads*head_dim, dim),
//                                        wo (dim, n_heads*head_dim)
//   layers.N.ffn_norm                    norm(dim)
//   layers.N.feed_forward.{w1,w2,w3}     swiglu: w1/w3 (ffn_dim, dim), w2 (dim, ffn_dim); gelu: w1, w2 only
//   norm                                 norm(dim)
//   output                               Linear(dim -> vocab_size), weight (vocab_size, dim)
// Linear weights are (out_features, in_features), as in torch.nn.Linear. head_dim is dim / n_heads unless the model
// sets it (Mistral Nemo: dim 5120, 32 heads of 128), so n_heads*head_dim may differ from dim. Linears have no biases
// (Llama) except wq, wk, wv when qkv_bias (the Qwen2 family): a bias (out_features) each. Layernorm has weight and
// bias.
// Tied embeddings (tie_word_embeddings: Llama 3.2 1B/3B, small Qwen2.5): one parameter, tok_embeddings.weight
// (vocab_size, dim), is both the embedding table and the output projection's weight; there is no output.weight, and
// its gradient is the sum of the two uses' gradients (torchtitan's Decoder: `tok_embeddings.weight = lm_head.weight`;
// named_parameters() yields it once, as tok_embeddings.weight).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tptune {

enum class Mlp { swiglu, gelu };
enum class Norm { rmsnorm, layernorm };
// How attention serves grouped-query heads (n_kv_heads < n_heads), YAML model.gqa:
//   enable_gqa  K and V reach scaled_dot_product_attention with their n_kv_heads heads (SDPA's enable_gqa=True):
//               torchtitan since ff0829c ("GQA without kv repeats", 2026-01-27). The default.
//   repeat_kv   each kv head is first copied to the n_heads / n_kv_heads query heads of its group (torchtitan's
//               repeat_kv before then: models/llama/model.py, `keys = repeat_kv(xk, self.n_rep)`, the code of every
//               torchtitan benchmark in profiles/published). The same function; the copies cost a memory-bound
//               kernel each way, SDPA saves the repeated K and V, and context parallelism's ring attention (which
//               wraps SDPA) gathers and rotates them: n_heads / n_kv_heads times the bytes.
enum class Gqa { enable_gqa, repeat_kv };
std::string_view to_string(Mlp m);
std::string_view to_string(Norm n);
std::string_view to_string(Gqa g);

struct Model {
  std::string name;  // preset name or "custom"
  int64_t dim = 0;
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t ffn_dim = 0;
  int64_t vocab_size = 0;
  Mlp mlp = Mlp::swiglu;
  Norm norm = Norm::rmsnorm;
  double norm_eps = 1e-5;
  double rope_theta = 500000.0;
  // The config's head_dim (YAML model.head_dim, config.json head_dim); 0: dim / n_heads, the Llama rule.
  int64_t explicit_head_dim = 0;
  // Biases on the q, k and v projections (YAML model.qkv_bias; Qwen2ForCausalLM hard-wires them).
  bool qkv_bias = false;
  // The output projection reuses tok_embeddings.weight (see above). YAML model.tie_word_embeddings, HF
  // tie_word_embeddings; default false (torchtitan's enable_weight_tying default).
  bool tie_word_embeddings = false;
  // Grouped-query attention's kernel path (see Gqa). YAML model.gqa; default enable_gqa.
  Gqa gqa = Gqa::enable_gqa;

  // Every field alike (the same model and the same kernel path).
  bool operator==(const Model&) const = default;

  // The width of one attention head: explicit_head_dim, or dim / n_heads.
  int64_t head_dim() const { return explicit_head_dim > 0 ? explicit_head_dim : dim / n_heads; }
  // Parameters of one transformer block: attention (dim*(n_heads + 2*n_kv_heads)*head_dim + n_heads*head_dim*dim,
  // plus (n_heads + 2*n_kv_heads)*head_dim bias elements when qkv_bias), MLP (3 or 2 matrices of dim*ffn_dim), norms
  // (dim each; layernorm also a bias).
  int64_t block_parameters() const;
  int64_t embedding_parameters() const { return vocab_size * dim; }
  // Everything: embedding + blocks + final norm + output projection; with tie_word_embeddings the shared weight is
  // counted once (embedding + blocks + final norm), as torch's model.parameters() de-duplicates it.
  int64_t total_parameters() const;
  // torchtitan's MFU convention: 6 x (parameters without the embedding) + 12 x layers x heads x head_dim x seq_len;
  // tied, 6 x every parameter (torchtitan/models/utils.py get_dense_model_nparams_and_flops: the shared weight still
  // takes part in the output matmul, so it is not subtracted).
  double training_flops_per_token(int64_t seq_len) const;
};

// torchtitan's ffn_dim rule: h = int(2 * 4*dim / 3); h = int(multiplier * h); round h up to a multiple of multiple_of.
// Llama3 8B: dim 4096, 1.3, 1024 -> 14336; 70B: 8192, 1.3, 4096 -> 28672; 405B: 16384, 1.2, 4096 -> 53248.
int64_t torchtitan_ffn_dim(int64_t dim, double ffn_dim_multiplier, int64_t multiple_of);

// Named presets: llama3-8b, llama3-70b, llama3-405b (and small ones for tests). Returns false if unknown.
bool model_preset(std::string_view name, Model& out);
std::vector<std::string> model_preset_names();
// The torchtitan ffn_dim rule a preset was defined with (llama3-*: see above), so that a config that overrides a
// preset's dim can recompute ffn_dim. False for presets that fix ffn_dim directly (the tiny ones) or are unknown.
bool model_preset_ffn_rule(std::string_view name, double& ffn_dim_multiplier, int64_t& multiple_of);

}  // namespace tptune
