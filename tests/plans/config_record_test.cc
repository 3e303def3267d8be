// The config a run records (plans/language/config_record.h): the file verbatim unless an option replaced one of its
// values, the option's value when one did, and the transformers config.json a model came from as text, so that a
// profile lowers again to the Program that ran, wherever it is read.
#include "plans/language/config_record.h"

#include <catch2/catch.hpp>
#include <filesystem>

#include "../error_text.h"
#include "../temp_dir.h"
#include "plans/util/error.h"

using namespace tptune;
using tptune::test::error_of;
using tptune::test::TempDir;

namespace {

constexpr const char* kTiny = "model:\n  preset: tiny-llama  # a comment kept verbatim\ntraining:\n  seq_len: 32\n";

// A transformers config.json of a small Llama: 4 heads of 16 (dim 64), 2 kv heads, 2 layers.
constexpr const char* kHfJson = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
  "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "vocab_size": 256, "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "hidden_act": "silu",
  "tie_word_embeddings": true})";

// What the run loaded (load_config with the option) and what a reader loads from the record.
struct RunAndRecord {
  Config ran, reread;
  RecordedConfig recorded;
};

RunAndRecord record(const std::string& path, const std::string& hf_option, std::optional<bool> compile_option) {
  RunAndRecord r;
  r.ran = load_config(path, hf_option);
  if (compile_option) r.ran.training.compile = compile_option;  // --compile / --no-compile (tools/plan_options.cc)
  r.recorded = record_config(path, hf_option, r.ran);
  r.reread = load_config_string(r.recorded.yaml, "profile.json (program.config_yaml)", {}, r.recorded.hf_config_json);
  return r;
}

}  // namespace

TEST_CASE("a recorded config: the file verbatim when no option replaced a value", "[config_record]") {
  TempDir d;
  const std::string path = d.file("c.yaml", kTiny);
  const RunAndRecord r = record(path, "", std::nullopt);
  CHECK(r.recorded.yaml == kTiny);  // comments and layout too
  CHECK_FALSE(r.recorded.hf_config_json);
  // --compile where the file says compile: true changes nothing either
  const std::string on = d.file("on.yaml", std::string(kTiny) + "  compile: true\n");
  CHECK(record(on, "", true).recorded.yaml == std::string(kTiny) + "  compile: true\n");
}

TEST_CASE("a recorded config: --compile and --no-compile are written into training.compile", "[config_record]") {
  TempDir d;
  const RunAndRecord on = record(d.file("c.yaml", kTiny), "", true);
  CHECK(on.reread.training.compile == std::optional<bool>(true));
  CHECK(on.reread.training.seq_len == 32);
  CHECK(on.reread.model.dim == on.ran.model.dim);
  const RunAndRecord off = record(d.file("on.yaml", std::string(kTiny) + "  compile: true\n"), "", false);
  CHECK(off.reread.training.compile == std::optional<bool>(false));
  // A file without a training section gains one.
  const RunAndRecord bare = record(d.file("bare.yaml", "model:\n  preset: tiny-llama\n"), "", true);
  CHECK(bare.reread.training.compile == std::optional<bool>(true));
}

TEST_CASE("a recorded config: the model's transformers config.json travels as text", "[config_record]") {
  const std::string rel = "model:\n  hf_config: config.json\n  name: small\ntraining:\n  seq_len: 32\n";
  RunAndRecord opt, file;
  {
    TempDir d;
    const std::string json = d.file("config.json", kHfJson);
    // --hf-config replaces the file's model section: the record says model: {hf_config: <the option's path>}.
    opt = record(d.file("c.yaml", kTiny), json, std::nullopt);
    // The file's model.hf_config, relative to the file: the config stays verbatim, the json is recorded.
    file = record(d.file("hf.yaml", rel), "", std::nullopt);
  }
  REQUIRE(opt.recorded.hf_config_json);
  CHECK(*opt.recorded.hf_config_json == kHfJson);
  CHECK(file.recorded.yaml == rel);
  REQUIRE(file.recorded.hf_config_json);
  // Read back with the files gone (as on another machine): the model is the json's, 4 heads and 2 kv heads, not the
  // tiny-llama preset's 8 and 4; the file's model.name survives.
  for (const RunAndRecord* r : {&opt, &file}) {
    const Config again = load_config_string(r->recorded.yaml, "p.json", {}, r->recorded.hf_config_json);
    CHECK(again.model.dim == 64);
    CHECK(again.model.n_heads == 4);
    CHECK(again.model.n_kv_heads == 2);
    CHECK(again.model.n_heads == r->ran.model.n_heads);
  }
  CHECK(load_config_string(file.recorded.yaml, "p.json", {}, file.recorded.hf_config_json).model.name == "small");
}

TEST_CASE("a recorded transformers config beside a model without hf_config is refused", "[config_record]") {
  CHECK(error_of([] { load_config_string(kTiny, "p.json (program.config_yaml)", {}, std::string(kHfJson)); }) ==
        "p.json (program.config_yaml):1: model: a transformers config.json is recorded beside this config, but its "
        "model has no hf_config");
}
