// Hugging Face config.json as a model source (plans/model/hf_config.h): the bundled Llama 3 configs lower to exactly
// the Program of the built-in presets, and what the Model cannot represent is a one-line error naming file, line, key.
#include "plans/model/hf_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <catch2/catch.hpp>

#include "plans/language/config.h"
#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "tests/fixtures.h"

using namespace tptune;

namespace {

std::string source(const std::string& rel) { return std::string(TPTUNE_SOURCE_DIR) + "/" + rel; }

// Every field of an op kind, printed.
std::string kind_fields(const OpKind& k) {
  return std::visit(
      [](const auto& o) -> std::string {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, GemmOp>)
          return fmt::format("gemm {} {} {} {} {} {} {} {} {}", o.m, o.n, o.k, to_string(o.a_dtype),
                             to_string(o.b_dtype), to_string(o.c_dtype), o.trans_a, o.trans_b, o.accumulate);
        else if constexpr (std::is_same_v<T, AttentionOp>)
          return fmt::format("attn {} {} {} {} {} {} {}", o.batch, o.seq, o.n_heads, o.n_kv_heads, o.head_dim, o.causal,
                             o.backward);
        else if constexpr (std::is_same_v<T, ElementwiseOp>)
          return fmt::format("ew {} {} {} {}", to_string(o.fn), o.bytes, o.flops, o.dim);
        else if constexpr (std::is_same_v<T, EmbeddingOp>)
          return fmt::format("emb {} {} {} {} {}", o.tokens, o.vocab_local, o.dim_local, o.vocab_sharded, o.backward);
        else if constexpr (std::is_same_v<T, CrossEntropyOp>)
          return fmt::format("ce {} {} {} {}", to_string(o.stage), o.tokens, o.vocab_local, o.vocab_sharded);
        else if constexpr (std::is_same_v<T, CastFp8Op>)
          return fmt::format("fp8 {} {} {} {}", static_cast<int>(o.stage), to_string(o.to), o.elements, o.rowwise);
        else
          return fmt::format("coll {} {} {} {} {} {} {}", static_cast<int>(o.kind), to_string(o.group),
                             static_cast<int>(o.reduce), to_string(o.dtype), o.bytes, o.gather_dim, o.scatter_dim);
      },
      k);
}

// The whole Program as text (everything but the model's name), so that two Programs compare line by line.
std::vector<std::string> fingerprint(const Program& p) {
  std::vector<std::string> out;
  const Model& m = p.model;
  out.push_back(fmt::format("model {} {} {} {} {} {} {} {} {} {}", m.dim, m.n_layers, m.n_heads, m.n_kv_heads,
                            m.ffn_dim, m.vocab_size, to_string(m.mlp), to_string(m.norm), m.norm_eps, m.rope_theta));
  out.push_back(fmt::format("tp {} dp {} tokens {} targets {} loss {}", p.tp, p.dp, p.tokens, p.targets, p.loss));
  for (const auto& t : p.tensors)
    out.push_back(fmt::format("tensor {} {} [{}] [{}] {} {} {} {} {}", t.name, t.per_layer,
                              fmt::join(t.local_shape, ","), fmt::join(t.global_shape, ","), to_string(t.dtype),
                              to_string(t.placement), static_cast<int>(t.role), t.param, t.param_shard_dim));
  for (const auto& s : p.segments) {
    out.push_back(fmt::format("segment {} x{} {}", to_string(s.kind), s.repeat, s.reverse));
    for (const auto& o : s.ops)
      out.push_back(fmt::format("op {} {} {} {} deps[{}] in[{}] out[{}] chunk {} {} {} | {}", o.id, o.module, o.name,
                                to_string(o.phase), fmt::join(o.deps, ","), fmt::join(o.inputs, ","),
                                fmt::join(o.outputs, ","), static_cast<int>(o.chunk.pattern), o.chunk.step,
                                o.chunk.count, kind_fields(o.kind)));
  }
  for (const auto& c : p.chains)
    out.push_back(fmt::format("chain {} {} {} {} {}", c.in, c.out, c.source, c.sink, c.reverse));
  return out;
}

