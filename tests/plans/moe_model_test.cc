// Mixture-of-experts, latent-attention and q/k-norm models read from Hugging Face config.json (plans/model/hf_config.h
// read_hf_model) and counted (plans/model/model.h): parameters and active parameters per token equal the figures the
// models' cards publish; the loaders refuse what the lowering does not plan yet (latent attention, dense blocks before
// MoE ones) with those counts, and accept MoE blocks and q/k norms (plans/lower/experts.cc).
#include <catch2/catch.hpp>
#include <string>

#include "plans/language/config.h"
#include "plans/model/hf_config.h"
#include "plans/model/model.h"
#include "plans/util/error.h"
#include "plans/util/input_file.h"

using namespace tptune;

namespace {

// The keys of each model's published config.json (huggingface.co/<repo>/blob/main/config.json) that shape it; keys
// that do not (token ids, torch_dtype, rope_scaling, max_position_embeddings) are left out.
const char* kMixtral8x7b = R"({
  "architectures": ["MixtralForCausalLM"], "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
  "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "num_local_experts": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": null,
  "tie_word_embeddings": false, "vocab_size": 32000
})";
const char* kQwen3_30b_a3b = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "decoder_sparse_step": 1, "head_dim": 128,
  "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144, "mlp_only_layers": [],
  "moe_intermediate_size": 768, "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128,
  "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0, "sliding_window": null, "tie_word_embeddings": false, "use_sliding_window": false,
  "vocab_size": 151936
})";
const char* kQwen3_235b_a22b = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "decoder_sparse_step": 1, "head_dim": 128,
  "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 12288, "mlp_only_layers": [],
  "moe_intermediate_size": 1536, "norm_topk_prob": true, "num_attention_heads": 64, "num_experts": 128,
  "num_experts_per_tok": 8, "num_hidden_layers": 94, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0, "sliding_window": null, "tie_word_embeddings": false, "use_sliding_window": false,
  "vocab_size": 151936
})";
const char* kQwen2_57b_a14b = R"({
  "architectures": ["Qwen2MoeForCausalLM"], "decoder_sparse_step": 1, "hidden_act": "silu", "hidden_size": 3584,
  "intermediate_size": 18944, "moe_intermediate_size": 2560, "num_attention_heads": 28, "num_experts": 64,
  "num_experts_per_tok": 8, "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0, "shared_expert_intermediate_size": 20480, "sliding_window": 131072,
  "tie_word_embeddings": false, "use_sliding_window": false, "vocab_size": 151936
})";
const char* kDeepSeekV3 = R"({
  "architectures": ["DeepseekV3ForCausalLM"], "first_k_dense_replace": 3, "hidden_act": "silu",
  "hidden_size": 7168, "intermediate_size": 18432, "kv_lora_rank": 512, "moe_intermediate_size": 2048,
  "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": true,
  "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128,
  "num_nextn_predict_layers": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
  "rms_norm_eps": 1e-06, "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid",
  "tie_word_embeddings": false, "topk_group": 4, "topk_method": "noaux_tc", "v_head_dim": 128, "vocab_size": 129280
})";

