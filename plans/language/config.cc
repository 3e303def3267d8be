#include "plans/language/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "plans/language/backends/spmd_backend.h"
#include "plans/language/config_node.h"
#include "plans/language/nvlink_domain.h"
#include "plans/language/plan.h"
#include "plans/model/hf_config.h"
#include "plans/util/enum_names.h"
#include "plans/util/error.h"
#include "plans/util/limits.h"
#include "plans/util/yaml_util.h"

namespace tptune {

// ActivationCheckpointing's enumerators, in declaration order.
constexpr std::string_view kActivationCheckpointingNames[] = {"none", "selective", "full"};
static_assert(std::size(kActivationCheckpointingNames) == enum_count(ActivationCheckpointing::full));

std::string_view to_string(ActivationCheckpointing a) { return name_of(kActivationCheckpointingNames, a); }

ActivationCheckpointing parse_activation_checkpointing(std::string_view s, const std::string& where) {
  return parse_name<ActivationCheckpointing>(kActivationCheckpointingNames, s, where);
}

// Float8Recipe's enumerators, in declaration order.
constexpr std::string_view kFloat8RecipeNames[] = {"none", "tensorwise", "rowwise", "rowwise_with_gw_hp"};
static_assert(std::size(kFloat8RecipeNames) == enum_count(Float8Recipe::rowwise_with_gw_hp));

std::string_view to_string(Float8Recipe f) { return name_of(kFloat8RecipeNames, f); }

std::vector<Float8Recipe> search_float8_recipes(bool torchtitan_0_3) {
  if (torchtitan_0_3) return {Float8Recipe::none, Float8Recipe::rowwise, Float8Recipe::rowwise_with_gw_hp};
  return {Float8Recipe::none, Float8Recipe::tensorwise, Float8Recipe::rowwise};
}

Float8Recipe parse_float8(std::string_view s, const std::string& where) {
  return parse_name<Float8Recipe>(kFloat8RecipeNames, s, where);
}

// Objective's enumerators, in declaration order.
constexpr std::string_view kObjectiveNames[] = {"tokens_per_second", "step_time", "memory", "cost_per_token"};
static_assert(std::size(kObjectiveNames) == enum_count(Objective::cost_per_token));

std::string_view to_string(Objective o) { return name_of(kObjectiveNames, o); }

namespace {

using yaml::YamlDoc;

bool has(const YAML::Node& map, const char* key) { return map[key].IsDefined(); }

// The key node of `key` in `map` (its mark is the line the user wrote the key on), or an undefined node.
YAML::Node key_node(const YAML::Node& map, std::string_view key) {
  for (auto it = map.begin(); it != map.end(); ++it)
    if (it->first.IsScalar() && it->first.Scalar() == key) return it->first;
  return YAML::Node(YAML::NodeType::Undefined);
}

// The node to point at for an error about `key` of `map`: its key when present, else the map's own key `self`.
// A search axis lists each value once: a repeated value would enumerate (and rank) the same candidates again.
// Throws "<file>:<line>: search.tp_degrees[2]: 8 is listed twice (also search.tp_degrees[0])" for the first repeat.
// `values` is what doc.list() read from `l` (a scalar `l` is a one-element list).
template <class T>
void refuse_repeats(const YamlDoc& doc, const YAML::Node& l, const std::string& key, const std::vector<T>& values) {
  if (!l.IsSequence()) return;
  std::map<T, size_t> first;  // value -> its first index
  for (size_t i = 0; i < values.size(); ++i)
    if (auto [it, fresh] = first.emplace(values[i], i); !fresh)
      doc.fail_msg(l[i], fmt::format("{}[{}]", key, i),
                   fmt::format("{} is listed twice (also {}[{}])", yaml::shown(l[i].Scalar()), key, it->second));
}

YAML::Node locate(const YAML::Node& map, std::string_view key, const YAML::Node& self) {
  YAML::Node k = key_node(map, key);
  return k.IsDefined() ? k : self;
}

// model.gqa, beside a preset, explicit dimensions or an hf_config alike (the attention's kernel path, not its shapes).
void read_gqa(const YamlDoc& doc, const YAML::Node& n, Model& m) {
  if (has(n, "gqa"))
    m.gqa = doc.choice(n["gqa"], "model.gqa", {"enable_gqa", "repeat_kv"}) == "repeat_kv" ? Gqa::repeat_kv
                                                                                          : Gqa::enable_gqa;
}

// model: {hf_config: PATH [, name: NAME] [, gqa: ...]}: a transformers config.json, relative to the config file
// (plans/model/hf_config.h). `hf_text`, when given, is that file's text as a run recorded it (a profile's
// program.hf_config_json): read in place of the file, which need not exist here.
Model read_hf_model(const YamlDoc& doc, const YAML::Node& n, const std::filesystem::path& base_dir,
                    const std::optional<std::string>& hf_text) {
  doc.check_map(n, "model", {"hf_config", "name", "gqa"});
  const std::filesystem::path p(doc.string(n["hf_config"], "model.hf_config"));
  const std::filesystem::path file = p.is_absolute() || base_dir.empty() ? p : base_dir / p;
  std::error_code ec;
  if (!hf_text && !std::filesystem::is_regular_file(file, ec))
    doc.fail_msg(n["hf_config"], "model.hf_config",
                 fmt::format("cannot open '{}' (a transformers config.json, relative to this file)",
                             yaml::shown(file.string(), 200)));
  Model m = hf_text ? parse_hf_config(*hf_text, fmt::format("{} (the recorded {})", doc.file(), file.string()))
                    : load_hf_config(file.string());
  if (has(n, "name")) m.name = doc.string(n["name"], "model.name");
  read_gqa(doc, n, m);
  return m;
}

// model.moe, model.mla and model.qk_norm (plans/model/model.h MoeSpec, MlaSpec): read and counted; read_model refuses
// them after (the lowering does not plan them yet).
void read_moe(const YamlDoc& doc, const YAML::Node& n, Model& m) {
  doc.check_map(n, "model.moe",
                {"experts", "top_k", "expert_ffn_dim", "shared_ffn_dim", "shared_gate", "dense_layers", "score_func",
                 "route_norm", "route_scale", "expert_groups", "limited_groups"});
  MoeSpec& e = m.moe;
  for (const char* key : {"experts", "top_k", "expert_ffn_dim"})
    if (!has(n, key)) doc.fail_msg(n, fmt::format("model.moe.{}", key), "missing");
  e.experts = doc.integer_in(n["experts"], "model.moe.experts", limits::experts);
  e.top_k = doc.integer_in(n["top_k"], "model.moe.top_k", {1, e.experts});
  e.expert_ffn_dim = doc.integer_in(n["expert_ffn_dim"], "model.moe.expert_ffn_dim", limits::ffn_dim);
  if (has(n, "shared_ffn_dim"))
    e.shared_ffn_dim = doc.integer_in(n["shared_ffn_dim"], "model.moe.shared_ffn_dim", {0, limits::ffn_dim.hi});
  if (has(n, "shared_gate")) e.shared_gate = doc.boolean(n["shared_gate"], "model.moe.shared_gate");
  if (e.shared_gate && e.shared_ffn_dim == 0)
    doc.fail_msg(n["shared_gate"], "model.moe.shared_gate", "true needs a shared expert (model.moe.shared_ffn_dim)");
  if (has(n, "dense_layers"))
    e.dense_layers = doc.integer_in(n["dense_layers"], "model.moe.dense_layers", {0, m.n_layers});
  if (has(n, "score_func"))
    e.score = doc.choice(n["score_func"], "model.moe.score_func", {"softmax", "sigmoid"}) == "sigmoid"
                  ? RouterScore::sigmoid
                  : RouterScore::softmax;
  if (has(n, "route_norm")) e.route_norm = doc.boolean(n["route_norm"], "model.moe.route_norm");
  if (has(n, "route_scale"))
    e.route_scale = doc.real_in(n["route_scale"], "model.moe.route_scale", limits::route_scale);
  if (has(n, "expert_groups") != has(n, "limited_groups"))
    doc.fail_msg(n, has(n, "expert_groups") ? "model.moe.limited_groups" : "model.moe.expert_groups",
                 "missing; node-limited routing needs expert_groups and limited_groups");
  if (has(n, "expert_groups")) {
    e.expert_groups = doc.integer_in(n["expert_groups"], "model.moe.expert_groups", {1, e.experts});
    if (e.experts % e.expert_groups != 0)
      doc.fail_msg(n["expert_groups"], "model.moe.expert_groups",
                   fmt::format("expected a divisor of experts ({}), got {}", e.experts, e.expert_groups));
    e.limited_groups = doc.integer_in(n["limited_groups"], "model.moe.limited_groups", {1, e.expert_groups});
  }
}

void read_mla(const YamlDoc& doc, const YAML::Node& n, Model& m) {
  doc.check_map(n, "model.mla", {"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"});
  MlaSpec& a = m.mla;
  for (const char* key : {"kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"})
    if (!has(n, key)) doc.fail_msg(n, fmt::format("model.mla.{}", key), "missing");
  if (has(n, "q_lora_rank"))
    a.q_lora_rank = doc.integer_in(n["q_lora_rank"], "model.mla.q_lora_rank", {0, limits::dim.hi});
  a.kv_lora_rank = doc.integer_in(n["kv_lora_rank"], "model.mla.kv_lora_rank", limits::dim);
  a.qk_nope_head_dim = doc.integer_in(n["qk_nope_head_dim"], "model.mla.qk_nope_head_dim", limits::head_dim);
  a.qk_rope_head_dim = doc.integer_in(n["qk_rope_head_dim"], "model.mla.qk_rope_head_dim", limits::head_dim);
  a.v_head_dim = doc.integer_in(n["v_head_dim"], "model.mla.v_head_dim", limits::head_dim);
  if (a.qk_rope_head_dim % 2 != 0)
    doc.fail_msg(n["qk_rope_head_dim"], "model.mla.qk_rope_head_dim",
                 fmt::format("expected an even size (rotary embedding rotates pairs), got {}", a.qk_rope_head_dim));
}

Model read_model(const YamlDoc& doc, const YAML::Node& n, const YAML::Node& self, const std::filesystem::path& base_dir,
                 const std::optional<std::string>& hf_text) {
  if (n.IsMap() && has(n, "hf_config")) return read_hf_model(doc, n, base_dir, hf_text);
  if (hf_text)
    doc.fail_msg(self, "model",
                 "a transformers config.json is recorded beside this config, but its model has no "
                 "hf_config");
  doc.check_map(n, "model", {"preset",      "hf_config",  "name",
                             "dim",         "n_layers",   "n_heads",
                             "n_kv_heads",  "ffn_dim",    "ffn_dim_multiplier",
                             "multiple_of", "vocab_size", "mlp",
                             "norm",        "norm_eps",   "rope_theta",
                             "head_dim",    "qkv_bias",   "tie_word_embeddings",
                             "gqa",         "moe",        "mla",
                             "qk_norm"});
  Model m;
  std::string preset;
  if (has(n, "preset")) {
    preset = doc.string(n["preset"], "model.preset");
    if (!model_preset(preset, m))
      doc.fail_msg(n["preset"], "model.preset",
                   fmt::format("unknown preset '{}'; expected one of {}", yaml::shown(preset),
                               fmt::join(model_preset_names(), ", ")));
  } else {
    m.name = "custom";
  }
  const std::string missing_hint =
      fmt::format("missing; give it or a model.preset (one of {})", fmt::join(model_preset_names(), ", "));
  auto dim_key = [&](const char* key, int64_t& field, limits::IntRange range) {
    const std::string k = fmt::format("model.{}", key);
    if (has(n, key))
      field = doc.integer_in(n[key], k, range);
    else if (preset.empty())
      doc.fail_msg(self, k, missing_hint);
  };
  dim_key("dim", m.dim, limits::dim);
  dim_key("n_layers", m.n_layers, limits::n_layers);
  dim_key("n_heads", m.n_heads, limits::n_heads);
  dim_key("vocab_size", m.vocab_size, limits::vocab_size);
  if (has(n, "n_kv_heads"))
    m.n_kv_heads = doc.integer_in(n["n_kv_heads"], "model.n_kv_heads", limits::n_heads);
  else if (preset.empty())
    m.n_kv_heads = m.n_heads;

  // ffn_dim: given, or derived with torchtitan's rule. A preset defined by the rule re-derives it when dim changes.
  const bool has_mult = has(n, "ffn_dim_multiplier"), has_multiple = has(n, "multiple_of");
  double multiplier = 1.0;  // torchtitan's defaults: ffn_dim_multiplier None (x1), multiple_of 256
  int64_t multiple_of = 256;
  const bool preset_rule = !preset.empty() && model_preset_ffn_rule(preset, multiplier, multiple_of);
  if (has(n, "ffn_dim")) {
    if (has_mult || has_multiple)
      doc.fail_msg(key_node(n, "ffn_dim"), "model.ffn_dim",
                   "give either ffn_dim or ffn_dim_multiplier/multiple_of, not both");
    m.ffn_dim = doc.integer_in(n["ffn_dim"], "model.ffn_dim", limits::ffn_dim);
  } else if (has_mult || has_multiple || (preset_rule && has(n, "dim"))) {
    if (has_mult)
      multiplier = doc.real_in(n["ffn_dim_multiplier"], "model.ffn_dim_multiplier", limits::ffn_dim_multiplier);
    if (has_multiple) multiple_of = doc.integer_in(n["multiple_of"], "model.multiple_of", limits::multiple_of);
    m.ffn_dim = torchtitan_ffn_dim(m.dim, multiplier, multiple_of);
    if (m.ffn_dim < limits::ffn_dim.lo || m.ffn_dim > limits::ffn_dim.hi) {
      const char* culprit = has_mult ? "ffn_dim_multiplier" : has_multiple ? "multiple_of" : "dim";
      doc.fail_msg(key_node(n, culprit), fmt::format("model.{}", culprit),
                   fmt::format("gives ffn_dim {} (torchtitan's rule with dim {}, multiplier {}, multiple_of {}); "
                               "expected ffn_dim in {}",
                               m.ffn_dim, m.dim, multiplier, multiple_of, yaml::range_text(limits::ffn_dim)));
    }
  } else if (preset.empty()) {
    doc.fail_msg(self, "model.ffn_dim", "missing; give ffn_dim, or ffn_dim_multiplier and multiple_of");
  }

  if (has(n, "mlp")) m.mlp = doc.choice(n["mlp"], "model.mlp", {"swiglu", "gelu"}) == "gelu" ? Mlp::gelu : Mlp::swiglu;
  if (has(n, "norm"))
    m.norm =
        doc.choice(n["norm"], "model.norm", {"rmsnorm", "layernorm"}) == "layernorm" ? Norm::layernorm : Norm::rmsnorm;
  if (has(n, "norm_eps")) m.norm_eps = doc.real_in(n["norm_eps"], "model.norm_eps", limits::norm_eps);
  if (has(n, "rope_theta")) m.rope_theta = doc.real_in(n["rope_theta"], "model.rope_theta", limits::rope_theta);
  if (has(n, "head_dim")) {
    m.explicit_head_dim = doc.integer_in(n["head_dim"], "model.head_dim", limits::head_dim);
    if (m.explicit_head_dim % 2 != 0)
      doc.fail_msg(n["head_dim"], "model.head_dim",
                   fmt::format("expected an even size (rotary embedding rotates pairs), got {}", m.explicit_head_dim));
  }
  if (has(n, "qkv_bias")) m.qkv_bias = doc.boolean(n["qkv_bias"], "model.qkv_bias");
  if (has(n, "tie_word_embeddings"))
    m.tie_word_embeddings = doc.boolean(n["tie_word_embeddings"], "model.tie_word_embeddings");
  read_gqa(doc, n, m);
  if (has(n, "moe")) read_moe(doc, n["moe"], m);
  if (has(n, "mla")) read_mla(doc, n["mla"], m);
  if (has(n, "qk_norm")) m.qk_norm = doc.boolean(n["qk_norm"], "model.qk_norm");

  if (has(n, "name")) {
    m.name = doc.string(n["name"], "model.name");
  } else if (!preset.empty()) {
    for (const char* k : {"dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim", "ffn_dim_multiplier", "multiple_of",
                          "vocab_size", "mlp", "norm", "head_dim", "qkv_bias"})
      if (has(n, k)) m.name = preset + " (modified)";
  }

  // Attention shapes: heads split dim evenly (unless head_dim is given), and query heads form whole groups over the kv
  // heads.
  if (m.n_heads % m.n_kv_heads != 0)
    doc.fail_msg(locate(n, has(n, "n_kv_heads") ? "n_kv_heads" : "n_heads", self), "model.n_kv_heads",
                 fmt::format("expected a divisor of n_heads ({}), got {}", m.n_heads, m.n_kv_heads));
  if (m.explicit_head_dim == 0 && m.dim % m.n_heads != 0)
    doc.fail_msg(locate(n, has(n, "dim") ? "dim" : "n_heads", self), "model.dim",
                 fmt::format("expected a multiple of n_heads ({}), got {} (or give model.head_dim)", m.n_heads, m.dim));
  if (m.explicit_head_dim == 0 && m.head_dim() % 2 != 0)
    doc.fail_msg(locate(n, has(n, "dim") ? "dim" : "n_heads", self), "model.dim",
                 fmt::format("dim / n_heads = {} / {} = {}: expected an even head_dim (rotary embedding rotates pairs)",
                             m.dim, m.n_heads, m.head_dim()));
  return m;
}

Training read_training(const YamlDoc& doc, const YAML::Node& n) {
  doc.check_map(n, "training",
                {"seq_len", "local_batch_size", "global_batch_size", "dtype", "activation_checkpointing", "compile",
                 "spmd_backend", "sdpa_backend", "torch_version", "moe_imbalance"});
  if (has(n, "spmd_backend")) read_spmd_backend(doc, n["spmd_backend"], "training.spmd_backend");
  Training t;
  if (has(n, "seq_len")) t.seq_len = doc.integer_in(n["seq_len"], "training.seq_len", limits::seq_len);
  if (has(n, "local_batch_size"))
    t.local_batch_size = doc.integer_in(n["local_batch_size"], "training.local_batch_size", limits::local_batch_size);
  if (has(n, "global_batch_size")) {
    // torchtitan's -1 (= local_batch_size x dp degree, one microbatch) is "no key" here.
    t.global_batch_size =
        doc.integer_in(n["global_batch_size"], "training.global_batch_size", limits::global_batch_size);
    t.global_batch_size_at = doc.at(n["global_batch_size"]);
  }
  if (has(n, "dtype"))
    t.dtype = parse_dtype(doc.choice(n["dtype"], "training.dtype", {"bf16", "fp16", "fp32"}),
                          doc.where(n["dtype"], "training.dtype"));
  if (has(n, "activation_checkpointing"))
    t.activation_checkpointing = parse_activation_checkpointing(
        doc.choice(n["activation_checkpointing"], "training.activation_checkpointing", {"none", "selective", "full"}),
        doc.where(n["activation_checkpointing"], "training.activation_checkpointing"));
  if (has(n, "compile")) t.compile = doc.boolean(n["compile"], "training.compile");
  if (has(n, "sdpa_backend")) {
    t.sdpa_backend_at = doc.where(n["sdpa_backend"], "training.sdpa_backend");
    t.sdpa_backend = parse_sdpa_backend(doc.choice(n["sdpa_backend"], "training.sdpa_backend", sdpa_backend_names()),
                                        t.sdpa_backend_at);
  }
  if (has(n, "torch_version")) {
    t.torch_version = parse_torch_version(doc.string(n["torch_version"], "training.torch_version"));
    if (!t.torch_version)
      doc.fail_msg(n["torch_version"], "training.torch_version",
                   "expected a torch release as MAJOR.MINOR or MAJOR.MINOR.PATCH (e.g. \"2.11\"), got " +
                       yaml::shown(doc.string(n["torch_version"], "training.torch_version")));
  }
  if (has(n, "moe_imbalance"))
    t.moe_imbalance = doc.real_in(n["moe_imbalance"], "training.moe_imbalance", limits::moe_imbalance);
  return t;
}

LinkSpec read_link(const YamlDoc& doc, const YAML::Node& n, const YAML::Node& self, const std::string& key) {
  doc.check_map(n, key, {"bandwidth_GBps", "latency_us"});
  LinkSpec l;
  for (const char* k : {"bandwidth_GBps", "latency_us"})
    if (!has(n, k)) doc.fail_msg(self, yaml::join_key(key, k), "missing (an override gives both figures)");
  l.bandwidth_GBps = doc.real_in(n["bandwidth_GBps"], key + ".bandwidth_GBps", limits::bandwidth_GBps);
  l.latency_us = doc.real_in(n["latency_us"], key + ".latency_us", limits::latency_us);
  return l;
}

Cluster read_cluster(const YamlDoc& doc, const YAML::Node& n, const YAML::Node& self) {
  doc.check_map(
      n, "cluster",
      {"gpu", "device", "nodes", "gpus_per_node", "cores_per_node", "nvlink_domain_gpus", "intra_node", "inter_node"});
  Cluster c;
  // `device` is a synonym of `gpu` (a CPU rank is a device too: `device: cpu`); one of them, not both.
  if (has(n, "gpu") && has(n, "device"))
    doc.fail_msg(key_node(n, "device"), "cluster.device", "a synonym of cluster.gpu; give one of them, not both");
  const char* gkey = has(n, "device") ? "device" : "gpu";
  if (!has(n, gkey)) doc.fail_msg(self, "cluster.gpu", "missing; expected a GPU preset name or an inline spec");
  const YAML::Node gpu = n[gkey];
  c.source = doc.at(key_node(n, gkey), gpu);
  if (gpu.IsMap())
    c.gpu_inline = gpu;  // keeps its marks, so the simulator can point at lines of the inline spec
  else if (yaml::is_scalar(gpu) && !gpu.Scalar().empty())
    c.gpu = gpu.Scalar();
  else
    doc.fail(gpu, "cluster.gpu", "a GPU preset name or an inline spec map");
  if (has(n, "nodes")) c.nodes = static_cast<int>(doc.integer_in(n["nodes"], "cluster.nodes", limits::nodes));
  if (has(n, "gpus_per_node"))
    c.gpus_per_node =
        static_cast<int>(doc.integer_in(n["gpus_per_node"], "cluster.gpus_per_node", limits::gpus_per_node));
  if (int64_t{c.nodes} * c.gpus_per_node > limits::world_size.hi)
    doc.fail_msg(locate(n, has(n, "nodes") ? "nodes" : "gpus_per_node", self), "cluster.nodes",
                 fmt::format("{} nodes x {} GPUs per node = {} GPUs; expected at most {}", c.nodes, c.gpus_per_node,
                             int64_t{c.nodes} * c.gpus_per_node, limits::world_size.hi));
  if (has(n, "cores_per_node")) {
    c.cores_per_node =
        static_cast<int>(doc.integer_in(n["cores_per_node"], "cluster.cores_per_node", limits::gpus_per_node));
    if (c.gpu != "cpu")
      doc.fail_msg(key_node(n, "cores_per_node"), "cluster.cores_per_node",
                   fmt::format("expected only with device: cpu (CPU ranks share a node's cores; a GPU is a device of "
                               "its own), got device '{}'",
                               c.gpu.empty() ? std::string("inline spec") : c.gpu));
  }
  if (has(n, "nvlink_domain_gpus")) {
    // An NVLink domain of whole nodes (NVLink Switch trays join the hosts' GPUs), and the cluster whole domains.
    const YAML::Node d = n["nvlink_domain_gpus"];
    c.nvlink_domain_gpus =
        static_cast<int>(doc.integer_in(d, "cluster.nvlink_domain_gpus", limits::nvlink_domain_gpus));
    if (const std::string m = nvlink_domain_mismatch(c.nvlink_domain_gpus, c.nodes, c.gpus_per_node); !m.empty())
      doc.fail_msg(d, "cluster.nvlink_domain_gpus", m);
  }
  if (has(n, "intra_node"))
    c.intra_node = read_link(doc, n["intra_node"], key_node(n, "intra_node"), "cluster.intra_node");
  if (has(n, "inter_node"))
    c.inter_node = read_link(doc, n["inter_node"], key_node(n, "inter_node"), "cluster.inter_node");
  return c;
}

SearchSpace read_search(const YamlDoc& doc, const YAML::Node& n, const YAML::Node& self,
                        const std::filesystem::path& base_dir, int64_t n_layers) {
  doc.check_map(n, "search",
                {"tp_degrees",
                 "dp_replicate",
                 "cp_degrees",
                 "ep_degrees",
                 "pp_degrees",
                 "pp_schedules",
                 "pp_microbatch_sizes",
                 "pp_stages_per_rank",
                 "presets",
                 "plans",
                 "float8",
                 "async_tp",
                 "loss_parallel",
                 "activation_checkpointing",
                 "local_batch_sizes",
                 "max_local_batch_size",
                 "seq_lens",
                 "ac_layers",
                 "objective",
                 "memory_headroom_gib",
                 "global_batch_size",
                 "gradient_accumulation",
                 "min_tokens_per_second_per_gpu",
                 "gpu_hour_price",
                 "framework"});
  SearchSpace s;
  for (auto it = n.begin(); it != n.end(); ++it) s.stated_at[it->first.Scalar()] = doc.at(it->first);
  if (has(n, "framework")) s.framework = doc.choice(n["framework"], "search.framework", {"dtensor", "torchtitan-0.3"});
  const bool tt = s.framework == "torchtitan-0.3";
  if (tt) {
    // torchtitan 0.3's real knobs: its float8 recipes, and no loss-parallel switch (always on under TP).
    s.float8 = search_float8_recipes(true);
    s.loss_parallel = {true};
  }
  auto degree = [&](const YAML::Node& x, const std::string& k) {
    return static_cast<int>(doc.integer_in(x, k, limits::degree));
  };
  auto batch = [&](const YAML::Node& x, const std::string& k) {
    return doc.integer_in(x, k, limits::local_batch_size);
  };
  auto boolean = [&](const YAML::Node& x, const std::string& k) { return doc.boolean(x, k); };
  // Every list below is an axis of the search: refuse_repeats() keeps one plan from being ranked twice.
  auto axis = [&](const char* k, auto item) {
    const std::string key = std::string("search.") + k;
    auto values = doc.list(n[k], key, item);
    refuse_repeats(doc, n[k], key, values);
    return values;
  };
  if (has(n, "tp_degrees")) s.tp_degrees = axis("tp_degrees", degree);
  if (has(n, "dp_replicate")) s.dp_replicate = axis("dp_replicate", degree);
  if (has(n, "cp_degrees")) s.cp_degrees = axis("cp_degrees", degree);
  if (has(n, "ep_degrees")) s.ep_degrees = axis("ep_degrees", degree);
  if (has(n, "pp_degrees")) s.pp_degrees = axis("pp_degrees", degree);
  if (has(n, "pp_schedules"))
    s.pp_schedules = axis("pp_schedules", [&](const YAML::Node& x, const std::string& k) {
      return parse_pipeline_schedule(doc.string(x, k), doc.where(x, k));
    });
  if (has(n, "pp_microbatch_sizes")) s.pp_microbatch_sizes = axis("pp_microbatch_sizes", batch);
  if (has(n, "pp_stages_per_rank"))  // 0: the schedule's default
    s.pp_stages_per_rank = axis("pp_stages_per_rank", [&](const YAML::Node& x, const std::string& k) {
      return static_cast<int>(doc.integer_in(x, k, {0, limits::n_layers.hi}));
    });
  if (has(n, "presets")) {
    const YAML::Node p = n["presets"];
    const auto names = plan_preset_names();
    auto preset = [&](const YAML::Node& x, const std::string& k) { return doc.choice(x, k, names); };
    // An empty list is allowed here: search only the plan files.
    s.presets = p.IsSequence() && p.size() == 0 ? std::vector<std::string>{} : axis("presets", preset);
  }
  if (has(n, "plans")) {
    auto path = [&](const YAML::Node& x, const std::string& k) {
      std::filesystem::path f = doc.string(x, k);
      return (f.is_absolute() ? f : base_dir / f).lexically_normal().string();
    };
    s.plan_files = axis("plans", path);
  }
  if (s.presets.empty() && s.plan_files.empty())
    doc.fail_msg(locate(n, "presets", self), "search.presets", "nothing to search: no presets and no plans");
  if (has(n, "float8")) {
    std::vector<std::string> recipes;
    for (Float8Recipe f : search_float8_recipes(tt)) recipes.emplace_back(to_string(f));
    auto f8 = [&](const YAML::Node& x, const std::string& k) {
      return parse_float8(doc.choice(x, k, recipes), doc.where(x, k));
    };
    s.float8 = axis("float8", f8);
  }
  if (has(n, "async_tp")) s.async_tp = axis("async_tp", boolean);
  if (has(n, "loss_parallel") && tt)
    doc.fail_msg(n["loss_parallel"], "search.loss_parallel",
                 "torchtitan 0.3 has no loss-parallel switch (always on under TP): leave the key out");
  if (has(n, "loss_parallel")) s.loss_parallel = axis("loss_parallel", boolean);
  if (has(n, "activation_checkpointing")) {
    auto ac = [&](const YAML::Node& x, const std::string& k) {
      return parse_activation_checkpointing(doc.choice(x, k, {"none", "selective", "full"}), doc.where(x, k));
    };
    s.activation_checkpointing = axis("activation_checkpointing", ac);
  }
  if (has(n, "local_batch_sizes")) s.local_batch_sizes = axis("local_batch_sizes", batch);
  if (has(n, "max_local_batch_size")) {
    if (has(n, "local_batch_sizes"))
      doc.fail_msg(n["max_local_batch_size"], "search.max_local_batch_size",
                   "give local_batch_sizes (sizes to enumerate) or max_local_batch_size (the largest that fits, up to "
                   "it), not both");
    s.max_local_batch_size = batch(n["max_local_batch_size"], "search.max_local_batch_size");
    s.local_batch_sizes = {s.max_local_batch_size};  // one candidate per plan; its batch is found by the search
  }
  if (has(n, "seq_lens")) {
    auto seq = [&](const YAML::Node& x, const std::string& k) { return doc.integer_in(x, k, limits::seq_len); };
    s.seq_lens = axis("seq_lens", seq);
  }
  if (has(n, "ac_layers")) {
    const YAML::Node l = n["ac_layers"];
    if (l.IsScalar() && l.Scalar() == "all") {
      for (int64_t k = 1; k < n_layers; ++k) s.ac_layers.push_back(k);
    } else {
      if (!l.IsSequence())
        doc.fail_msg(l, "search.ac_layers",
                     fmt::format("expected `all` or a list of block counts in 1..{} (the model's n_layers)", n_layers));
      auto k = [&](const YAML::Node& x, const std::string& key) {
        return doc.integer_in(x, key, limits::IntRange{1, std::max<int64_t>(n_layers, 1)});
      };
      std::vector<int64_t> ks = axis("ac_layers", k);
      std::sort(ks.begin(), ks.end());
      for (int64_t v : ks)  // ascending; n_layers is every block, which is always searched
        if (v < n_layers) s.ac_layers.push_back(v);
    }
  }
  if (has(n, "objective")) {
    const std::string o =
        doc.choice(n["objective"], "search.objective", {"tokens_per_second", "step_time", "memory", "cost_per_token"});
    s.objective = o == "step_time"        ? Objective::step_time
                  : o == "memory"         ? Objective::memory
                  : o == "cost_per_token" ? Objective::cost_per_token
                                          : Objective::tokens_per_second;
  }
  if (has(n, "global_batch_size")) {
    if (s.max_local_batch_size > 0)
      doc.fail_msg(n["global_batch_size"], "search.global_batch_size",
                   "global_batch_size fixes the local batch per dp_shard: use local_batch_sizes, not "
                   "max_local_batch_size");
    s.global_batch_size = doc.integer_in(n["global_batch_size"], "search.global_batch_size", limits::global_batch_size);
  }
  if (has(n, "gradient_accumulation")) {
    s.gradient_accumulation = doc.boolean(n["gradient_accumulation"], "search.gradient_accumulation");
    if (s.gradient_accumulation && s.global_batch_size == 0)
      doc.fail_msg(n["gradient_accumulation"], "search.gradient_accumulation",
                   "true needs search.global_batch_size (the sequences per optimizer step that the microbatches add "
                   "up to)");
  }
  if (has(n, "min_tokens_per_second_per_gpu"))
    s.min_tokens_per_second_per_gpu = doc.real_in(n["min_tokens_per_second_per_gpu"],
                                                  "search.min_tokens_per_second_per_gpu", limits::tokens_per_second);
  if (has(n, "gpu_hour_price"))
    s.gpu_hour_price = doc.real_in(n["gpu_hour_price"], "search.gpu_hour_price", limits::gpu_hour_price);
  if (s.objective == Objective::cost_per_token && s.gpu_hour_price <= 0)
    doc.fail_msg(n["objective"], "search.objective",
                 "cost_per_token needs search.gpu_hour_price (USD per GPU-hour), e.g. gpu_hour_price: 2.5");
  if (has(n, "memory_headroom_gib"))
    s.memory_headroom_gib =
        doc.real_in(n["memory_headroom_gib"], "search.memory_headroom_gib", limits::memory_headroom_gib);
  return s;
}

Config load_node(const YAML::Node& root, const std::string& name, const std::filesystem::path& base_dir,
                 const std::string& hf_config, const std::optional<std::string>& hf_text = std::nullopt) {
  const YamlDoc doc(name);
  if (!root.IsDefined() || !root.IsMap())
    throw Error(fmt::format("{}: expected a map with keys model, training, cluster, search; got {}", doc.at(root),
                            yaml::describe(root)));
  doc.check_map(root, "", {"model", "training", "cluster", "search"});
  Config cfg;
  cfg.path = name;
  if (!hf_config.empty())
    cfg.model = load_hf_config(hf_config);  // --hf-config replaces the file's model section
  else if (!has(root, "model"))
    throw Error(fmt::format("{}: model: missing; expected a map (preset, dims or hf_config)", name));
  else
    cfg.model = read_model(doc, root["model"], key_node(root, "model"), base_dir, hf_text);
  if (has(root, "training")) cfg.training = read_training(doc, root["training"]);
  if (has(root, "cluster"))
    cfg.cluster = read_cluster(doc, root["cluster"], key_node(root, "cluster"));
  else
    cfg.cluster.source = name;
  if (has(root, "search")) {
    cfg.search = read_search(doc, root["search"], key_node(root, "search"), base_dir, cfg.model.n_layers);
    cfg.has_search = true;
  }
  return cfg;
}

}  // namespace

Config load_config(const std::string& path, const std::string& hf_config) {
  const std::string text = yaml::read_file(path, "config");
  return load_node(yaml::parse(text, path), path, std::filesystem::path(path).parent_path(), hf_config);
}

Config load_config_string(const std::string& yaml, const std::string& name, const std::string& base_dir,
                          const std::optional<std::string>& hf_config_text) {
  return load_node(yaml::parse(yaml, name), name, base_dir, {}, hf_config_text);
}

Config load_config_node(const YAML::Node& root, const std::string& name, const std::string& base_dir) {
  return load_node(root, name, base_dir, {});
}

}  // namespace tptune