// `preset` at tp 8, dp_shard 2, with (`sp_toggles`) or without float8 tensorwise, async TP and loss parallel.
Program lower_with(const Model& m, const std::string& preset, bool sp_toggles) {
  return test::lower_preset(preset,
                            {.tp_degree = 8,
                             .dp_shard = 2,
                             .float8 = sp_toggles ? Float8Recipe::tensorwise : Float8Recipe::none,
                             .async_tp = sp_toggles,
                             .loss_parallel = sp_toggles},
                            m, 4096);
}

std::string hf_error(const std::string& json_text) {
  try {
    parse_hf_config(json_text, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A valid Llama config with one key replaced or added (`extra` is spliced in after the opening brace).
std::string llama_with(const std::string& extra) {
  return "{\n" + extra +
         "\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"hidden_size\": 256,\n  \"intermediate_size\": 512,\n"
         "  \"num_attention_heads\": 4,\n  \"num_key_value_heads\": 2,\n  \"num_hidden_layers\": 2,\n"
         "  \"vocab_size\": 1000\n}\n";
}

}  // namespace

TEST_CASE("hf_config: the bundled Llama 3 configs give exactly the presets' Programs", "[hf_config]") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"examples/hf/llama3-8b/config.json", "llama3-8b"},
      {"examples/hf/llama3-70b/config.json", "llama3-70b"},
      {"examples/hf/llama3.1-405b/config.json", "llama3-405b"},
  };
  for (const auto& [file, preset_name] : cases) {
    INFO(file);
    const Model hf = load_hf_config(source(file));
    Model preset;
    REQUIRE(model_preset(preset_name, preset));
    for (const char* plan : {"vanilla", "sequence_parallel"})
      for (bool toggles : {false, true}) {
        if (toggles && std::string(plan) == "vanilla") continue;  // async TP needs sequence parallel
        INFO(plan << " toggles " << toggles);
        const auto a = fingerprint(lower_with(hf, plan, toggles));
        const auto b = fingerprint(lower_with(preset, plan, toggles));
        REQUIRE(a.size() == b.size());
        for (size_t i = 0; i < a.size(); ++i) REQUIRE(a[i] == b[i]);
      }
  }
}

TEST_CASE("hf_config: Mistral 7B v0.3 reads its own dims", "[hf_config]") {
  const Model m = load_hf_config(source("examples/hf/mistral-7b-v0.3/config.json"));
  CHECK(m.name == "mistralai/Mistral-7B-v0.3");
  CHECK(m.dim == 4096);
  CHECK(m.n_layers == 32);
  CHECK(m.n_heads == 32);
  CHECK(m.n_kv_heads == 8);
  CHECK(m.ffn_dim == 14336);
  CHECK(m.vocab_size == 32768);
  CHECK(m.rope_theta == 1e6);
  CHECK(m.norm_eps == 1e-5);
  CHECK(m.mlp == Mlp::swiglu);
  CHECK(m.norm == Norm::rmsnorm);
}

TEST_CASE("hf_config: defaults follow transformers' LlamaConfig", "[hf_config]") {
  // No num_key_value_heads, rope_theta, rms_norm_eps: transformers uses n_heads, 10000 and 1e-6.
  const Model m = parse_hf_config(
      R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
          "num_hidden_layers": 2, "vocab_size": 100})",
      "c.json");
  CHECK(m.n_kv_heads == 4);
  CHECK(m.rope_theta == 10000.0);
  CHECK(m.norm_eps == 1e-6);
  CHECK(m.name == "c.json");
}