std::string refusal(const std::string& text) {
  try {
    parse_hf_config(text, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string read_error(const std::string& text) {
  try {
    read_hf_model(text, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// `text` with `from` replaced by `to` (exactly once).
std::string with(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("moe model: Mixtral 8x7B has 46.7 B parameters, 12.9 B active per token", "[moe][hf_config]") {
  const Model m = read_hf_model(kMixtral8x7b, "config.json");
  CHECK(m.moe.experts == 8);
  CHECK(m.moe.top_k == 2);
  CHECK(m.moe.expert_ffn_dim == 14336);
  CHECK(m.moe.route_norm);
  CHECK(m.moe.score == RouterScore::softmax);
  // Per block: attention wq 4096^2 + wk, wv 4096 x 1024 each + wo 4096^2 = 41,943,040; router 4096 x 8 = 32,768;
  // experts 8 x 3 x 4096 x 14336 = 1,409,286,144; two norms 8,192: 1,451,270,144.
  CHECK(m.layer_parameters(0) == 1'451'270'144);
  // 32 blocks 46,440,644,608 + embedding and output 2 x 32000 x 4096 = 262,144,000 + final norm 4,096
  // = 46,702,792,704: "46.7B total parameters" (mistral.ai/news/mixtral-of-experts).
  CHECK(m.total_parameters() == 46'702'792'704);
  // Active: 2 of 8 experts, 352,321,536, per block 394,305,536; x 32 = 12,617,777,152 + 262,148,096
  // = 12,879,925,248: "only uses 12.9B parameters per token" (same source).
  CHECK(m.active_parameters() == 12'879'925'248);
}

TEST_CASE("moe model: Qwen3 MoE 30B-A3B and 235B-A22B", "[moe][hf_config]") {
  const Model a = read_hf_model(kQwen3_30b_a3b, "config.json");
  CHECK(a.qk_norm);
  CHECK(a.head_dim() == 128);
  // Per block: wq 2048 x 4096 + wk, wv 2048 x 512 + wo 4096 x 2048 = 18,874,368; q_norm, k_norm 2 x 128; norms 4,096;
  // experts 128 x 3 x 2048 x 768 = 603,979,776; router 2048 x 128 = 262,144: 623,120,640. x 48 = 29,909,790,720
  // + 2 x 151936 x 2048 = 622,329,856 + 2,048 = 30,532,122,624: "Number of Parameters: 30.5B in total and 3.3B
  // activated; Number of Parameters (Non-Embedding): 29.9B" (huggingface.co/Qwen/Qwen3-30B-A3B model card).
  CHECK(a.total_parameters() == 30'532'122'624);
  CHECK(a.total_parameters() - a.embedding_parameters() - a.vocab_size * a.dim == 29'909'792'768);  // 29.9 B
  // Active: 8 of 128 experts (37,748,736), per block 56,889,600; x 48 = 2,730,700,800 + 622,331,904 = 3,353,032,704.
  CHECK(a.active_parameters() == 3'353'032'704);

  const Model b = read_hf_model(kQwen3_235b_a22b, "config.json");
  // Per block: attention 71,303,168 + 256 + norms 8,192 + experts 128 x 3 x 4096 x 1536 = 2,415,919,104 + router
  // 524,288 = 2,487,755,008; x 94 = 233,848,970,752, + 2 x 151936 x 4096 + 4,096 = 235,093,634,560: "235B in total
  // and 22B activated" (huggingface.co/Qwen/Qwen3-235B-A22B).
  CHECK(b.total_parameters() == 235'093'634'560);
  // Active per block 71,835,904 + 8 x 18,874,368 = 222,830,848; x 94 + 1,244,663,808 = 22,190,763,520.
  CHECK(b.active_parameters() == 22'190'763'520);
}

TEST_CASE("moe model: Qwen2 MoE 57B-A14B has a gated shared expert and q/k/v biases", "[moe][hf_config]") {
  const Model m = read_hf_model(kQwen2_57b_a14b, "config.json");
  CHECK(m.qkv_bias);
  CHECK(m.moe.shared_ffn_dim == 20480);
  CHECK(m.moe.shared_gate);
  CHECK_FALSE(m.moe.route_norm);  // norm_topk_prob absent: Qwen2MoeConfig's default false
  // Per block: attention 2 x 3584^2 + 2 x 3584 x 512 = 29,360,128 + biases 3584 + 2 x 512 = 29,364,736; experts
  // 64 x 3 x 3584 x 2560 = 1,761,607,680; shared 3 x 3584 x 20480 = 220,200,960 + its gate 3,584; router 3584 x 64
  // = 229,376; norms 7,168: 2,011,413,504. x 28 + 2 x 151936 x 3584 + 3,584 = 57,408,658,944: "57B total
  // parameters and 14B activated" (huggingface.co/Qwen/Qwen2-57B-A14B).
  CHECK(m.total_parameters() == 57'408'658'944);
  // Active per block: 29,364,736 + 8 x 27,525,120 + 220,200,960 + 3,584 + 229,376 + 7,168 = 470,006,784; x 28
  // + 1,089,080,832 = 14,249,270,784.
  CHECK(m.active_parameters() == 14'249'270'784);
}

TEST_CASE("moe model: DeepSeek-V3 has 671 B parameters, 36.6 B active beside the embedding", "[moe][hf_config]") {
  const Model m = read_hf_model(kDeepSeekV3, "config.json");
  CHECK(m.moe.experts == 256);
  CHECK(m.moe.dense_layers == 3);
  CHECK(m.moe.shared_ffn_dim == 2048);
  CHECK(m.moe.score == RouterScore::sigmoid);
  CHECK(m.moe.route_scale == 2.5);
  CHECK(m.moe.expert_groups == 8);
  CHECK(m.moe.limited_groups == 4);
  CHECK(m.mla == MlaSpec{1536, 512, 128, 64, 128});
  // Latent attention: wq_a 7168 x 1536 = 11,010,048, q_norm 1,536, wq_b 1536 x 128 x 192 = 37,748,736, wkv_a
  // 7168 x 576 = 4,128,768, kv_norm 512, wkv_b 512 x 128 x 256 = 16,777,216, wo 128 x 128 x 7168 = 117,440,512:
  // 187,107,328. Dense blocks 0-2: + 3 x 7168 x 18432 = 396,361,728 + norms 14,336 = 583,483,392.
  CHECK(m.layer_parameters(0) == 583'483'392);
  CHECK(m.layer_parameters(2) == 583'483'392);
  // MoE blocks 3-60: + 256 x 3 x 7168 x 2048 = 11,274,289,152, shared 44,040,192, router 7168 x 256 = 1,835,008:
  // 11,507,286,016.
  CHECK(m.layer_parameters(3) == 11'507'286'016);
  // 3 x 583,483,392 + 58 x 11,507,286,016 + 2 x 129280 x 7168 + 7,168 = 671,026,404,352: "Total parameters: 671B"
  // (deepseek-ai/DeepSeek-V3 README_WEIGHTS.md; the MTP module's 11.5B more are not counted, as there).
  CHECK(m.total_parameters() == 671'026'404'352);
  // Active: 8 routed + 1 shared expert, per MoE block 585,318,400; x 58 + 3 x 583,483,392 + 1,853,358,080 + 7,168
  // = 37,552,282,624. README_WEIGHTS.md counts "Activation parameters: 36.6B (including 0.9B for the output Head)",
  // i.e. without the embedding table's 926,679,040: 36,625,603,584.
  CHECK(m.active_parameters() == 37'552'282'624);
  CHECK(m.active_parameters() - m.embedding_parameters() == 36'625'603'584);
}

TEST_CASE("moe model: the bundled DeepSeek-V3 config.json files read as the published shapes", "[moe][hf_config]") {
  const std::string dir = std::string(TPTUNE_SOURCE_DIR) + "/examples/hf/";
  // deepseek-ai/DeepSeek-V3's config.json as published (with its rope_scaling, quantization_config and MTP keys): the
  // same Model as the keys above. Counted without the multi-token-prediction module (num_nextn_predict_layers 1, the
  // 14 B that make the checkpoint's 685 B): torchtitan 0.3.0's 671B flavour builds num_mtp_layers 0 by default
  // (models/deepseek_v3/__init__.py), and its router's expert_bias is a buffer, not a parameter. The checkpoint
  // stores that bias as e_score_correction_bias (256 in each of the 58 MoE blocks, 14,848): with it the count would
  // be 671,026,419,200.
  Model v3 = read_hf_model(read_input_file(dir + "deepseek-v3/config.json", "config.json"), "config.json");
  CHECK(v3 == read_hf_model(kDeepSeekV3, "config.json"));
  CHECK(v3.total_parameters() == 671'026'404'352);
  CHECK(v3.total_parameters() + 58 * 256 == 671'026'419'200);
  // torchtitan 0.3.0's "16B" flavour (models/deepseek_v3/__init__.py _16b: dim 2048, 27 layers, 16 heads, q_lora_rank
  // 0, kv_lora_rank 512, nope 128, rope 64, v 128, 64 experts of 1408 top 6 softmax, 2 shared experts, 1 dense layer
  // of 10944, vocab 102400: DeepSeek-V2-Lite's shapes) as a DeepseekV3ForCausalLM config.json. Counts as the config
  // YAML's below (15,706,484,224 parameters, 2,661,150,208 active).
  const Model v16 = read_hf_model(read_input_file(dir + "deepseek-v3-16b/config.json", "config.json"), "config.json");
  CHECK(v16.mla == MlaSpec{0, 512, 128, 64, 128});
  CHECK(v16.moe.dense_layers == 1);
  CHECK(v16.moe.shared_ffn_dim == 2 * 1408);
  CHECK(v16.moe.expert_groups == 0);
  CHECK(v16.total_parameters() == 15'706'484'224);
  CHECK(v16.active_parameters() == 2'661'150'208);
}

TEST_CASE("moe model: the loaders load every architecture they read", "[moe][hf_config]") {
  // DeepSeek-V3's dense first blocks are lowered (tests/plans/dense_first_test.cc), so it loads.
  CHECK(refusal(kDeepSeekV3) == "(no error)");
  // MoE blocks and q/k norms are lowered: Qwen3 MoE, Mixtral, Qwen2 MoE and dense Qwen3 load.
  CHECK(refusal(kQwen3_30b_a3b) == "(no error)");
  CHECK(refusal(kMixtral8x7b) == "(no error)");
  CHECK(refusal(kQwen2_57b_a14b) == "(no error)");
  std::string qwen3 = with(kQwen3_30b_a3b, "Qwen3MoeForCausalLM", "Qwen3ForCausalLM");
  for (const char* key : {"\"num_experts\": 128,", "\"num_experts_per_tok\": 8,", "\"moe_intermediate_size\": 768,"})
    qwen3 = with(qwen3, key, "");
  CHECK(refusal(qwen3) == "(no error)");
  CHECK_FALSE(read_hf_model(qwen3, "c.json").moe.experts);
}

TEST_CASE("moe model: what a MoE config.json gets wrong is a one-line error naming the key", "[moe][hf_config]") {
  CHECK(read_error(with(kMixtral8x7b, "\"num_experts_per_tok\": 2", "\"num_experts_per_tok\": 9")) ==
        "config.json:3: num_experts_per_tok: expected an integer in 1..8, got 9");
  CHECK(read_error(with(kMixtral8x7b, "\"num_local_experts\": 8", "\"num_local_experts\": 100000")) ==
        "config.json:4: num_local_experts: expected an integer in 1..16384, got 100000");
  CHECK(read_error(with(kQwen3_30b_a3b, "\"decoder_sparse_step\": 1", "\"decoder_sparse_step\": 2")) ==
        "config.json:2: decoder_sparse_step: 2 is not supported: tptune reads every block as a MoE block "
        "(decoder_sparse_step 1)");
  CHECK(read_error(with(kQwen3_30b_a3b, "\"mlp_only_layers\": []", "\"mlp_only_layers\": [0, 1]")) ==
        "config.json:3: mlp_only_layers: [0,1] is not supported: tptune reads every block as a MoE block");
  CHECK(read_error(with(kDeepSeekV3, "\"first_k_dense_replace\": 3", "\"first_k_dense_replace\": 62")) ==
        "config.json:2: first_k_dense_replace: expected an integer in 0..61, got 62");
  CHECK(read_error(with(kDeepSeekV3, "\"n_group\": 8", "\"n_group\": 7")) ==
        "config.json:4: n_group: expected a divisor of n_routed_experts (256), got 7");
  CHECK(read_error(with(kDeepSeekV3, "\"scoring_func\": \"sigmoid\"", "\"scoring_func\": \"relu\"")) ==
        "config.json:7: scoring_func: expected \"sigmoid\" or \"softmax\", got \"relu\"");
  CHECK(read_error(with(kDeepSeekV3, "\"qk_rope_head_dim\": 64", "\"qk_rope_head_dim\": 63")) ==
        "config.json:6: qk_rope_head_dim: expected an even size (rotary embedding rotates pairs), got 63");
  CHECK(read_error(with(kDeepSeekV3, "\"kv_lora_rank\": 512, ", "")) ==
        "config.json:1: kv_lora_rank: missing; expected an integer in 1..1048576");
  // A dense architecture with MoE keys is still refused by the key (plans/model/hf_config.h).
  CHECK_THAT(read_error(with(kMixtral8x7b, "MixtralForCausalLM", "LlamaForCausalLM")),
             Catch::StartsWith("config.json:4: num_local_experts: mixture-of-experts"));
}

namespace {

std::string yaml_error(const std::string& yaml) {
  try {
    load_config_string(yaml, "cfg.yaml");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// torchtitan 0.3.0's deepseek_v3 "16B" flavour (models/deepseek_v3/__init__.py _16b), the shape of
// DeepSeek-V2-Lite, in a config YAML's model keys.
const char* kDeepSeek16b = R"(model:
  dim: 2048
  n_layers: 27
  n_heads: 16
  vocab_size: 102400
  ffn_dim: 10944
  moe:
    experts: 64
    top_k: 6
    expert_ffn_dim: 1408
    shared_ffn_dim: 2816
    dense_layers: 1
  mla: {kv_lora_rank: 512, qk_nope_head_dim: 128, qk_rope_head_dim: 64, v_head_dim: 128}
)";

}  // namespace

TEST_CASE("moe model: a config YAML describes MoE blocks, dense first blocks and latent attention", "[moe][config]") {
  // Latent attention with one q projection: wq 16 x 192 x 2048 = 6,291,456, wkv_a 576 x 2048 = 1,179,648, kv_norm
  // 512, wkv_b 512 x 16 x 256 = 2,097,152, wo 16 x 128 x 2048 = 4,194,304: 13,763,072. Block 0 (dense): + 3 x 2048 x
  // 10944 + 4,096 = 81,007,104. Blocks 1-26: experts 64 x 3 x 2048 x 1408 = 553,648,128, shared 3 x 2048 x 2816 =
  // 17,301,504, router 131,072: 584,847,872 each. Total 81,007,104 + 26 x 584,847,872 + 2 x 102400 x 2048 + 2,048 =
  // 15,706,484,224 ("DeepSeek-V2-Lite has 15.7B parameters", its model card). Active: 6 experts 51,904,512 per block:
  // 26 x 83,104,256 + 81,007,104 + 419,432,448 = 2,661,150,208 (2.45 B beside the embedding: the card's "2.4B
  // activated").
  // Latent attention (plans/lower/mla.cc) and the dense first block (tests/plans/dense_first_test.cc) are lowered:
  // the config loads.
  const Config cfg = load_config_string(
      std::string(kDeepSeek16b) +
          "training: {seq_len: 4096, local_batch_size: 1}\ncluster: {gpu: h100-sxm, nodes: 1, gpus_per_node: 8}\n",
      "cfg.yaml");
  CHECK(cfg.model.moe.dense_layers == 1);
  CHECK(cfg.model.total_parameters() == 15'706'484'224);
  CHECK(cfg.model.active_parameters() == 2'661'150'208);
  // A latent attention's kv_lora_rank of 0 (0 means standard attention in the Model: the YAML needs a rank).
  CHECK(yaml_error("model:\n  preset: llama3-8b\n  mla: {kv_lora_rank: 0, qk_nope_head_dim: 128, "
                   "qk_rope_head_dim: 64, v_head_dim: 128}\n") ==
        "cfg.yaml:3: model.mla.kv_lora_rank: expected an integer in 1..1048576, got '0'");
  CHECK(yaml_error("model: {preset: llama3-8b, qk_norm: true}\n").find("model.qk_norm") == std::string::npos);
  CHECK(yaml_error("model: {preset: llama3-8b, qk_norm: false}\n").find("model.qk_norm") == std::string::npos);
  // What a MoE section gets wrong, by key and line.
  CHECK(yaml_error("model:\n  preset: llama3-8b\n  moe: {experts: 8, top_k: 9, expert_ffn_dim: 64}\n") ==
        "cfg.yaml:3: model.moe.top_k: expected an integer in 1..8, got '9'");
  CHECK(yaml_error("model:\n  preset: llama3-8b\n  moe: {experts: 8, expert_ffn_dim: 64}\n") ==
        "cfg.yaml:3: model.moe.top_k: missing");
  CHECK(yaml_error("model:\n  preset: llama3-8b\n  moe: {experts: 8, top_k: 2, expert_ffn_dim: 64, expert_groups: "
                   "3, limited_groups: 1}\n") ==
        "cfg.yaml:3: model.moe.expert_groups: expected a divisor of experts (8), got 3");
  CHECK(yaml_error("model:\n  preset: llama3-8b\n  moe: {experts: 8, top_k: 2, expert_ffn_dim: 64, expert_groups: "
                   "4}\n") ==
        "cfg.yaml:3: model.moe.limited_groups: missing; node-limited routing needs expert_groups and limited_groups");
  CHECK(yaml_error("model:\n  preset: llama3-8b\n  moe: {experts: 8, top_k: 2, expert_ffn_dim: 64, shared_gate: "
                   "true}\n") ==
        "cfg.yaml:3: model.moe.shared_gate: true needs a shared expert (model.moe.shared_ffn_dim)");
  CHECK(yaml_error("model:\n  preset: llama3-8b\n  moe: {experts: 8, top_k: 2, expert_ffn_dim: 64, router: x}\n")
            .rfind("cfg.yaml:3: model.moe.router: unknown key", 0) == 0);
  CHECK(yaml_error("model:\n  preset: llama3-8b\n  mla: {kv_lora_rank: 512, qk_nope_head_dim: 128, "
                   "qk_rope_head_dim: 63, v_head_dim: 128}\n") ==
        "cfg.yaml:3: model.mla.qk_rope_head_dim: expected an even size (rotary embedding rotates pairs), got 63");
}
