// Config loading: presets, overrides, defaults, the example files, and an error for every kind of bad input that
// names the file, line and key.
#include "plans/language/config.h"

#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "plans/language/plan.h"
#include "plans/util/error.h"
#include "tests/fixtures.h"

using namespace tptune;
using Catch::Matchers::Contains;

namespace {

Config load(const std::string& yaml) { return load_config_string(yaml, "cfg.yaml"); }

// The message of the tptune::Error that loading `yaml` throws ("<no error>" when it loads).
std::string error_of(const std::string& yaml) {
  try {
    load(yaml);
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// A fresh directory under the system temp dir, removed at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() /
           ("tptune_config_test_" + std::to_string(reinterpret_cast<uintptr_t>(this)) + "_" +
            std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
    return (path / name).string();
  }
};

}  // namespace

TEST_CASE("a preset config fills the model and keeps the documented defaults", "[config]") {
  const Config c = load("model: {preset: llama3-8b}\n");
  Model m;
  REQUIRE(model_preset("llama3-8b", m));
  CHECK(c.path == "cfg.yaml");
  CHECK(c.model.name == "llama3-8b");
  CHECK(c.model.dim == m.dim);
  CHECK(c.model.ffn_dim == 14336);
  CHECK(c.model.n_kv_heads == 8);
  CHECK(c.training.seq_len == 8192);
  CHECK(c.training.local_batch_size == 1);
  CHECK(c.training.dtype == DType::bf16);
  CHECK(c.training.activation_checkpointing == ActivationCheckpointing::none);
  CHECK_FALSE(c.has_search);
  CHECK(c.search.tp_degrees.empty());  // "derive from the cluster"
  CHECK(c.search.presets == std::vector<std::string>{"vanilla", "sequence_parallel"});
}

TEST_CASE("explicit dims: n_kv_heads defaults to n_heads, enums and reals parse", "[config]") {
  const Config c = load(R"(
model:
  dim: 256
  n_layers: 3
  n_heads: 8
  ffn_dim: 1024
  vocab_size: 1000
  mlp: gelu
  norm: layernorm
  norm_eps: 1e-6
  rope_theta: 10000
training: {seq_len: 128, local_batch_size: 4, dtype: fp16, activation_checkpointing: selective}
)");
  CHECK(c.model.name == "custom");
  CHECK(c.model.n_kv_heads == 8);
  CHECK(c.model.head_dim() == 32);
  CHECK(c.model.mlp == Mlp::gelu);
  CHECK(c.model.norm == Norm::layernorm);
  CHECK(c.model.norm_eps == 1e-6);
  CHECK(c.model.rope_theta == 10000.0);
  CHECK(c.training.seq_len == 128);
  CHECK(c.training.local_batch_size == 4);
  CHECK(c.training.dtype == DType::fp16);
  CHECK(c.training.activation_checkpointing == ActivationCheckpointing::selective);
}

TEST_CASE("ffn_dim from ffn_dim_multiplier and multiple_of", "[config]") {
  const Config c = load(R"(
model: {dim: 4096, n_layers: 1, n_heads: 32, n_kv_heads: 8, vocab_size: 10, ffn_dim_multiplier: 1.3, multiple_of: 1024}
)");
  CHECK(c.model.ffn_dim == 14336);
  // multiple_of alone: multiplier 1 (torchtitan's None). 4*4096 = 16384; int(32768/3) = 10922; up to 1024: 11264.
  CHECK(load("model: {dim: 4096, n_layers: 1, n_heads: 32, vocab_size: 10, multiple_of: 1024}").model.ffn_dim == 11264);
}

TEST_CASE("a preset with overrides", "[config]") {
  SECTION("explicit keys override, the name says so") {
    const Config c = load("model: {preset: llama3-8b, n_layers: 2, vocab_size: 32000}");
    CHECK(c.model.n_layers == 2);
    CHECK(c.model.vocab_size == 32000);
    CHECK(c.model.dim == 4096);
    CHECK(c.model.ffn_dim == 14336);
    CHECK(c.model.name == "llama3-8b (modified)");
  }
  SECTION("a new dim re-derives ffn_dim with the preset's rule") {
    // 4*2048 = 8192; int(16384/3) = 5461; int(1.3*5461) = int(7099.3) = 7099; up to 1024: 7168.
    CHECK(load("model: {preset: llama3-8b, dim: 2048}").model.ffn_dim == 7168);
  }
  SECTION("an explicit multiplier with the preset's multiple_of") {
    // 4*4096 = 16384; int(32768/3) = 10922; int(1.0*10922) = 10922; up to 1024: 11264.
    CHECK(load("model: {preset: llama3-8b, ffn_dim_multiplier: 1.0}").model.ffn_dim == 11264);
  }
  SECTION("an explicit ffn_dim wins") {
    CHECK(load("model: {preset: llama3-8b, dim: 2048, ffn_dim: 5000}").model.ffn_dim == 5000);
  }
  SECTION("norm_eps alone keeps the preset name, an explicit name wins") {
    CHECK(load("model: {preset: llama3-70b, norm_eps: 1e-6}").model.name == "llama3-70b");
    CHECK(load("model: {preset: llama3-70b, n_layers: 4, name: small70}").model.name == "small70");
  }
}

TEST_CASE("cluster: preset gpu, inline gpu, link overrides", "[config]") {
  const Config c = load(R"(model: {preset: tiny-llama}
cluster:
  nodes: 2
  gpus_per_node: 4
  gpu: h100-sxm
  intra_node: {bandwidth_GBps: 450, latency_us: 2.5}
)");
  CHECK(c.cluster.gpu == "h100-sxm");
  CHECK(c.cluster.gpu_inline.IsNull());  // a default YAML::Node: no inline spec
  CHECK(c.cluster.source == "cfg.yaml:5");
  CHECK(c.cluster.world_size() == 8);
  REQUIRE(c.cluster.intra_node);
  CHECK(c.cluster.intra_node->bandwidth_GBps == 450);
  CHECK(c.cluster.intra_node->latency_us == 2.5);
  CHECK_FALSE(c.cluster.inter_node);

  const Config d = load(R"(model: {preset: tiny-llama}
cluster:
  gpu:
    name: my-gpu
    memory_GiB: 80
)");
  CHECK(d.cluster.gpu.empty());
  REQUIRE(d.cluster.gpu_inline.IsMap());
  CHECK(d.cluster.gpu_inline["name"].Scalar() == "my-gpu");
  CHECK(d.cluster.source == "cfg.yaml:3");
  CHECK(d.cluster.nodes == 1);
  CHECK(d.cluster.gpus_per_node == 8);
}

TEST_CASE("search space: lists, single values and defaults", "[config]") {
  const Config c = load(R"(model: {preset: tiny-llama}
search:
  tp_degrees: [1, 2, 4]
  presets: sequence_parallel
  float8: [none, rowwise]
  async_tp: true
  loss_parallel: [false]
  activation_checkpointing: [none, full]
  local_batch_sizes: 8
  objective: memory
  memory_headroom_gib: 0.5
)");
  CHECK(c.has_search);
  CHECK(c.search.tp_degrees == std::vector<int>{1, 2, 4});
  CHECK(c.search.presets == std::vector<std::string>{"sequence_parallel"});
  CHECK(c.search.float8 == std::vector<Float8Recipe>{Float8Recipe::none, Float8Recipe::rowwise});
  CHECK(c.search.async_tp == std::vector<bool>{true});
  CHECK(c.search.loss_parallel == std::vector<bool>{false});
  CHECK(c.search.activation_checkpointing ==
        std::vector<ActivationCheckpointing>{ActivationCheckpointing::none, ActivationCheckpointing::full});
  CHECK(c.search.local_batch_sizes == std::vector<int64_t>{8});
  CHECK(c.search.objective == Objective::memory);
  CHECK(c.search.memory_headroom_gib == 0.5);

  const Config d = load("model: {preset: tiny-llama}\nsearch: {objective: step_time}\n");
  CHECK(d.has_search);
  CHECK(d.search.tp_degrees.empty());
  CHECK(d.search.float8.size() == 3);
  CHECK(d.search.objective == Objective::step_time);
}

TEST_CASE("search axes list each value once: a repeat would rank one plan twice", "[config]") {
  // tp_degrees: [8, 8, 8] ranked the same plan three times (issue 21).
  CHECK(error_of("model: {preset: tiny-llama}\nsearch:\n  tp_degrees: [8, 8, 8]\n") ==
        "cfg.yaml:3: search.tp_degrees[1]: 8 is listed twice (also search.tp_degrees[0])");
  CHECK(error_of("model: {preset: tiny-llama}\nsearch:\n  presets: [vanilla,\n    vanilla]\n") ==
        "cfg.yaml:4: search.presets[1]: vanilla is listed twice (also search.presets[0])");
  CHECK(error_of("model: {preset: tiny-llama}\nsearch:\n  float8: [none, rowwise, none]\n") ==
        "cfg.yaml:3: search.float8[2]: none is listed twice (also search.float8[0])");
  CHECK(error_of("model: {preset: tiny-llama}\nsearch:\n  async_tp: [true, yes]\n") ==
        "cfg.yaml:3: search.async_tp[1]: yes is listed twice (also search.async_tp[0])");
  for (const char* key :
       {"dp_replicate: [2, 2]", "loss_parallel: [false, false]", "activation_checkpointing: [full, full]",
        "local_batch_sizes: [4, 4]", "plans: [a.yaml, ./a.yaml]"})
    CHECK_THAT(error_of(fmt::format("model: {{preset: tiny-llama}}\nsearch:\n  {}\n", key)),
               Contains("[1]: ") && Contains(" is listed twice (also search."));
  CHECK(error_of("model: {preset: tiny-llama}\nsearch:\n  tp_degrees: [1, 2, 4, 8]\n") == "<no error>");
}

TEST_CASE("search plans resolve relative to the config file", "[config]") {
  TempDir dir;
  std::filesystem::create_directories(dir.path / "sub");
  const std::string path = dir.write(
      "sub/c.yaml", "model: {preset: tiny-llama}\nsearch: {presets: [], plans: [p.yaml, ../q.yaml, /abs/r.yaml]}\n");
  const Config c = load_config(path);
  CHECK(c.path == path);
  REQUIRE(c.search.plan_files.size() == 3);
  CHECK(c.search.plan_files[0] == (dir.path / "sub" / "p.yaml").lexically_normal().string());
  CHECK(c.search.plan_files[1] == (dir.path / "q.yaml").lexically_normal().string());
  CHECK(c.search.plan_files[2] == "/abs/r.yaml");
  CHECK(c.search.presets.empty());
}

TEST_CASE("the example configs load", "[config][examples]") {
  const Config big = test::example_config("llama3-8b-h100.yaml");
  CHECK(big.model.name == "llama3-8b");
  CHECK(big.model.total_parameters() == 8'030'261'248);
  CHECK(big.cluster.gpu == "h100-sxm");
  CHECK(big.cluster.world_size() == 8);
  CHECK(big.training.dtype == DType::bf16);
  CHECK(big.has_search);

  for (const char* name : {"tiny-llama.yaml", "tiny-gpt.yaml"}) {
    const Config c = test::example_config(name);
    const bool gpt = std::string(name) == "tiny-gpt.yaml";
    Model m;
    REQUIRE(model_preset(gpt ? "tiny-gpt" : "tiny-llama", m));
    CHECK(c.model.dim == m.dim);
    CHECK(c.model.n_layers == m.n_layers);
    CHECK(c.model.n_heads == m.n_heads);
    CHECK(c.model.n_kv_heads == m.n_kv_heads);
    CHECK(c.model.ffn_dim == m.ffn_dim);
    CHECK(c.model.vocab_size == m.vocab_size);
    CHECK(c.model.mlp == m.mlp);
    CHECK(c.model.norm == m.norm);
    CHECK(c.training.seq_len == 32);
    CHECK(c.training.local_batch_size == 2);
    CHECK(c.training.dtype == DType::fp32);
    CHECK(c.cluster.gpu == "h100-sxm");
    CHECK(c.cluster.world_size() == 4);
  }
}

TEST_CASE("config errors name file, line and key", "[config][errors]") {
  SECTION("unknown keys at every level, listing the allowed ones") {
    CHECK_THAT(error_of("model: {preset: tiny-llama}\nmodle: 1\n"),
               Contains("cfg.yaml:2: modle: unknown key; expected one of model, training, cluster, search"));
    CHECK_THAT(error_of("model:\n  preset: tiny-llama\n  layers: 3\n"),
               Contains("cfg.yaml:3: model.layers: unknown key; expected one of preset,"));
    CHECK_THAT(error_of("model: {preset: tiny-llama}\ntraining:\n  seqlen: 3\n"),
               Contains("cfg.yaml:3: training.seqlen: unknown key"));
    CHECK_THAT(error_of("model: {preset: tiny-llama}\ncluster:\n  gpu: x\n  intra_node: {bw: 1}\n"),
               Contains("cfg.yaml:4: cluster.intra_node.bw: unknown key; expected one of bandwidth_GBps, latency_us"));
    CHECK_THAT(error_of("model: {preset: tiny-llama}\nsearch:\n  tp: [1]\n"),
               Contains("cfg.yaml:3: search.tp: unknown key"));
  }
  SECTION("duplicate keys") {
    CHECK_THAT(error_of("model:\n  preset: tiny-llama\n  dim: 64\n  dim: 32\n"),
               Contains("cfg.yaml:4: model.dim: duplicate key"));
  }
  SECTION("wrong types") {
    CHECK_THAT(error_of("model:\n  preset: tiny-llama\n  n_layers: abc\n"),
               Contains("cfg.yaml:3: model.n_layers: expected an integer in 1..10000, got 'abc'"));
    CHECK_THAT(error_of("model: {preset: tiny-llama}\ntraining:\n  seq_len: 1.5\n"),
               Contains("cfg.yaml:3: training.seq_len: expected an integer in 1..16777216, got '1.5'"));
    CHECK_THAT(error_of("model: {preset: tiny-llama, norm_eps: small}"),
               Contains("cfg.yaml:1: model.norm_eps: expected a number in (0, 1], got 'small'"));
    CHECK_THAT(error_of("model: {preset: tiny-llama, dim: [64]}"),
               Contains("cfg.yaml:1: model.dim: expected an integer in 1..1048576, got a list"));
    // An empty value is reported on its key's line (yaml-cpp marks it where the next token starts).
    CHECK_THAT(error_of("model:\n  preset: tiny-llama\n  n_layers:\n"),
               Contains("cfg.yaml:3: model.n_layers: expected an integer in 1..10000, got nothing"));
    CHECK_THAT(error_of("model:\n  preset: tiny-llama\ncluster:\n  gpu:\n  nodes: 1\n"),
               Contains("cfg.yaml:4: cluster.gpu: expected a GPU preset name or an inline spec map, got nothing"));
    CHECK_THAT(error_of("model: tiny-llama\n"), Contains("cfg.yaml:1: model: expected a map, got 'tiny-llama'"));
    CHECK_THAT(error_of("model: {preset: tiny-llama}\nsearch: {async_tp: [true, maybe]}\n"),
               Contains("cfg.yaml:2: search.async_tp[1]: expected true or false, got 'maybe'"));
    CHECK_THAT(error_of("model: {preset: tiny-llama}\nsearch: {tp_degrees: []}\n"),
               Contains("cfg.yaml:2: search.tp_degrees: expected a non-empty list"));
  }
  SECTION("zero and negative dims") {
    CHECK_THAT(error_of("model: {preset: tiny-llama, dim: 0}"),
               Contains("cfg.yaml:1: model.dim: expected an integer in 1..1048576, got '0'"));
    CHECK_THAT(error_of("model:\n  preset: tiny-llama\n  n_heads: -4\n"),
               Contains("cfg.yaml:3: model.n_heads: expected an integer in 1..65536, got '-4'"));
    CHECK_THAT(error_of("model: {preset: tiny-llama}\ncluster: {gpu: h100-sxm, nodes: 0}\n"),
               Contains("cfg.yaml:2: cluster.nodes: expected an integer in 1..65536, got '0'"));
  }
  SECTION("attention shapes") {
    CHECK_THAT(error_of("model:\n  preset: tiny-llama\n  n_kv_heads: 3\n"),
               Contains("cfg.yaml:3: model.n_kv_heads: expected a divisor of n_heads (8), got 3"));
    CHECK_THAT(error_of("model:\n  preset: tiny-llama\n  n_heads: 8\n  n_kv_heads: 16\n"),
               Contains("cfg.yaml:4: model.n_kv_heads: expected a divisor of n_heads (8), got 16"));
    CHECK_THAT(error_of("model:\n  preset: tiny-llama\n  dim: 66\n"),
               Contains("cfg.yaml:3: model.dim: expected a multiple of n_heads (8), got 66"));
  }
  SECTION("missing dims without a preset") {
    CHECK_THAT(error_of("training: {seq_len: 8}\nmodel:\n  n_layers: 2\n"),
               Contains("cfg.yaml:2: model.dim: missing; give it or a model.preset (one of llama3-8b"));
    CHECK_THAT(error_of("model: {dim: 64, n_layers: 2, n_heads: 4, vocab_size: 8}"),
               Contains("cfg.yaml:1: model.ffn_dim: missing"));
    CHECK_THAT(error_of("training: {seq_len: 8}\n"), Contains("cfg.yaml: model: missing"));
  }
  SECTION("ffn_dim given twice") {
    CHECK_THAT(error_of("model:\n  preset: llama3-8b\n  ffn_dim: 100\n  multiple_of: 8\n"),
               Contains("cfg.yaml:3: model.ffn_dim: give either ffn_dim or ffn_dim_multiplier/multiple_of"));
  }
  SECTION("unknown model preset lists the known ones") {
    CHECK_THAT(error_of("\nmodel: {preset: llama3-7b}"),
               Contains("cfg.yaml:2: model.preset: unknown preset 'llama3-7b'; expected one of llama3-8b, "
                        "llama3-70b, llama3-405b"));
  }
  SECTION("enumerations") {
    CHECK_THAT(error_of("model: {preset: tiny-llama}\ntraining: {dtype: fp8_e4m3}\n"),
               Contains("cfg.yaml:2: training.dtype: expected one of bf16, fp16, fp32, got 'fp8_e4m3'"));
    CHECK_THAT(error_of("model: {preset: tiny-llama}\ntraining: {activation_checkpointing: some}\n"),
               Contains("cfg.yaml:2: training.activation_checkpointing: expected one of none, selective, full"));
    CHECK_THAT(error_of("model: {preset: tiny-llama, mlp: relu}"),
               Contains("cfg.yaml:1: model.mlp: expected one of swiglu, gelu, got 'relu'"));
    CHECK_THAT(error_of("model: {preset: tiny-llama}\nsearch:\n  presets: [vanilla, megatron]\n"),
               Contains("cfg.yaml:3: search.presets[1]: expected one of vanilla, sequence_parallel, got 'megatron'"));
    CHECK_THAT(error_of("model: {preset: tiny-llama}\nsearch:\n  float8: [none, delayed]\n"),
               Contains("cfg.yaml:3: search.float8[1]: expected one of none, tensorwise, rowwise, got 'delayed'"));
    CHECK_THAT(error_of("model: {preset: tiny-llama}\nsearch:\n  objective: mfu\n"),
               Contains("cfg.yaml:3: search.objective: expected one of tokens_per_second, step_time, memory"));
  }
  SECTION("cluster") {
    CHECK_THAT(error_of("model: {preset: tiny-llama}\ncluster:\n  nodes: 1\n"),
               Contains("cfg.yaml:2: cluster.gpu: missing"));
    CHECK_THAT(error_of("model: {preset: tiny-llama}\ncluster:\n  gpu: [a, b]\n"),
               Contains("cfg.yaml:3: cluster.gpu: expected a GPU preset name or an inline spec map, got a list"));
    CHECK_THAT(error_of("model: {preset: tiny-llama}\ncluster:\n  gpu: x\n  inter_node: {bandwidth_GBps: 50}\n"),
               Contains("cfg.yaml:4: cluster.inter_node.latency_us: missing"));
    CHECK_THAT(error_of("model: {preset: tiny-llama}\ncluster:\n  gpu: x\n  inter_node: {bandwidth_GBps: 0, "
                        "latency_us: 1}\n"),
               Contains("cfg.yaml:4: cluster.inter_node.bandwidth_GBps: expected a number in (0, 1000000], got '0'"));
  }
  SECTION("nothing to search") {
    CHECK_THAT(error_of("model: {preset: tiny-llama}\nsearch:\n  presets: []\n"),
               Contains("cfg.yaml:3: search.presets: nothing to search"));
  }
  SECTION("not a config at all") {
    CHECK_THAT(error_of(""), Contains("cfg.yaml: expected a map with keys model, training, cluster, search"));
    CHECK_THAT(error_of("- model\n"), Contains("cfg.yaml:1: expected a map"));
  }
}

TEST_CASE("YAML syntax errors become tptune::Error with the line", "[config][errors]") {
  // yaml-cpp notices the unclosed flow sequence at the end of the text, line 3.
  CHECK_THAT(error_of("model:\n  dim: [1, 2\n"), Contains("cfg.yaml:3: invalid YAML: end of sequence flow not found"));
  CHECK_THAT(error_of("model:\n  - a\n b: 1\n"), Contains("cfg.yaml:3: invalid YAML"));
}

TEST_CASE("a missing config file", "[config][errors]") {
  CHECK_THROWS_WITH(load_config("no/such/x.yaml"), "no/such/x.yaml: no such file (expected a config YAML file)");
  TempDir dir;
  const std::string path = dir.write("bad.yaml", "model: {preset: tiny-llama}\ntraining: {seq_len: 0}\n");
  CHECK_THROWS_WITH(load_config(path), Contains(path + ":2: training.seq_len: expected an integer in 1..16777216"));
}

TEST_CASE("enum names round-trip through their parsers", "[config]") {
  for (auto a : {ActivationCheckpointing::none, ActivationCheckpointing::selective, ActivationCheckpointing::full})
    CHECK(parse_activation_checkpointing(to_string(a), "x") == a);
  for (auto f : {Float8Recipe::none, Float8Recipe::tensorwise, Float8Recipe::rowwise})
    CHECK(parse_float8(to_string(f), "x") == f);
  CHECK_THROWS_WITH(parse_float8("fp8", "--float8"),
                    "--float8: expected one of none, tensorwise, rowwise, rowwise_with_gw_hp, got 'fp8'");
  CHECK_THROWS_WITH(parse_activation_checkpointing("op", "--ac"),
                    "--ac: expected one of none, selective, full, got 'op'");
  CHECK(to_string(Objective::tokens_per_second) == "tokens_per_second");
  CHECK(to_string(Objective::step_time) == "step_time");
  CHECK(to_string(Objective::memory) == "memory");
}

TEST_CASE("training.sdpa_backend: auto by GPU architecture and torch version, as torch and torchtitan choose",
          "[config][sdpa]") {
  // The resolution table of plans/language/backends/sdpa_backend.h, hand-written: (architecture, torch) -> the kernel.
  auto v = [](const char* s) { return parse_torch_version(s); };
  auto at = [&](const char* arch, std::optional<TorchVersion> t) {
    return resolve_sdpa_backend(SdpaBackend::auto_, SdpaBackend::auto_, t, arch);
  };
  // Hopper: flash first but for 2.5.0 (cuDNN first, #138522 reverted it in 2.5.1), 2.9 (#162073) and 2.11 on.
  CHECK(at("hopper", v("2.4")) == SdpaBackend::flash);
  CHECK(at("hopper", v("2.5.0")) == SdpaBackend::cudnn);
  CHECK(at("hopper", v("2.5.1")) == SdpaBackend::flash);
  CHECK(at("hopper", v("2.6")) == SdpaBackend::flash);  // the December 2024 record (pytorch/pytorch#142132)
  CHECK(at("hopper", v("2.8")) == SdpaBackend::flash);  // the June 2025 record
  CHECK(at("hopper", v("2.9.1")) == SdpaBackend::cudnn);
  CHECK(at("hopper", v("2.10")) == SdpaBackend::flash);
  CHECK(at("hopper", v("2.11")) == SdpaBackend::cudnn);  // our H200 run: torch 2.11.0 ran cuDNN
  CHECK(at("hopper", v("2.14")) == SdpaBackend::cudnn);
  CHECK(at("hopper", std::nullopt) == SdpaBackend::cudnn);  // no torch_version: the current torch
  // Blackwell: cuDNN (torchtitan#1196 on B200; torch from 2.9). Ampere: flash at every version.
  CHECK(at("blackwell", v("2.7")) == SdpaBackend::cudnn);
  CHECK(at("blackwell", std::nullopt) == SdpaBackend::cudnn);
  CHECK(at("ampere", v("2.5.0")) == SdpaBackend::flash);
  CHECK(at("ampere", std::nullopt) == SdpaBackend::flash);
  CHECK(at("", std::nullopt) == SdpaBackend::flash);
  // The cpu device runs tp-run's kernel (auto_), and refuses an explicit backend with the key's place.
  CHECK(at("cpu", std::nullopt) == SdpaBackend::auto_);
  CHECK_THROWS_WITH(resolve_sdpa_backend(SdpaBackend::cudnn, SdpaBackend::auto_, std::nullopt, "cpu",
                                         "cfg.yaml:3: training.sdpa_backend"),
                    "cfg.yaml:3: training.sdpa_backend: cudnn names a torch SDPA kernel, but the cpu device runs "
                    "tp-run's own attention kernel; remove the key or set auto");
  // An explicit backend is what runs, whatever the torch.
  CHECK(resolve_sdpa_backend(SdpaBackend::flex, SdpaBackend::auto_, v("2.11"), "hopper") == SdpaBackend::flex);
  CHECK(sdpa_backend_reason(SdpaBackend::auto_, SdpaBackend::auto_, v("2.6"), "hopper") ==
        "auto: hopper, torch 2.6: flash first");
  CHECK(sdpa_backend_reason(SdpaBackend::auto_, SdpaBackend::auto_, std::nullopt, "hopper") ==
        "auto: hopper, torch 2.11 or later (no torch_version): cuDNN first");
  // A framework that fixes the kernel (torchtitan 0.3's models: FlexAttention) wins over torch's choice on every GPU,
  // an explicit setting over the framework, and the cpu device runs its own kernel whatever the framework.
  CHECK(resolve_sdpa_backend(SdpaBackend::auto_, SdpaBackend::flex, v("2.6"), "hopper") == SdpaBackend::flex);
  CHECK(resolve_sdpa_backend(SdpaBackend::auto_, SdpaBackend::flex, std::nullopt, "ampere") == SdpaBackend::flex);
  CHECK(resolve_sdpa_backend(SdpaBackend::cudnn, SdpaBackend::flex, std::nullopt, "hopper") == SdpaBackend::cudnn);
  CHECK(resolve_sdpa_backend(SdpaBackend::auto_, SdpaBackend::flex, std::nullopt, "cpu") == SdpaBackend::auto_);
  CHECK(sdpa_backend_reason(SdpaBackend::auto_, SdpaBackend::flex, std::nullopt, "hopper") ==
        "auto: torchtitan 0.3's models run FlexAttention (model_registry's attn_backend \"flex\")");
}

TEST_CASE("training.sdpa_backend and torch_version read from the config, bad values refused on one line",
          "[config][sdpa][errors]") {
  const Config c = load("model: {preset: tiny-llama}\ntraining:\n  sdpa_backend: flex\n  torch_version: \"2.5.1\"\n");
  CHECK(c.training.sdpa_backend == SdpaBackend::flex);
  CHECK(c.training.sdpa_backend_at == "cfg.yaml:3: training.sdpa_backend");
  REQUIRE(c.training.torch_version);
  CHECK(*c.training.torch_version == TorchVersion{2, 5, 1});
  CHECK(load("model: {preset: tiny-llama}\n").training.sdpa_backend == SdpaBackend::auto_);
  CHECK(!load("model: {preset: tiny-llama}\n").training.torch_version);
  CHECK_THAT(error_of("model: {preset: tiny-llama}\ntraining: {sdpa_backend: fa3}\n"),
             Contains("cfg.yaml:2: training.sdpa_backend: expected one of auto, flash, cudnn, efficient, flex"));
  CHECK_THAT(error_of("model: {preset: tiny-llama}\ntraining:\n  torch_version: \"2.x\\nb\"\n"),
             Contains("cfg.yaml:3: training.torch_version: expected a torch release as MAJOR.MINOR or "
                      "MAJOR.MINOR.PATCH (e.g. \"2.11\"), got"));
  const std::string e = error_of("model: {preset: tiny-llama}\ntraining:\n  torch_version: \"2.x\\nb\"\n");
  CHECK(e.find('\n') == std::string::npos);
  CHECK(parse_torch_version("2") == TorchVersion{2, 0, 0});
  for (const char* bad : {"2.", ".5", "2.5.1.0", "2.55555", "v2.5", "", "2..5"}) CHECK(!parse_torch_version(bad));
}