TEST_CASE("hf_config: what the model cannot represent is a one-line error naming file, line and key", "[hf_config]") {
  // The spliced key is on line 2 of llama_with's text.
  CHECK(hf_error(llama_with("  \"num_local_experts\": 8,")) ==
        "config.json:2: num_local_experts: mixture-of-experts (num_local_experts = 8) is not supported; tptune models "
        "dense MLPs");
  CHECK_THAT(hf_error(llama_with("  \"num_experts\": 64,")), Catch::StartsWith("config.json:2: num_experts: mixture"));
  CHECK(hf_error(llama_with("  \"num_local_experts\": 0,")) == "(no error)");
  CHECK_THAT(hf_error(llama_with("  \"attention_bias\": true,")),
             Catch::StartsWith("config.json:2: attention_bias: true is not supported"));
  CHECK_THAT(hf_error(llama_with("  \"mlp_bias\": true,")), Catch::StartsWith("config.json:2: mlp_bias: true is not"));
  CHECK(hf_error(llama_with("  \"tie_word_embeddings\": \"yes\",")) ==
        "config.json:2: tie_word_embeddings: expected true or false, got \"yes\"");
  CHECK(hf_error(llama_with("  \"tie_word_embeddings\": false,")) == "(no error)");
  CHECK_THAT(hf_error(llama_with("  \"hidden_act\": \"gelu\",")),
             Catch::StartsWith("config.json:2: hidden_act: expected \"silu\""));
  // head_dim 128 with hidden 256 / 4 heads = 64: a head_dim of its own (Mistral Nemo's case); 64 is the default.
  CHECK(parse_hf_config(llama_with("  \"head_dim\": 128,"), "c.json").explicit_head_dim == 128);
  CHECK(parse_hf_config(llama_with("  \"head_dim\": 64,"), "c.json").explicit_head_dim == 0);
  CHECK(hf_error(llama_with("  \"head_dim\": 63,")) ==
        "config.json:2: head_dim: expected an even size (rotary embedding rotates pairs), got 63");
  CHECK(hf_error(llama_with("  \"sliding_window\": 4096,")) ==
        "config.json:2: sliding_window: sliding-window attention (4096 tokens) is not supported; tptune models full "
        "causal attention (set sliding_window to null if the window is not used)");
  CHECK(hf_error(llama_with("  \"sliding_window\": 4096, \"use_sliding_window\": true,")) ==
        "config.json:2: use_sliding_window: sliding-window attention (4096 tokens) is not supported; tptune models "
        "full causal attention (set use_sliding_window to false)");
  CHECK(hf_error(llama_with("  \"sliding_window\": 4096, \"use_sliding_window\": false,")) == "(no error)");
  // (llama_with's own keys come later; JSON's last duplicate wins, so type errors use keys it does not set.)
  CHECK(hf_error(llama_with("  \"head_dim\": \"64\",")) ==
        "config.json:2: head_dim: expected an integer in 2..65536, got \"64\"");
  CHECK(hf_error(llama_with("  \"rms_norm_eps\": -1,")) ==
        "config.json:2: rms_norm_eps: expected a number in (0, 1], got -1");
  // The config YAML's ranges (model.norm_eps, model.rope_theta, model.dim, ...), with file:line: before issue 21, 1e300
  // passed, and a size past the YAML range was refused by the lowering without file or line.
  CHECK(hf_error(llama_with("  \"rms_norm_eps\": 1e300,")) ==
        "config.json:2: rms_norm_eps: expected a number in (0, 1], got 1e+300");
  CHECK(hf_error(llama_with("  \"rope_theta\": 1e300,")) ==
        "config.json:2: rope_theta: expected a number in (0, 1000000000000], got 1e+300");
  CHECK(hf_error(llama_with("  \"rope_theta\": 500000.0,")) == "(no error)");
  CHECK(hf_error("{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 4194304, \"intermediate_size\": 128,\n"
                 "\"num_attention_heads\": 4, \"num_hidden_layers\": 2, \"vocab_size\": 100}") ==
        "config.json:1: hidden_size: expected an integer in 1..1048576, got 4194304");
  CHECK(hf_error("{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 128,\n"
                 "\"num_attention_heads\": 4,\n\"num_hidden_layers\": 10001, \"vocab_size\": 100}") ==
        "config.json:3: num_hidden_layers: expected an integer in 1..10000, got 10001");
  CHECK(hf_error("{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 128,\n"
                 "\"num_attention_heads\": 4, \"num_hidden_layers\": 2, \"vocab_size\": 18446744073709551615}") ==
        "config.json:2: vocab_size: expected an integer in 1..16777216, got 18446744073709551615");
  CHECK(hf_error("{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 128,\n"
                 "\"num_attention_heads\": 4, \"num_hidden_layers\": 2, \"vocab_size\": 100,\n"
                 "\"num_key_value_heads\": 3}") ==
        "config.json:3: num_key_value_heads: expected a divisor of num_attention_heads (4), got 3");
}

