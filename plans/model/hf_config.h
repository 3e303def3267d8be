#pragma once
// A Hugging Face transformers `config.json` as a model source.
//
//   model: {hf_config: llama3-8b/config.json}     # in a config YAML, relative to the YAML file
//   tp-plan simulate CONFIG --hf-config config.json --preset sequence_parallel
//
// Reads the Llama family: `architectures` LlamaForCausalLM, MistralForCausalLM or Qwen2ForCausalLM (Qwen2 and
// Qwen2.5). Mixture-of-experts and q/k-norm models are read and counted but refused (read_hf_model below).
// `architectures` is required: model_type alone does not say which model class transformers builds. The keys map onto
// Model as torchtitan names the same module:
//
//   hidden_size -> dim               num_hidden_layers -> n_layers      num_attention_heads -> n_heads
//   num_key_value_heads -> n_kv_heads (default: num_attention_heads, as transformers does)
//   intermediate_size -> ffn_dim     vocab_size -> vocab_size           rms_norm_eps -> norm_eps (default 1e-6)
//   rope_theta -> rope_theta (default 10000)                            hidden_act "silu" -> mlp swiglu, norm rmsnorm
//   head_dim -> head_dim (when it differs from hidden_size / num_attention_heads: Mistral Nemo's 128 with 5120 / 32)
//   Qwen2ForCausalLM -> qkv_bias (transformers' Qwen2Attention hard-wires biases on q/k/v_proj, none on o_proj)
//   tie_word_embeddings -> tie_word_embeddings (default false; Llama 3.2 1B/3B, small Qwen2.5)
//
// What the Model cannot represent is an error naming the file, the key's line and the key, never an approximation:
// any other hidden_act (or Gemma's hidden_activation); attention_bias true (LlamaAttention then biases o_proj too,
// which tptune does not model) and mlp_bias true; an odd head_dim; mixture-of-experts keys (num_local_experts,
// num_experts, n_routed_experts, num_experts_per_tok, moe_intermediate_size, n_shared_experts,
// shared_expert_intermediate_size) with a non-zero value; sliding-window attention in use (sliding_window not null,
// unless use_sliding_window is false, as Qwen2 configs say; a Mistral config without the key gets transformers' default
// window of 4096, so it must say null); soft-capping (attn_logit_softcapping, final_logit_softcapping); partial rotary
// (partial_rotary_factor < 1); LayerNorm keys (layer_norm_eps, layer_norm_epsilon, norm_epsilon); use_qk_norm. Other
// architectures are refused naming what tptune lacks for them (Gemma2ForCausalLM: soft-capping and sliding-window
// layers; Phi3ForCausalLM, Qwen3ForCausalLM, Mixtral... see hf_config.cc), and unknown ones with the list of what
// tptune models.
//
// `rope_scaling` (Llama 3.1's "llama3" type, for example) is accepted: it changes only rope's frequency table, not
// a shape, an op or a byte of the Program, and tp-run's verify compares sharded and unsharded runs of the same
// frequencies. Keys that do not concern training cost (token ids, torch_dtype, max_position_embeddings...) are
// ignored; the training dtype and sequence length come from the config YAML.
//
// JSON syntax errors say "<file>:<line>: invalid JSON: ..." (nlohmann reports a byte offset; this converts it).

#include <string>

#include "plans/model/model.h"

namespace tptune {

// Reads the file at `path`; errors name `path`.
Model load_hf_config(const std::string& path);
// Parses config.json text; `name` stands in for the file name in errors.
Model parse_hf_config(const std::string& text, const std::string& name);
// parse_hf_config() by another name (the two differed while dense-first MoE was refused): MixtralForCausalLM,
// Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, DeepseekV3ForCausalLM and Qwen3ForCausalLM into Model::moe, Model::mla
// and Model::qk_norm (plans/model/model.h):
//   num_local_experts (Mixtral) | num_experts (Qwen) | n_routed_experts (DeepSeek) -> moe.experts
//   num_experts_per_tok -> moe.top_k        moe_intermediate_size -> moe.expert_ffn_dim (Mixtral: intermediate_size)
//   shared_expert_intermediate_size (Qwen2-MoE, with its sigmoid gate) | n_shared_experts x moe_intermediate_size
//   (DeepSeek) -> moe.shared_ffn_dim        first_k_dense_replace -> moe.dense_layers (their MLP: intermediate_size)
//   norm_topk_prob -> moe.route_norm (Mixtral: always)   scoring_func, routed_scaling_factor, n_group, topk_group
//   q_lora_rank (null: 0), kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim -> mla
//   Qwen3ForCausalLM, Qwen3MoeForCausalLM -> qk_norm
// decoder_sparse_step other than 1, a non-empty mlp_only_layers and moe_layer_freq other than 1 are errors (blocks
// alternating dense and MoE are not read). DeepSeek's num_nextn_predict_layers (the multi-token-prediction module)
// is not counted: torchtitan's DeepSeek-V3 flavours train without it (num_mtp_layers 0), and the model card's 671 B
// excludes it.
Model read_hf_model(const std::string& text, const std::string& name);

}  // namespace tptune
