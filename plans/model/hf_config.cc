#include "plans/model/hf_config.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>

#include "plans/util/error.h"
#include "plans/util/input_file.h"
#include "plans/util/json_text.h"
#include "plans/util/yaml_util.h"

namespace tptune {

namespace {

using nlohmann::json;

// The line of every key of the top-level object ("hidden_size" -> 4). nlohmann keeps no positions, so this walks the
// text once: strings (with escapes) are skipped, nesting depth is counted, and a string at depth 1 followed by ':'
// is a key.
std::map<std::string, int> top_level_key_lines(const std::string& text) {
  std::map<std::string, int> lines;
  int depth = 0, line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      --depth;
    } else if (c == '"') {
      const int key_line = line;
      std::string s;
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\' && i + 1 < text.size()) ++i;
        if (text[i] == '\n') ++line;
        s.push_back(text[i]);
      }
      size_t j = i + 1;
      while (j < text.size() && (text[j] == ' ' || text[j] == '\t' || text[j] == '\r' || text[j] == '\n')) ++j;
      if (depth == 1 && j < text.size() && text[j] == ':') lines.emplace(s, key_line);
    }
  }
  return lines;
}

class HfDoc {
 public:
  HfDoc(const std::string& text, std::string name) : name_(std::move(name)), lines_(top_level_key_lines(text)) {
    const size_t brace = text.find('{');
    first_line_ = brace == std::string::npos ? 1 : line_of_byte(text, brace + 1);
  }

  [[noreturn]] void fail(std::string_view key, std::string_view message) const {
    auto it = lines_.find(std::string(key));
    throw Error(fmt::format("{}:{}: {}: {}", name_, it == lines_.end() ? first_line_ : it->second, key, message));
  }

  // An integer key within `r`, the range of the config YAML's key of the same meaning (plans/util/limits.h), so that a
  // config.json cannot pass what a config YAML may not; `fallback` < 0 means the key is required.
  int64_t integer_in(const json& j, const char* key, limits::IntRange r, int64_t fallback = -1) const {
    if (!j.contains(key) || j[key].is_null()) {
      if (fallback >= 0) return fallback;
      fail(key, fmt::format("missing; expected an integer in {}", yaml::range_text(r)));
    }
    const json& v = j[key];
    if (!v.is_number_integer() || v.get<int64_t>() < r.lo || v.get<int64_t>() > r.hi ||
        (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(r.hi)))
      fail(key, fmt::format("expected an integer in {}, got {}", yaml::range_text(r), yaml::shown(v.dump(), 40)));
    return v.get<int64_t>();
  }

  // A number key within `r` (the config YAML's range for the same quantity), `fallback` when absent.
  double real_in(const json& j, const char* key, limits::RealRange r, double fallback) const {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    const json& v = j[key];
    const double x = v.is_number() ? v.get<double>() : 0;
    if (!v.is_number() || !std::isfinite(x) || x < r.lo || x > r.hi || (r.lo_open && x == r.lo))
      fail(key, fmt::format("expected a number in {}, got {}", yaml::range_text(r), yaml::shown(v.dump(), 40)));
    return x;
  }

  // A boolean key that must be false (or absent) because the model cannot represent `true`.
  void must_be_false(const json& j, const char* key, std::string_view why) const {
    if (!j.contains(key) || j[key].is_null()) return;
    if (!j[key].is_boolean()) fail(key, fmt::format("expected true or false, got {}", j[key].dump()));
    if (j[key].get<bool>()) fail(key, fmt::format("true is not supported: {}", why));
  }

  // A boolean key, `fallback` when absent or null.
  bool boolean(const json& j, const char* key, bool fallback) const {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    if (!j[key].is_boolean()) fail(key, fmt::format("expected true or false, got {}", yaml::shown(j[key].dump(), 40)));
    return j[key].get<bool>();
  }

 private:
  std::string name_;
  std::map<std::string, int> lines_;
  int first_line_ = 1;
};

// The families read: the dense Llama family, and those whose blocks the lowering does not yet plan (mixture of
// experts, latent attention, q/k norms), read and counted so that their refusal says what they are.
enum class Family { llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe, deepseek_v3 };
bool is_moe(Family f) {
  return f == Family::mixtral || f == Family::qwen2_moe || f == Family::qwen3_moe || f == Family::deepseek_v3;
}