TEST_CASE("hf_config: refusals name the key and the feature, one line each", "[hf_config]") {
  CHECK(hf_error(llama_with("  \"attn_logit_softcapping\": 50.0,")) ==
        "config.json:2: attn_logit_softcapping: 50.0 is not supported: attention soft-capping (Gemma 2's tanh cap on "
        "the scores)");
  CHECK(hf_error(llama_with("  \"final_logit_softcapping\": 30.0,")) ==
        "config.json:2: final_logit_softcapping: 30.0 is not supported: logit soft-capping (Gemma 2's tanh cap on the "
        "output logits)");
  CHECK(hf_error(llama_with("  \"final_logit_softcapping\": null,")) == "(no error)");
  CHECK(hf_error(llama_with("  \"partial_rotary_factor\": 0.5,")) ==
        "config.json:2: partial_rotary_factor: 0.5 is not supported: tptune rotates the whole head (partial rotary, "
        "as Phi uses, is not modelled)");
  CHECK(hf_error(llama_with("  \"layer_norm_eps\": 1e-5,")) ==
        "config.json:2: layer_norm_eps: LayerNorm is not supported for this architecture: tptune's Llama family uses "
        "RMSNorm (rms_norm_eps)");
  CHECK(hf_error(llama_with("  \"hidden_activation\": \"gelu_pytorch_tanh\",")) ==
        "config.json:2: hidden_activation: \"gelu_pytorch_tanh\" is not supported: a GELU-gated MLP (GeGLU, Gemma's); "
        "tptune models SwiGLU (silu)");
  CHECK(hf_error(llama_with("  \"hidden_act\": \"gelu_pytorch_tanh\",")) ==
        "config.json:2: hidden_act: expected \"silu\" (the SwiGLU MLP of the Llama family), got \"gelu_pytorch_tanh\"");
  CHECK(hf_error(llama_with("  \"n_shared_experts\": 2,")) ==
        "config.json:2: n_shared_experts: mixture-of-experts (n_shared_experts = 2) is not supported; tptune models "
        "dense MLPs");
  // attention_bias: LlamaAttention biases q, k, v and o_proj; tptune has no o_proj bias, so it stays refused.
  CHECK(hf_error(llama_with("  \"attention_bias\": true,")) ==
        "config.json:2: attention_bias: true is not supported: transformers' LlamaAttention then biases q_proj, "
        "k_proj, v_proj and o_proj; tptune models biases on q, k and v only (Qwen2ForCausalLM)");
  CHECK(hf_error(llama_with("  \"use_qk_norm\": true,")) ==
        "config.json:2: use_qk_norm: true is not supported: q/k norms before rotary embedding");
}

