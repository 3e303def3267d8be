// libFuzzer target: the config loader (plans/language/config.h) and, for the cluster it names, the GPU spec loader
// (sim/gpu_spec.h: a preset name or an inline `cluster.gpu` map).
//
// Property: load_config_string() returns a Config or throws a one-line tptune::Error (fuzz_check.h). A Config
// round-trips: written back as YAML (every key explicit, canonical_yaml below) and read again, it is equal field by
// field (the path and the source line of cluster.gpu excepted: they are provenance).
//
//   cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DTPTUNE_FUZZ=ON
//   cmake --build build-fuzz --target fuzz_config
//   build-fuzz/tests/fuzz/fuzz_config -dict=tests/fuzz/tptune.dict tests/fuzz/corpus/config

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "plans/language/config.h"
#include "sim/gpu_spec.h"
#include "tests/fuzz/fuzz_check.h"

namespace tptune::fuzz {
namespace {

// Doubles in their shortest exact form, so that reading them back gives the same bits.
std::string real(double v) { return fmt::format("{}", v); }

std::string canonical_yaml(const Config& c) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  const Model& m = c.model;
  out << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << m.name;
  out << YAML::Key << "dim" << YAML::Value << m.dim;
  out << YAML::Key << "n_layers" << YAML::Value << m.n_layers;
  out << YAML::Key << "n_heads" << YAML::Value << m.n_heads;
  out << YAML::Key << "n_kv_heads" << YAML::Value << m.n_kv_heads;
  out << YAML::Key << "ffn_dim" << YAML::Value << m.ffn_dim;
  out << YAML::Key << "vocab_size" << YAML::Value << m.vocab_size;
  out << YAML::Key << "mlp" << YAML::Value << std::string(to_string(m.mlp));
  out << YAML::Key << "norm" << YAML::Value << std::string(to_string(m.norm));
  out << YAML::Key << "norm_eps" << YAML::Value << real(m.norm_eps);
  out << YAML::Key << "rope_theta" << YAML::Value << real(m.rope_theta);
  out << YAML::EndMap;

  const Training& t = c.training;
  out << YAML::Key << "training" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "seq_len" << YAML::Value << t.seq_len;
  out << YAML::Key << "local_batch_size" << YAML::Value << t.local_batch_size;
  out << YAML::Key << "dtype" << YAML::Value << std::string(to_string(t.dtype));
  out << YAML::Key << "activation_checkpointing" << YAML::Value << std::string(to_string(t.activation_checkpointing));
  out << YAML::EndMap;

  const Cluster& cl = c.cluster;
  // A default-constructed YAML::Node is Null, not Undefined: an inline spec is always a map.
  if (!cl.gpu.empty() || cl.gpu_inline.IsMap()) {  // a config without `cluster:` keeps the defaults
    out << YAML::Key << "cluster" << YAML::Value << YAML::BeginMap;
    out << YAML::Key << "gpu" << YAML::Value;
    if (cl.gpu_inline.IsMap())
      out << cl.gpu_inline;
    else
      out << cl.gpu;
    out << YAML::Key << "nodes" << YAML::Value << cl.nodes;
    out << YAML::Key << "gpus_per_node" << YAML::Value << cl.gpus_per_node;
    auto link = [&](const char* key, const std::optional<LinkSpec>& l) {
      if (!l) return;
      out << YAML::Key << key << YAML::Value << YAML::BeginMap;
      out << YAML::Key << "bandwidth_GBps" << YAML::Value << real(l->bandwidth_GBps);
      out << YAML::Key << "latency_us" << YAML::Value << real(l->latency_us);
      out << YAML::EndMap;
    };
    link("intra_node", cl.intra_node);
    link("inter_node", cl.inter_node);
    out << YAML::EndMap;
  }

