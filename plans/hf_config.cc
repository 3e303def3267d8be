#include "plans/hf_config.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>

#include "plans/error.h"
#include "plans/input_file.h"
#include "plans/json_text.h"
#include "plans/yaml_util.h"

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

  // An integer key within `r`, the range of the config YAML's key of the same meaning (plans/limits.h), so that a
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

 private:
  std::string name_;
  std::map<std::string, int> lines_;
  int first_line_ = 1;
};

enum class Family { llama, mistral };

Family read_family(const HfDoc& doc, const json& j) {
  auto from_name = [&](const std::string& key, const std::string& v) {
    if (v == "LlamaForCausalLM" || v == "llama") return Family::llama;
    if (v == "MistralForCausalLM" || v == "mistral") return Family::mistral;
    if (v == "Qwen2ForCausalLM" || v == "qwen2")
      doc.fail(key,
               fmt::format("'{}' is not supported: transformers hard-wires biases on Qwen2's q/k/v projections, and "
                           "tptune's attention has no biases",
                           v));
    doc.fail(key, fmt::format("'{}' is not supported; expected LlamaForCausalLM or MistralForCausalLM", v));
  };
  if (j.contains("architectures")) {
    const json& a = j["architectures"];
    if (!a.is_array() || a.size() != 1 || !a[0].is_string())
      doc.fail("architectures", fmt::format("expected a list of one architecture name, got {}", a.dump()));
    return from_name("architectures", a[0].get<std::string>());
  }
  if (j.contains("model_type") && j["model_type"].is_string())
    return from_name("model_type", j["model_type"].get<std::string>());
  doc.fail("architectures", "missing (and no model_type); expected [\"LlamaForCausalLM\"] or [\"MistralForCausalLM\"]");
}

void reject_unsupported(const HfDoc& doc, const json& j, Family family) {
  for (const char* key :
       {"num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    if (!j[key].is_number() || j[key].get<double>() != 0)
      doc.fail(key, fmt::format("mixture-of-experts ({} = {}) is not supported; tptune models dense MLPs", key,
                                j[key].dump()));
  }
  // Sliding-window attention: Qwen-style configs say whether the window is used; Mistral's is on whenever set, and
  // transformers' MistralConfig defaults it to 4096 when the key is absent.
  bool window_used = j.contains("sliding_window") && !j["sliding_window"].is_null();
  if (j.contains("use_sliding_window") && j["use_sliding_window"].is_boolean())
    window_used = window_used && j["use_sliding_window"].get<bool>();
  if (window_used)
    doc.fail("sliding_window", fmt::format("sliding-window attention ({}) is not supported; tptune models full causal "
                                           "attention (set it to null if the window is not used)",
                                           j["sliding_window"].dump()));
  if (family == Family::mistral && !j.contains("sliding_window"))
    doc.fail("sliding_window",
             "missing; transformers' MistralConfig then uses a 4096-token sliding window, which tptune does not "
             "model; set it to null for full attention");
  doc.must_be_false(j, "attention_bias", "tptune's attention projections have no biases");
  doc.must_be_false(j, "mlp_bias", "tptune's MLP projections have no biases");
}

}  // namespace

Model parse_hf_config(const std::string& text, const std::string& name) {
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
  // Tied input/output embeddings (plans/model.h); absent or null: false, the default of transformers' LlamaConfig,
  // MistralConfig and Qwen2Config.
  if (j.contains("tie_word_embeddings") && !j["tie_word_embeddings"].is_null()) {
    if (!j["tie_word_embeddings"].is_boolean())
      doc.fail("tie_word_embeddings", fmt::format("expected true or false, got {}", j["tie_word_embeddings"].dump()));
    m.tie_word_embeddings = j["tie_word_embeddings"].get<bool>();
  }

  const std::string act = j.contains("hidden_act") ? j["hidden_act"].dump() : "\"silu\"";
  if (act != "\"silu\"")
    doc.fail("hidden_act", fmt::format("expected \"silu\" (the SwiGLU MLP of the Llama family), got {}", act));
  if (m.dim % m.n_heads != 0)
    doc.fail("hidden_size", fmt::format("expected a multiple of num_attention_heads ({}), got {}", m.n_heads, m.dim));
  if (m.n_heads % m.n_kv_heads != 0)
    doc.fail("num_key_value_heads",
             fmt::format("expected a divisor of num_attention_heads ({}), got {}", m.n_heads, m.n_kv_heads));
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    const int64_t hd = doc.integer_in(j, "head_dim", limits::dim);
    if (hd != m.dim / m.n_heads)
      doc.fail("head_dim", fmt::format("{} is not supported: tptune's head_dim is hidden_size / num_attention_heads "
                                       "= {}",
                                       hd, m.dim / m.n_heads));
  }
  return m;
}

Model load_hf_config(const std::string& path) {
  return parse_hf_config(read_input_file(path, "transformers config.json"), path);
}

}  // namespace tptune