struct ArchitectureName {
  const char* name;
  Family family;
};
constexpr ArchitectureName kRead[] = {
    {"LlamaForCausalLM", Family::llama},        {"MistralForCausalLM", Family::mistral},
    {"Qwen2ForCausalLM", Family::qwen2},        {"Qwen3ForCausalLM", Family::qwen3},
    {"MixtralForCausalLM", Family::mixtral},    {"Qwen2MoeForCausalLM", Family::qwen2_moe},
    {"Qwen3MoeForCausalLM", Family::qwen3_moe}, {"DeepseekV3ForCausalLM", Family::deepseek_v3},
};

// What tptune lacks for an architecture transformers has, by its config class (transformers/models/*/
// configuration_*.py and modeling_*.py); one line each.
struct KnownArchitecture {
  const char* name;
  const char* missing;
};
constexpr KnownArchitecture kNotModelled[] = {
    {"Gemma2ForCausalLM",
     "soft-capping (attn_logit_softcapping, final_logit_softcapping), sliding-window attention on every other layer, "
     "GeGLU MLPs (gelu_pytorch_tanh), extra post-attention/post-MLP norms and tied embeddings scaled by sqrt(hidden)"},
    {"Gemma3ForCausalLM",
     "sliding-window attention on 5 of 6 layers, q/k norms, GeGLU MLPs (gelu_pytorch_tanh), extra post-attention/"
     "post-MLP norms and tied embeddings scaled by sqrt(hidden)"},
    {"GemmaForCausalLM",
     "GeGLU MLPs (gelu_pytorch_tanh), RMSNorm with (1 + weight) and tied embeddings scaled by "
     "sqrt(hidden)"},
    {"Phi3ForCausalLM",
     "sliding-window attention (sliding_window), partial rotary (partial_rotary_factor) on some sizes and longrope "
     "scaling (its fused qkv_proj and gate_up_proj alone would be fine: they are wq/wk/wv and w1/w3)"},
    {"PhiForCausalLM",
     "LayerNorm with biases, a parallel attention/MLP block, partial rotary (partial_rotary_factor), "
     "a GELU MLP with biases and a bias on the output projection"},
    {"Starcoder2ForCausalLM", "LayerNorm with biases, a GELU MLP with biases and sliding-window attention"},
    {"GPTNeoXForCausalLM", "LayerNorm with biases, a parallel attention/MLP block, partial rotary and biases"},
    {"OlmoForCausalLM", "non-parametric LayerNorm (no weight) and q/k/v clipping (clip_qkv)"},
    {"Olmo2ForCausalLM", "norms after attention and MLP instead of before, and q/k norms"},
    {"CohereForCausalLM", "LayerNorm, a parallel attention/MLP block and logit scaling (logit_scale)"},
};

constexpr const char* kModelled =
    "tptune models LlamaForCausalLM, MistralForCausalLM and Qwen2ForCausalLM (pre-norm RMSNorm, SwiGLU MLP, full "
    "causal GQA attention with rotary embedding)";

Family read_family(const HfDoc& doc, const json& j) {
  if (!j.contains("architectures")) {
    std::string type;  // appended piecewise: g++ 12 warns (-Wrestrict, a false positive) on " " + std::string
    if (j.contains("model_type")) type.append(" ").append(j["model_type"].dump());
    doc.fail("architectures",
             fmt::format("missing; expected [\"LlamaForCausalLM\"], [\"MistralForCausalLM\"] or [\"Qwen2ForCausalLM\"] "
                         "(model_type{} alone does not say which model class transformers builds)",
                         type));
  }
  const json& a = j["architectures"];
  if (!a.is_array() || a.size() != 1 || !a[0].is_string())
    doc.fail("architectures", fmt::format("expected a list of one architecture name, got {}", a.dump()));
  const std::string v = a[0].get<std::string>();
  for (const ArchitectureName& r : kRead)
    if (v == r.name) return r.family;
  for (const KnownArchitecture& k : kNotModelled)
    if (v == k.name)
      doc.fail("architectures", fmt::format("'{}' is not supported: tptune does not model its {}", v, k.missing));
  doc.fail("architectures", fmt::format("'{}' is not supported: {}", yaml::shown(v, 80), kModelled));
}

// A key that must be absent, null, false or zero: its presence with another value selects something tptune does not
// model (`what`).
void must_be_off(const HfDoc& doc, const json& j, const char* key, std::string_view what) {
  if (!j.contains(key) || j[key].is_null()) return;
  const json& v = j[key];
  const bool off = (v.is_boolean() && !v.get<bool>()) || (v.is_number() && v.get<double>() == 0);
  if (!off) doc.fail(key, fmt::format("{} is not supported: {}", yaml::shown(v.dump(), 40), what));
}

