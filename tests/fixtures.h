#pragma once
// Test fixtures: plans, models, configs and clusters, built with designated initialisers over the plan's toggles
// (PlanToggles, plans/language/plan_toggles.h) instead of positional arguments, so that a call says what it sets:
//
//   Plan p = make_plan("sequence_parallel", {.tp_degree = 4, .async_tp = true});
//   Program q = lower_preset("vanilla", {.tp_degree = 8, .loss_parallel = true}, small_model(), 256);
//   Training t{.seq_len = 32};                       // Training is an aggregate too
//
// Designated initialisers follow PlanToggles' field order (plans/language/plan_toggles.h); a toggle left out keeps its
// default.
//
// The sim fixtures (clusters) are inline functions over sim/: a test binary that does not call them needs no sim
// library.

#include <fmt/format.h>

#include <string>

#include "plans/language/config.h"
#include "plans/language/plan.h"
#include "plans/language/plan_toggles.h"
#include "plans/lower/lower.h"
#include "plans/model/model.h"
#include "plans/util/error.h"
#include "sim/cluster_spec.h"
#include "sim/gpu_spec.h"

namespace tptune::test {

// A Plan with the toggles `t`, no module entries and `framework` (preset_plan() applies its data): the base a preset is
// derived from, or a plan whose modules the test sets.
inline Plan toggles_plan(PlanToggles t, Framework framework = Framework::dtensor) {
  Plan p;
  p.toggles() = t;
  p.framework = framework;
  return p;
}

// A preset's plan ("vanilla" | "sequence_parallel", plans/language/plan.h preset_plan()) with the toggles `t`, of
// `framework`.
inline Plan make_plan(const std::string& preset, PlanToggles t = {}, Framework framework = Framework::dtensor) {
  return preset_plan(preset, toggles_plan(t, framework));
}

// A model preset by name (plans/model/model.h), e.g. "llama3-8b", "tiny-llama"; tptune::Error when there is none.
inline Model model_named(const std::string& preset) {
  Model m;
  if (!model_preset(preset, m)) throw Error("tests/fixtures.h: no model preset " + preset);
  return m;
}

inline Model llama3_8b() { return model_named("llama3-8b"); }

// A small Llama-like model for simulator tests: dim 512, 16 heads of 32 (8 kv heads), ffn 1024, vocab 1024.
// examples/tiny-llama.yaml's dims: dim 64, 2 layers, 8 heads / 4 kv (head_dim 8), ffn 128, vocab 256.
inline Model tiny_llama_model() {
  Model m;
  m.name = "tiny";
  m.dim = 64;
  m.n_layers = 2;
  m.n_heads = 8;
  m.n_kv_heads = 4;
  m.ffn_dim = 128;
  m.vocab_size = 256;
  return m;
}

// tiny-llama's dims with a MoE block: 8 routed experts of ffn 32, top 2, a shared expert of ffn 64.
inline Model tiny_moe_model() {
  Model m = tiny_llama_model();
  m.name = "tiny-moe";
  m.moe.experts = 8;
  m.moe.top_k = 2;
  m.moe.expert_ffn_dim = 32;
  m.moe.shared_ffn_dim = 64;
  return m;
}

inline Model small_model(int layers = 4) {
  Model m;
  m.name = "small";
  m.dim = 512;
  m.n_layers = layers;
  m.n_heads = 16;
  m.n_kv_heads = 8;
  m.ffn_dim = 1024;
  m.vocab_size = 1024;
  return m;
}

// lower() of a preset's plan with the toggles `t` on model `m` (Llama3-8B by default) at `seq` tokens per sequence.
inline Program lower_preset(const std::string& preset, PlanToggles t, Model m = llama3_8b(), int64_t seq = 8192) {
  return lower(m, Training{.seq_len = seq}, make_plan(preset, t));
}

// An example config of the repository: its path, and the config loaded.
inline std::string example_path(const std::string& name) {
  return std::string(TPTUNE_SOURCE_DIR) + "/examples/" + name;
}
inline Config example_config(const std::string& name) { return load_config(example_path(name)); }

// lower() of an example config (examples/NAME) with a preset's plan at the toggles `t`, the plan's local_batch_size and
// activation_checkpointing taken from the config's training section.
inline Program lower_example(const std::string& name, const std::string& preset, PlanToggles t = {}) {
  const Config cfg = example_config(name);
  t.local_batch_size = cfg.training.local_batch_size;
  t.activation_checkpointing = cfg.training.activation_checkpointing;
  return lower(cfg.model, cfg.training, make_plan(preset, t));
}

// A config as YAML text, so that it goes through the loader (defaults, checks, errors with file:line) as a user's file
// does. The text is four lines and the search section's block, if any:
//   model: MODEL
//   training: {seq_len: SEQ_LEN, local_batch_size: 1}
//   cluster: {gpu: GPU, nodes: NODES, gpus_per_node: GPUS_PER_NODE}
//   search: SEARCH
// `model` and `search` are YAML flow maps ({preset: llama3-8b}), or `search` a block starting with a newline.
struct ConfigText {
  std::string model = "{dim: 512, n_layers: 2, n_heads: 8, n_kv_heads: 8, ffn_dim: 1536, vocab_size: 1024}";
  int64_t seq_len = 1024;
  std::string gpu = "h100-sxm";
  int nodes = 1;
  int gpus_per_node = 8;
  std::string search = "{}";
  std::string file = "config.yaml";  // the name errors give the config
};

inline Config make_config(const ConfigText& c) {
  return load_config_string(fmt::format("model: {}\ntraining: {{seq_len: {}, local_batch_size: 1}}\n"
                                        "cluster: {{gpu: {}, nodes: {}, gpus_per_node: {}}}\nsearch: {}\n",
                                        c.model, c.seq_len, c.gpu, c.nodes, c.gpus_per_node, c.search),
                            c.file);
}

// The small config (ConfigText's defaults: a 2-layer model, dim 512, 8 heads, ffn 1536, vocab 1024, seq 1024) on
// `nodes` x `gpus_per_node` H100s with the given `search:` section, as if loaded from `file`.
inline Config small_config(const std::string& file, int nodes, int gpus_per_node, const std::string& search) {
  return make_config({.nodes = nodes, .gpus_per_node = gpus_per_node, .search = search, .file = file});
}

// `nodes` x `gpus_per_node` GPUs of a preset ("h100-sxm", "a100-sxm", ...), with the preset's links.
inline ClusterSpec cluster_of(const std::string& gpu, int nodes, int gpus_per_node = 8) {
  return make_cluster(gpu_preset(gpu), nodes, gpus_per_node);
}

// The expert-parallel search's exactness space (issue 42 item 5): tiny_moe_model() on one node of 8 H100s at seq 32,
// tp 1, 2, 4 x dp_replicate 1, 2 x cp 1, 2 x ep by default (1, 2, 4, 8) x the sequence-parallel preset x float8
// none, rowwise, tensorwise x async TP off and on x AC none and full x local batch 1, 2, 3 (1,728 candidates, most
// pruned statically: float8 tensorwise and async TP with MoE, ep 8 over a dp_replicate 2 mesh of 4, DDP at dp_shard
// 1); `imbalance` the routing's (training.moe_imbalance).
inline Config tiny_moe_search_config(double imbalance = 1.0) {
  Config cfg = example_config("tiny-llama.yaml");
  cfg.model = tiny_moe_model();
  cfg.cluster.gpus_per_node = 8;
  cfg.training.moe_imbalance = imbalance;
  cfg.training.dtype = DType::bf16;  // (float8 casts from bf16)
  SearchSpace& s = cfg.search;
  s.tp_degrees = {1, 2, 4};
  s.dp_replicate = {1, 2};
  s.cp_degrees = {1, 2};
  s.ep_degrees = {};
  s.presets = {"sequence_parallel"};
  s.float8 = {Float8Recipe::none, Float8Recipe::rowwise, Float8Recipe::tensorwise};
  s.async_tp = {false, true};
  s.loss_parallel = {true};
  s.activation_checkpointing = {ActivationCheckpointing::none, ActivationCheckpointing::full};
  s.local_batch_sizes = {1, 2, 3};
  return cfg;
}

}  // namespace tptune::test
