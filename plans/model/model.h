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
//
// Mixture-of-experts blocks, multi-head latent attention and q/k norms (the fields `moe`, `mla` and `qk_norm`) are
// read and counted (parameters and active parameters per token, below) as torchtitan 0.3.0 builds them
// (torchtitan/models/common/moe.py, models/deepseek_v3, models/qwen3); the lowering plans MoE blocks and q/k norms
// (plans/lower/experts.cc), with dense blocks before the MoE ones as a block variant of their own
// (plans/program/program.h "Structure"), and latent attention (plans/lower/mla.cc).
//   layers.N.moe.router.gate              Linear(dim -> experts), no bias (TokenChoiceTopKRouter)
//   layers.N.moe.routed_experts           GroupedExperts: w1, w3 (experts, expert_ffn_dim, dim), w2 (experts, dim,
//                                         expert_ffn_dim); each token runs top_k of them
//   layers.N.moe.shared_experts           FeedForward(dim, shared_ffn_dim): w1, w2, w3, run by every token
//   layers.N.moe.shared_gate              Qwen2-MoE only: Linear(dim -> 1), a sigmoid gate on the shared expert
//   layers.N.feed_forward                 blocks 0 .. dense_layers-1 keep a dense MLP of ffn_dim (DeepSeek's
//                                         first_k_dense_replace)
//   layers.N.attention (MLA)              wq (n_heads*(nope+rope), dim), or wq_a (q_lora_rank, dim) + q_norm
//                                         (q_lora_rank) + wq_b (n_heads*(nope+rope), q_lora_rank); wkv_a
//                                         (kv_lora_rank+rope, dim), kv_norm (kv_lora_rank), wkv_b (n_heads*(nope+v),
//                                         kv_lora_rank), wo (dim, n_heads*v)
//   layers.N.attention.{q_norm,k_norm}    qk_norm (Qwen3): RMSNorm(head_dim) on each head of q and k
// The router's expert_bias (aux-loss-free balancing) and tokens_per_expert are buffers, not parameters.

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

// How a mixture-of-experts router scores experts (TokenChoiceTopKRouter.score_func): softmax over the experts
// (Mixtral, Qwen2/3-MoE, DeepSeek-V3 16B) or an independent sigmoid per expert (DeepSeek-V3 671B).
enum class RouterScore { softmax, sigmoid };
std::string_view to_string(RouterScore r);

// The mixture-of-experts MLP of a block (see the module names above). experts == 0: a dense model.
struct MoeSpec {
  int64_t experts = 0;         // routed experts per MoE block
  int64_t top_k = 0;           // routed experts each token runs
  int64_t expert_ffn_dim = 0;  // hidden width of one routed expert
  int64_t shared_ffn_dim = 0;  // hidden width of the shared experts together (torchtitan: moe_hidden_dim x
                               // num_shared_experts); 0: none
  bool shared_gate = false;    // a sigmoid gate Linear(dim -> 1) on the shared expert (Qwen2MoeSparseMoeBlock)
  int64_t dense_layers = 0;    // the first dense_layers blocks keep a dense MLP of ffn_dim
  RouterScore score = RouterScore::softmax;
  bool route_norm = false;     // top-k scores renormalised to sum 1 (HF norm_topk_prob)
  double route_scale = 1.0;    // scores scaled after (DeepSeek routed_scaling_factor)
  int64_t expert_groups = 0;   // node-limited routing: experts in groups (n_group), tokens limited to
  int64_t limited_groups = 0;  // limited_groups of them (topk_group); 0: no grouping
  // The expert_bias update's step (MoE.Config.load_balance_coeff: 1e-3, make_moe_config's default in torchtitan 0.3.0
  // models/common/config_utils.py, which every torchtitan MoE model keeps; not read from a config.json).
  double load_balance_coeff = 1e-3;
  bool operator==(const MoeSpec&) const = default;
};

// Multi-head latent attention (DeepSeek-V2/V3). kv_lora_rank == 0: standard attention.
struct MlaSpec {
  int64_t q_lora_rank = 0;  // 0: q is one projection wq
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  bool operator==(const MlaSpec&) const = default;
};

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
  // Mixture of experts, latent attention and q/k norms (see above): read and counted; lowered() says which are planned.
  MoeSpec moe;
  MlaSpec mla;
  bool qk_norm = false;

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

  // Blocks 0 .. dense_first_blocks()-1 of a mixture of experts keep a dense MLP (moe.dense_layers; 0 for a dense
  // model): the lowering gives them a block template of their own (plans/program/program.h "Structure").
  int64_t dense_first_blocks() const { return moe.experts > 0 ? moe.dense_layers : 0; }
  // Parameters of block `layer` (0-based) with every expert: attention (standard or latent, with its norms and
  // biases), its MLP (dense, or the router, every routed expert and the shared expert) and the two block norms.
  // Throws tptune::Error when a count overflows 64-bit integers.
  int64_t layer_parameters(int64_t layer) const;
  // The parameters one token runs through in block `layer`: its routed top_k experts instead of all of them.
  int64_t layer_active_parameters(int64_t layer) const;
  // total_parameters() with each MoE block's active parameters only: the "activated parameters" a model card quotes
  // (DeepSeek-V3: 37 B of 671 B; Mixtral 8x7B: 12.9 B of 46.7 B). A dense model's is its total.
  int64_t active_parameters() const;
  // torchtitan's MFU convention: 6 x (parameters without the embedding) + 12 x layers x heads x head_dim x seq_len
  // (latent attention: 6 x layers x heads x (nope + rope + v) x seq_len, get_moe_model_nparams_and_flops' head_dims);
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