TEST_CASE("hf_config: unsupported architectures and missing keys are named", "[hf_config]") {
  CHECK(hf_error("{\n  \"architectures\": [\"MixtralForCausalLM\"]\n}") ==
        "config.json:2: architectures: 'MixtralForCausalLM' is not supported: tptune does not model its "
        "mixture-of-experts MLPs (num_local_experts)");
  CHECK(hf_error("{\n  \"architectures\": [\"Gemma2ForCausalLM\"]\n}") ==
        "config.json:2: architectures: 'Gemma2ForCausalLM' is not supported: tptune does not model its soft-capping "
        "(attn_logit_softcapping, final_logit_softcapping), sliding-window attention on every other layer, GeGLU MLPs "
        "(gelu_pytorch_tanh), extra post-attention/post-MLP norms and tied embeddings scaled by sqrt(hidden)");
  CHECK_THAT(hf_error("{\n  \"architectures\": [\"Phi3ForCausalLM\"]\n}"),
             Catch::StartsWith("config.json:2: architectures: 'Phi3ForCausalLM' is not supported: tptune does not "
                               "model its sliding-window attention (sliding_window), partial rotary"));
  CHECK(hf_error("{\n  \"architectures\": [\"FalconForCausalLM\"]\n}") ==
        "config.json:2: architectures: 'FalconForCausalLM' is not supported: tptune models LlamaForCausalLM, "
        "MistralForCausalLM and Qwen2ForCausalLM (pre-norm RMSNorm, SwiGLU MLP, full causal GQA attention with "
        "rotary embedding)");
  CHECK_THAT(hf_error("{\"hidden_size\": 4}"), Catch::StartsWith("config.json:1: architectures: missing"));
  // model_type alone no longer passes: it does not say which model class transformers builds.
  CHECK(hf_error("{\n  \"model_type\": \"llama\", \"hidden_size\": 64\n}") ==
        "config.json:1: architectures: missing; expected [\"LlamaForCausalLM\"], [\"MistralForCausalLM\"] or "
        "[\"Qwen2ForCausalLM\"] (model_type \"llama\" alone does not say which model class transformers builds)");
  // hidden_size missing: the error points at the object's opening brace (line 1).
  CHECK(hf_error("{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"vocab_size\": 10\n}") ==
        "config.json:1: hidden_size: missing; expected an integer in 1..1048576");
  // nlohmann reports a byte offset; the error says the line (3) instead.
  CHECK_THAT(hf_error("{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"vocab_size\": 10,,\n}"),
             Catch::StartsWith("config.json:3: invalid JSON: "));
  CHECK(hf_error("[1, 2]") == "config.json:1: expected a JSON object (a transformers config.json)");
}

TEST_CASE("hf_config: the bundled refused configs say why", "[hf_config]") {
  auto err = [](const std::string& rel) {
    try {
      load_hf_config(source(rel));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  // Qwen2 7B: accepted, with the q/k/v biases transformers' Qwen2Attention hard-wires (sliding_window 131072 is set
  // but use_sliding_window false: full attention).
  CHECK(err("tests/plans/hf_configs/qwen2-7b.json") == "(no error)");
  CHECK(load_hf_config(source("tests/plans/hf_configs/qwen2-7b.json")).qkv_bias);
  CHECK_THAT(err("tests/plans/hf_configs/mistral-7b-v0.1.json"),
             Catch::Contains(":20: sliding_window: sliding-window attention (4096 tokens) is not supported"));
}

TEST_CASE("hf_config: config YAML reads model.hf_config relative to itself, and --hf-config replaces model",
          "[hf_config]") {
  const Config c = load_config(source("examples/llama3-8b-hf.yaml"));
  Model preset;
  REQUIRE(model_preset("llama3-8b", preset));
  CHECK(c.model.dim == preset.dim);
  CHECK(c.model.ffn_dim == preset.ffn_dim);
  CHECK(c.model.name == "meta-llama/Meta-Llama-3-8B");

  const Config o =
      load_config(source("examples/llama3-8b-h100.yaml"), source("examples/hf/mistral-7b-v0.3/config.json"));
  CHECK(o.model.vocab_size == 32768);

  // A path that does not exist names the YAML line of the key; other model keys beside hf_config are refused.
  const std::string base = source("examples");
  try {
    load_config_string("model:\n  hf_config: nowhere/config.json\n", "c.yaml", base);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK_THAT(std::string(e.what()), Catch::StartsWith("c.yaml:2: model.hf_config: cannot open '"));
  }
  try {
    load_config_string("model:\n  hf_config: hf/llama3-8b/config.json\n  dim: 5\n", "c.yaml", base);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK_THAT(std::string(e.what()), Catch::StartsWith("c.yaml:3: "));
    CHECK_THAT(std::string(e.what()), Catch::Contains("dim"));
  }
}
