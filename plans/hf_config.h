#pragma once
// A Hugging Face transformers `config.json` as a model source.
//
//   model: {hf_config: llama3-8b/config.json}     # in a config YAML, relative to the YAML file
//   tp-plan simulate CONFIG --hf-config config.json --preset sequence_parallel
//
// Reads the Llama family: `architectures` LlamaForCausalLM or MistralForCausalLM (or, without `architectures`,
// `model_type` llama | mistral). The keys map onto Model as torchtitan names the same module:
//
//   hidden_size -> dim               num_hidden_layers -> n_layers      num_attention_heads -> n_heads
//   num_key_value_heads -> n_kv_heads (default: num_attention_heads, as transformers does)
//   intermediate_size -> ffn_dim     vocab_size -> vocab_size           rms_norm_eps -> norm_eps (default 1e-6)
//   rope_theta -> rope_theta (default 10000)                            hidden_act "silu" -> mlp swiglu, norm rmsnorm
//
// What the Model cannot represent is an error naming the file, the key's line and the key, never an approximation:
// any other hidden_act; tie_word_embeddings true (tptune's output projection is its own parameter);
// attention_bias / mlp_bias true; a head_dim other than hidden_size / num_attention_heads; mixture-of-experts keys
// (num_local_experts, num_experts, n_routed_experts, num_experts_per_tok, moe_intermediate_size) with a non-zero
// value; sliding-window attention in use (sliding_window not null, unless use_sliding_window is false; a Mistral
// config without the key gets transformers' default window of 4096, so it must say null). Qwen2ForCausalLM is
// refused: transformers hard-wires biases on its q/k/v projections, which no key turns off.
//
// `rope_scaling` (Llama 3.1's "llama3" type, for example) is accepted: it changes only rope's frequency table, not
// a shape, an op or a byte of the Program, and tp-run's verify compares sharded and unsharded runs of the same
// frequencies. Keys that do not concern training cost (token ids, torch_dtype, max_position_embeddings...) are
// ignored; the training dtype and sequence length come from the config YAML.
//
// JSON syntax errors say "<file>:<line>: invalid JSON: ..." (nlohmann reports a byte offset; this converts it).

#include <string>

#include "plans/model.h"

namespace tptune {

// Reads the file at `path`; errors name `path`.
Model load_hf_config(const std::string& path);
// Parses config.json text; `name` stands in for the file name in errors.
Model parse_hf_config(const std::string& text, const std::string& name);

}  // namespace tptune