void reject_unsupported(const HfDoc& doc, const json& j, Family family) {
  for (const char* key : {"num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok",
                          "moe_intermediate_size", "n_shared_experts", "shared_expert_intermediate_size"}) {
    if (is_moe(family) || !j.contains(key) || j[key].is_null()) continue;
    if (!j[key].is_number() || j[key].get<double>() != 0)
      doc.fail(key, fmt::format("mixture-of-experts ({} = {}) is not supported; tptune models dense MLPs", key,
                                j[key].dump()));
  }
  // Sliding-window attention: Qwen-style configs say whether the window is used (use_sliding_window; then
  // max_window_layers says which layers, irrelevant when it is off); Mistral's is on whenever set, and transformers'
  // MistralConfig defaults it to 4096 when the key is absent.
  bool window_used = j.contains("sliding_window") && !j["sliding_window"].is_null();
  if (j.contains("use_sliding_window") && j["use_sliding_window"].is_boolean())
    window_used = window_used && j["use_sliding_window"].get<bool>();
  if (window_used)
    doc.fail(j.contains("use_sliding_window") ? "use_sliding_window" : "sliding_window",
             fmt::format("sliding-window attention ({} tokens) is not supported; tptune models full causal attention "
                         "({})",
                         j["sliding_window"].dump(),
                         j.contains("use_sliding_window") ? "set use_sliding_window to false"
                                                          : "set sliding_window to null if the window is not used"));
  if (family == Family::mistral && !j.contains("sliding_window"))
    doc.fail("sliding_window",
             "missing; transformers' MistralConfig then uses a 4096-token sliding window, which tptune does not "
             "model; set it to null for full attention");
  // transformers' LlamaAttention puts attention_bias on q, k, v AND o_proj; tptune biases q, k and v only (the
  // Qwen2 family), so a Llama with attention_bias is a model with an o_proj bias it does not represent.
  doc.must_be_false(j, "attention_bias",
                    "transformers' LlamaAttention then biases q_proj, k_proj, v_proj and o_proj; tptune models "
                    "biases on q, k and v only (Qwen2ForCausalLM)");
  doc.must_be_false(j, "mlp_bias", "tptune's MLP projections have no biases");
  must_be_off(doc, j, "attn_logit_softcapping", "attention soft-capping (Gemma 2's tanh cap on the scores)");
  must_be_off(doc, j, "final_logit_softcapping", "logit soft-capping (Gemma 2's tanh cap on the output logits)");
  if (j.contains("partial_rotary_factor") && !j["partial_rotary_factor"].is_null() &&
      !(j["partial_rotary_factor"].is_number() && j["partial_rotary_factor"].get<double>() == 1.0))
    doc.fail("partial_rotary_factor",
             fmt::format("{} is not supported: tptune rotates the whole head (partial rotary, as Phi uses, is not "
                         "modelled)",
                         j["partial_rotary_factor"].dump()));
  for (const char* key : {"layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"})
    if (j.contains(key) && !j[key].is_null())
      doc.fail(key,
               "LayerNorm is not supported for this architecture: tptune's Llama family uses RMSNorm "
               "(rms_norm_eps)");
  if (j.contains("hidden_activation") && !j["hidden_activation"].is_null() && j["hidden_activation"] != "silu")
    doc.fail("hidden_activation",
             fmt::format("{} is not supported: a GELU-gated MLP (GeGLU, Gemma's); tptune models SwiGLU (silu)",
                         yaml::shown(j["hidden_activation"].dump(), 40)));
  must_be_off(doc, j, "use_qk_norm", "q/k norms before rotary embedding");
}

// A key that must be absent, null or equal to `expected` (a layout the Model represents).
void must_equal(const HfDoc& doc, const json& j, const char* key, int64_t expected, std::string_view what) {
  if (!j.contains(key) || j[key].is_null()) return;
  if (!j[key].is_number_integer() || j[key].get<int64_t>() != expected)
    doc.fail(key, fmt::format("{} is not supported: {}", yaml::shown(j[key].dump(), 40), what));
}