  if (c.has_search) {
    const SearchSpace& s = c.search;
    out << YAML::Key << "search" << YAML::Value << YAML::BeginMap;
    auto list = [&](const char* key, const auto& values, auto&& write) {
      out << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq;
      for (const auto& v : values) write(v);
      out << YAML::EndSeq;
    };
    if (!s.tp_degrees.empty()) list("tp_degrees", s.tp_degrees, [&](int v) { out << v; });
    list("presets", s.presets, [&](const std::string& v) { out << v; });
    if (!s.plan_files.empty()) list("plans", s.plan_files, [&](const std::string& v) { out << v; });
    list("float8", s.float8, [&](Float8Recipe v) { out << std::string(to_string(v)); });
    list("async_tp", s.async_tp, [&](bool v) { out << (v ? "true" : "false"); });
    list("loss_parallel", s.loss_parallel, [&](bool v) { out << (v ? "true" : "false"); });
    list("activation_checkpointing", s.activation_checkpointing,
         [&](ActivationCheckpointing v) { out << std::string(to_string(v)); });
    list("local_batch_sizes", s.local_batch_sizes, [&](int64_t v) { out << v; });
    out << YAML::Key << "objective" << YAML::Value << std::string(to_string(s.objective));
    out << YAML::Key << "memory_headroom_gib" << YAML::Value << real(s.memory_headroom_gib);
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  if (!out.good()) defect("YAML::Emitter failed on a loaded config", out.GetLastError());
  return out.c_str();
}

// YAML text is Unicode: a scalar that is not valid UTF-8, or holds control characters, cannot be written back
// exactly (YAML::Emitter escapes or re-encodes it). The loader still must not crash on it, but such configs skip the
// round trip.
bool writable(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) return false;
    int extra = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xe ? 2 : (c >> 3) == 0x1e ? 3 : -1;
    if (extra < 0 || (extra == 1 && c < 0xc2) || i + extra >= s.size()) return false;
    for (int k = 1; k <= extra; ++k)
      if (i + k >= s.size() || (static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    i += extra + 1;
  }
  return true;
}

bool writable(const YAML::Node& n) {
  if (n.IsScalar()) return writable(n.Scalar());
  if (n.IsSequence())
    for (const auto& x : n)
      if (!writable(x)) return false;
  if (n.IsMap())
    for (const auto& kv : n)
      if (!writable(kv.first) || !writable(kv.second)) return false;
  return true;
}

bool writable(const Config& c) {
  if (!writable(c.model.name) || !writable(c.cluster.gpu) || !writable(c.cluster.gpu_inline)) return false;
  for (const auto& f : c.search.plan_files)
    if (!writable(f)) return false;
  return true;
}

bool same_link(const std::optional<LinkSpec>& a, const std::optional<LinkSpec>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a || (a->bandwidth_GBps == b->bandwidth_GBps && a->latency_us == b->latency_us);
}

// The first field in which a and b differ, or "" when they are equal.
std::string difference(const Config& a, const Config& b) {
  const Model &ma = a.model, &mb = b.model;
  if (ma.name != mb.name) return "model.name";
  if (ma.dim != mb.dim || ma.n_layers != mb.n_layers || ma.n_heads != mb.n_heads || ma.n_kv_heads != mb.n_kv_heads ||
      ma.ffn_dim != mb.ffn_dim || ma.vocab_size != mb.vocab_size)
    return "model dims";
  if (ma.mlp != mb.mlp || ma.norm != mb.norm) return "model.mlp/norm";
  if (ma.norm_eps != mb.norm_eps || ma.rope_theta != mb.rope_theta) return "model.norm_eps/rope_theta";
  const Training &ta = a.training, &tb = b.training;
  if (ta.seq_len != tb.seq_len || ta.local_batch_size != tb.local_batch_size || ta.dtype != tb.dtype ||
      ta.activation_checkpointing != tb.activation_checkpointing)
    return "training";
  const Cluster &ca = a.cluster, &cb = b.cluster;
  if (ca.gpu != cb.gpu) return "cluster.gpu";
  if (ca.gpu_inline.IsMap() != cb.gpu_inline.IsMap() ||
      (ca.gpu_inline.IsMap() && YAML::Dump(ca.gpu_inline) != YAML::Dump(cb.gpu_inline)))
    return "cluster.gpu (inline)";
  if (ca.nodes != cb.nodes || ca.gpus_per_node != cb.gpus_per_node) return "cluster.nodes/gpus_per_node";
  if (!same_link(ca.intra_node, cb.intra_node) || !same_link(ca.inter_node, cb.inter_node)) return "cluster links";
  if (a.has_search != b.has_search) return "search (present)";
  const SearchSpace &sa = a.search, &sb = b.search;
  if (sa.tp_degrees != sb.tp_degrees) return "search.tp_degrees";
  if (sa.presets != sb.presets) return "search.presets";
  if (sa.plan_files != sb.plan_files) return "search.plans";
  if (sa.float8 != sb.float8) return "search.float8";
  if (sa.async_tp != sb.async_tp || sa.loss_parallel != sb.loss_parallel) return "search.async_tp/loss_parallel";
  if (sa.activation_checkpointing != sb.activation_checkpointing) return "search.activation_checkpointing";
  if (sa.local_batch_sizes != sb.local_batch_sizes) return "search.local_batch_sizes";
  if (sa.objective != sb.objective || sa.memory_headroom_gib != sb.memory_headroom_gib)
    return "search.objective/memory_headroom_gib";
  return "";
}

void load_and_check(const std::string& text) {
  const Config config = load_config_string(text, "fuzz.yaml");

  // The GPU the cluster names must resolve to a spec or a clean error, as `tp-plan simulate` resolves it.
  expect_clean([&] {
    if (config.cluster.gpu_inline.IsMap())
      (void)parse_gpu_spec(config.cluster.gpu_inline, "fuzz.yaml");
    else if (!config.cluster.gpu.empty())
      (void)gpu_preset(config.cluster.gpu, config.cluster.source);
  });

  if (!writable(config)) return;
  const std::string written = canonical_yaml(config);
  Config again;
  try {
    again = load_config_string(written, "fuzz-roundtrip.yaml");
  } catch (const Error& e) {
    defect("a loaded config, written back, is refused", std::string(e.what()) + "\n--- written:\n" + written);
  }
  const std::string diff = difference(config, again);
  if (!diff.empty()) defect("config round trip changed a field", diff + "\n--- written:\n" + written);
}

}  // namespace
}  // namespace tptune::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  tptune::fuzz::expect_clean([&] { tptune::fuzz::load_and_check(text); });
  return 0;
}