// The mixture-of-experts keys of `family` (transformers' configuration_mixtral.py, configuration_qwen2_moe.py,
// configuration_qwen3_moe.py, configuration_deepseek_v3.py) into m.moe.
void read_moe(const HfDoc& doc, const json& j, Family family, Model& m) {
  MoeSpec& e = m.moe;
  e.experts = doc.integer_in(j,
                             family == Family::mixtral       ? "num_local_experts"
                             : family == Family::deepseek_v3 ? "n_routed_experts"
                                                             : "num_experts",
                             limits::experts);
  e.top_k = doc.integer_in(j, "num_experts_per_tok", {1, e.experts});
  // Mixtral's experts are its MLP (intermediate_size); the others name the expert width apart.
  e.expert_ffn_dim =
      family == Family::mixtral ? m.ffn_dim : doc.integer_in(j, "moe_intermediate_size", limits::ffn_dim);
  // MixtralSparseMoeBlock renormalises the top-k softmax weights; the others say so in norm_topk_prob (transformers'
  // Qwen2/Qwen3-MoE default false, DeepSeek-V3's true).
  e.route_norm = family == Family::mixtral || doc.boolean(j, "norm_topk_prob", family == Family::deepseek_v3);
  if (family == Family::qwen2_moe || family == Family::qwen3_moe) {
    must_equal(doc, j, "decoder_sparse_step", 1, "tptune reads every block as a MoE block (decoder_sparse_step 1)");
    if (j.contains("mlp_only_layers") &&
        !(j["mlp_only_layers"].is_null() || (j["mlp_only_layers"].is_array() && j["mlp_only_layers"].empty())))
      doc.fail("mlp_only_layers", fmt::format("{} is not supported: tptune reads every block as a MoE block",
                                              yaml::shown(j["mlp_only_layers"].dump(), 40)));
  }
  if (family == Family::qwen2_moe) {
    // Qwen2MoeSparseMoeBlock: one shared expert of shared_expert_intermediate_size behind a sigmoid gate.
    e.shared_ffn_dim = doc.integer_in(j, "shared_expert_intermediate_size", {0, limits::ffn_dim.hi}, 0);
    e.shared_gate = e.shared_ffn_dim > 0;
  }
  if (family == Family::deepseek_v3) {
    const int64_t shared = doc.integer_in(j, "n_shared_experts", {0, limits::experts.hi}, 0);
    e.shared_ffn_dim = shared * e.expert_ffn_dim;  // torchtitan: FeedForward(dim, moe_hidden_dim x num_shared_experts)
    e.dense_layers = doc.integer_in(j, "first_k_dense_replace", {0, m.n_layers}, 0);
    must_equal(doc, j, "moe_layer_freq", 1, "tptune reads every block after the dense ones as a MoE block");
    if (j.contains("scoring_func") && !j["scoring_func"].is_null()) {
      const json& f = j["scoring_func"];
      if (f != "sigmoid" && f != "softmax")
        doc.fail("scoring_func", fmt::format("expected \"sigmoid\" or \"softmax\", got {}", yaml::shown(f.dump(), 40)));
      e.score = f == "sigmoid" ? RouterScore::sigmoid : RouterScore::softmax;
    } else {
      e.score = RouterScore::sigmoid;  // DeepseekV3Config's default
    }
    e.route_scale = doc.real_in(j, "routed_scaling_factor", limits::route_scale, 1.0);
    const int64_t groups = doc.integer_in(j, "n_group", {1, e.experts}, 1);
    if (groups > 1) {
      if (e.experts % groups != 0)
        doc.fail("n_group", fmt::format("expected a divisor of n_routed_experts ({}), got {}", e.experts, groups));
      e.expert_groups = groups;
      e.limited_groups = doc.integer_in(j, "topk_group", {1, groups});
    }
    // Multi-head latent attention: q_lora_rank null means one q projection (DeepSeek-V2-Lite, torchtitan's 16B).
    MlaSpec& a = m.mla;
    a.q_lora_rank = doc.integer_in(j, "q_lora_rank", {0, limits::dim.hi}, 0);
    a.kv_lora_rank = doc.integer_in(j, "kv_lora_rank", limits::dim);
    a.qk_nope_head_dim = doc.integer_in(j, "qk_nope_head_dim", limits::head_dim);
    a.qk_rope_head_dim = doc.integer_in(j, "qk_rope_head_dim", limits::head_dim);
    a.v_head_dim = doc.integer_in(j, "v_head_dim", limits::head_dim);
    if (a.qk_rope_head_dim % 2 != 0)
      doc.fail("qk_rope_head_dim",
               fmt::format("expected an even size (rotary embedding rotates pairs), got {}", a.qk_rope_head_dim));
  }
}

}  // namespace

Model read_hf_model(const std::string& text, const std::string& name) {
  const json j = parse_json_text(text, name);
  const HfDoc doc(text, name);
  if (!j.is_object()) throw Error(fmt::format("{}:1: expected a JSON object (a transformers config.json)", name));

  const Family family = read_family(doc, j);
  reject_unsupported(doc, j, family);

  Model m;
  m.name =
      j.contains("_name_or_path") && j["_name_or_path"].is_string() && !j["_name_or_path"].get<std::string>().empty()
          ? j["_name_or_path"].get<std::string>()
          : name;
  // The ranges of the config YAML's model keys (model.dim, model.n_layers, ...), checked here with file:line.
  m.dim = doc.integer_in(j, "hidden_size", limits::dim);
  m.n_layers = doc.integer_in(j, "num_hidden_layers", limits::n_layers);
  m.n_heads = doc.integer_in(j, "num_attention_heads", limits::n_heads);
  m.n_kv_heads = doc.integer_in(j, "num_key_value_heads", limits::n_heads, m.n_heads);
  m.ffn_dim = doc.integer_in(j, "intermediate_size", limits::ffn_dim);
  m.vocab_size = doc.integer_in(j, "vocab_size", limits::vocab_size);
  m.mlp = Mlp::swiglu;
  m.norm = Norm::rmsnorm;
  m.norm_eps = doc.real_in(j, "rms_norm_eps", limits::norm_eps, 1e-6);
  m.rope_theta = doc.real_in(j, "rope_theta", limits::rope_theta, 10000.0);
  // Tied input/output embeddings (plans/model/model.h); absent or null: false, the default of transformers'
  // LlamaConfig, MistralConfig and Qwen2Config.
  if (j.contains("tie_word_embeddings") && !j["tie_word_embeddings"].is_null()) {
    if (!j["tie_word_embeddings"].is_boolean())
      doc.fail("tie_word_embeddings", fmt::format("expected true or false, got {}", j["tie_word_embeddings"].dump()));
    m.tie_word_embeddings = j["tie_word_embeddings"].get<bool>();
  }

  const std::string act = j.contains("hidden_act") ? j["hidden_act"].dump() : "\"silu\"";
  if (act != "\"silu\"")
    doc.fail("hidden_act", fmt::format("expected \"silu\" (the SwiGLU MLP of the Llama family), got {}", act));
  if (m.n_heads % m.n_kv_heads != 0)
    doc.fail("num_key_value_heads",
             fmt::format("expected a divisor of num_attention_heads ({}), got {}", m.n_heads, m.n_kv_heads));
  // head_dim: transformers' Llama, Mistral and Qwen2 attention use config.head_dim when set, else hidden_size /
  // num_attention_heads. A head_dim equal to that quotient is the default (kept implicit, as a config YAML would).
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    const int64_t hd = doc.integer_in(j, "head_dim", limits::head_dim);
    if (hd % 2 != 0)
      doc.fail("head_dim", fmt::format("expected an even size (rotary embedding rotates pairs), got {}", hd));
    if (m.dim % m.n_heads != 0 || hd != m.dim / m.n_heads) m.explicit_head_dim = hd;
  } else if (m.dim % m.n_heads != 0) {
    doc.fail("hidden_size", fmt::format("expected a multiple of num_attention_heads ({}), got {} (or a head_dim key)",
                                        m.n_heads, m.dim));
  } else if (m.head_dim() % 2 != 0) {
    doc.fail("hidden_size", fmt::format("hidden_size / num_attention_heads = {}: expected an even head_dim (rotary "
                                        "embedding rotates pairs)",
                                        m.head_dim()));
  }
  // Qwen2Attention (and Qwen2MoeAttention) build q_proj, k_proj and v_proj with bias=True (no key turns it off);
  // o_proj has none. Qwen3's attention has no biases but RMSNorms q and k per head.
  m.qkv_bias = family == Family::qwen2 || family == Family::qwen2_moe;
  m.qk_norm = family == Family::qwen3 || family == Family::qwen3_moe;
  if (is_moe(family)) read_moe(doc, j, family, m);
  return m;
}

Model parse_hf_config(const std::string& text, const std::string& name) { return read_hf_model(text, name); }

Model load_hf_config(const std::string& path) {
  return parse_hf_config(read_input_file(path, "transformers config.json"), path);
}

}  // namespace tptune
