#include "sim/calibrate/kernel_record.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string_view>

#include "plans/util/error.h"
#include "plans/util/limits.h"
#include "plans/util/yaml_folder.h"
#include "plans/util/yaml_util.h"
#include "sim/gpu_spec.h"

namespace tptune {

namespace {

struct KindName {
  KernelKind kind;
  const char* name;
};
constexpr KindName kKinds[] = {{KernelKind::gemm, "gemm"},
                               {KernelKind::gemm_sustained, "gemm_sustained"},
                               {KernelKind::attention_fwd, "attention_fwd"},
                               {KernelKind::attention_bwd, "attention_bwd"},
                               {KernelKind::attention_fwd_bwd, "attention_fwd_bwd"},
                               {KernelKind::memory_bound, "memory_bound"},
                               {KernelKind::all_reduce, "all_reduce"},
                               {KernelKind::all_gather, "all_gather"},
                               {KernelKind::reduce_scatter, "reduce_scatter"},
                               {KernelKind::grouped_gemm_fwd_bwd, "grouped_gemm_fwd_bwd"}};
constexpr std::pair<KernelUnit, const char*> kUnits[] = {{KernelUnit::tflops, "TFLOPS"},
                                                         {KernelUnit::pflops, "PFLOPS"},
                                                         {KernelUnit::fraction_of_peak, "fraction_of_peak"},
                                                         {KernelUnit::gbps, "GBps"},
                                                         {KernelUnit::us, "us"}};

using yaml::YamlDoc;

bool has(const YAML::Node& map, const char* key) { return map[key].IsDefined(); }

// The units a kernel's figure can be in: rates or fractions for compute, fractions for streaming kernels, GBps (busbw)
// for collectives.
std::vector<std::string> units_of(KernelKind k) {
  if (is_collective(k)) return {"GBps"};
  if (k == KernelKind::memory_bound) return {"fraction_of_peak"};
  if (k == KernelKind::grouped_gemm_fwd_bwd) return {"us"};
  return {"TFLOPS", "PFLOPS", "fraction_of_peak"};
}

void read_shape(const YamlDoc& doc, const YAML::Node& n, const std::string& key, KernelMeasurement& m,
                const YAML::Node& self) {
  const limits::IntRange dim{1, int64_t{1} << 24};
  if (is_gemm(m.kind)) {
    doc.check_map(n, key, {"m", "n", "k"});
    for (const char* d : {"m", "n", "k"})
      if (!has(n, d)) doc.fail_msg(n, yaml::join_key(key, d), "missing; a GEMM shape is {m, n, k}");
    m.m = doc.integer_in(n["m"], key + ".m", dim);
    m.n = doc.integer_in(n["n"], key + ".n", dim);
    m.k = doc.integer_in(n["k"], key + ".k", dim);
  } else if (m.kind == KernelKind::grouped_gemm_fwd_bwd) {
    doc.check_map(n, key, {"m", "n", "k", "groups"});
    for (const char* d : {"m", "n", "k", "groups"})
      if (!has(n, d)) doc.fail_msg(n, yaml::join_key(key, d), "missing; a grouped GEMM's shape is {m, n, k, groups}");
    m.m = doc.integer_in(n["m"], key + ".m", dim);
    m.n = doc.integer_in(n["n"], key + ".n", dim);
    m.k = doc.integer_in(n["k"], key + ".k", dim);
    m.groups = doc.integer_in(n["groups"], key + ".groups", limits::IntRange{1, 1 << 16});
    if (m.m % m.groups != 0)
      doc.fail_msg(n["groups"], key + ".groups", fmt::format("{} does not divide m {}", m.groups, m.m));
  } else if (is_attention(m.kind)) {
    doc.check_map(n, key, {"batch", "seq", "heads", "head_dim", "causal"});
    if (has(n, "batch")) m.batch = doc.integer_in(n["batch"], key + ".batch", limits::local_batch_size);
    if (has(n, "seq")) m.seq = doc.integer_in(n["seq"], key + ".seq", limits::seq_len);
    if (has(n, "heads")) m.heads = doc.integer_in(n["heads"], key + ".heads", limits::n_heads);
    if (has(n, "head_dim")) m.head_dim = doc.integer_in(n["head_dim"], key + ".head_dim", limits::head_dim);
    if (has(n, "causal")) m.causal = doc.boolean(n["causal"], key + ".causal");
  } else if (is_collective(m.kind)) {
    doc.check_map(n, key, {"ranks", "bytes"});
    for (const char* d : {"ranks", "bytes"})
      if (!has(n, d)) doc.fail_msg(n, yaml::join_key(key, d), "missing; a collective's shape is {ranks, bytes}");
    m.ranks = static_cast<int>(doc.integer_in(n["ranks"], key + ".ranks", limits::IntRange{2, 1 << 20}));
    m.bytes = doc.integer_in(n["bytes"], key + ".bytes", limits::IntRange{1, int64_t{1} << 50});
  } else {
    doc.fail_msg(self, key, "a memory_bound figure has no shape: leave it out");
  }
}

KernelMeasurement read_measurement(const YamlDoc& doc, const YAML::Node& n, const std::string& key) {
  doc.check_map(n, key,
                {"id", "gpu", "gpu_as_printed", "kernel", "backend", "dtype", "shape", "figure", "burst", "unit",
                 "quote", "architecture", "power_limit_W", "power_source"});
  KernelMeasurement m;
  m.at = doc.at(n);
  for (const char* k : {"id", "gpu_as_printed", "kernel", "figure", "unit", "quote"})
    if (!has(n, k)) doc.fail_msg(n, yaml::join_key(key, k), "missing");
  m.id = doc.string(n["id"], key + ".id");
  m.gpu_as_printed = doc.string(n["gpu_as_printed"], key + ".gpu_as_printed");
  m.quote = doc.string(n["quote"], key + ".quote");
  if (has(n, "gpu")) m.gpu = doc.choice(n["gpu"], key + ".gpu", gpu_preset_names());
  if (!m.gpu.empty()) m.architecture = gpu_preset(m.gpu, m.at + ": gpu").architecture;
  if (has(n, "architecture")) {
    if (!m.gpu.empty())
      doc.fail_msg(n["architecture"], key + ".architecture",
                   fmt::format("the preset {} states it ({}): leave it out", m.gpu, m.architecture));
    m.architecture = doc.choice(n["architecture"], key + ".architecture", gpu_architectures());
  }
  std::vector<std::string> kinds;
  for (const auto& k : kKinds) kinds.push_back(k.name);
  const std::string kind = doc.choice(n["kernel"], key + ".kernel", kinds);
  for (const auto& k : kKinds)
    if (kind == k.name) m.kind = k.kind;
  if (has(n, "backend")) m.backend = doc.string(n["backend"], key + ".backend");
  if (has(n, "dtype")) {
    if (is_collective(m.kind) || m.kind == KernelKind::memory_bound)
      doc.fail_msg(n["dtype"], key + ".dtype", fmt::format("a {} figure has no dtype: leave it out", kind));
    const std::string d = doc.choice(n["dtype"], key + ".dtype", {"bf16", "fp16", "fp8"});
    m.dtype = d == "fp8" ? DType::fp8_e4m3 : d == "fp16" ? DType::fp16 : DType::bf16;
  } else if (!is_collective(m.kind) && m.kind != KernelKind::memory_bound) {
    doc.fail_msg(n, key + ".dtype", "missing; expected bf16, fp16 or fp8");
  }
  const std::string unit = doc.choice(n["unit"], key + ".unit", units_of(m.kind));
  for (const auto& [u, name] : kUnits)
    if (unit == name) m.unit = u;
  m.figure = doc.real_in(
      n["figure"], key + ".figure",
      m.unit == KernelUnit::fraction_of_peak ? limits::RealRange{0, 1.5, true} : limits::RealRange{0, 1e6, true});
  if (m.kind == KernelKind::gemm_sustained) {
    if (!has(n, "burst"))
      doc.fail_msg(n, key + ".burst",
                   "missing; a gemm_sustained figure needs the short-burst figure printed beside it");
    m.burst = doc.real_in(
        n["burst"], key + ".burst",
        m.unit == KernelUnit::fraction_of_peak ? limits::RealRange{0, 1.5, true} : limits::RealRange{0, 1e6, true});
  } else if (has(n, "burst")) {
    doc.fail_msg(n["burst"], key + ".burst", fmt::format("a {} figure has no burst: leave it out", kind));
  }
  for (const char* k : {"power_limit_W", "power_source"}) {
    if (!has(n, k)) continue;
    if (m.kind != KernelKind::gemm_sustained)
      doc.fail_msg(n[k], yaml::join_key(key, k),
                   fmt::format("only a gemm_sustained figure was held at a power limit: leave it out of a {}", kind));
    const char* other = std::string_view(k) == "power_limit_W" ? "power_source" : "power_limit_W";
    if (!has(n, other))
      doc.fail_msg(n, yaml::join_key(key, other),
                   "missing; power_limit_W and power_source go together (the limit, and where it is stated)");
  }
  if (has(n, "power_limit_W")) {
    m.power_limit_W = doc.real_in(n["power_limit_W"], key + ".power_limit_W", limits::power_limit_W);
    m.power_source = doc.string(n["power_source"], key + ".power_source");
  }
  if (has(n, "shape")) {
    doc.require_map(n["shape"], key + ".shape");
    read_shape(doc, n["shape"], key + ".shape", m, n["shape"]);
  } else if (is_collective(m.kind)) {
    doc.fail_msg(n, key + ".shape", "missing; a collective's figure needs {ranks, bytes}");
  } else if (m.kind == KernelKind::grouped_gemm_fwd_bwd) {
    doc.fail_msg(n, key + ".shape", "missing; a grouped GEMM's time needs {m, n, k, groups}");
  }
  return m;
}

}  // namespace

const char* to_string(KernelKind k) {
  for (const auto& e : kKinds)
    if (e.kind == k) return e.name;
  return "?";
}
const char* to_string(KernelUnit u) {
  for (const auto& [e, name] : kUnits)
    if (e == u) return name;
  return "?";
}
bool is_attention(KernelKind k) {
  return k == KernelKind::attention_fwd || k == KernelKind::attention_bwd || k == KernelKind::attention_fwd_bwd;
}
bool is_gemm(KernelKind k) { return k == KernelKind::gemm || k == KernelKind::gemm_sustained; }
bool is_collective(KernelKind k) {
  return k == KernelKind::all_reduce || k == KernelKind::all_gather || k == KernelKind::reduce_scatter;
}

bool KernelMeasurement::has_shape() const {
  if (is_gemm(kind)) return m > 0;
  if (is_attention(kind)) return batch > 0 && seq > 0 && heads > 0 && head_dim > 0;
  if (kind == KernelKind::grouped_gemm_fwd_bwd) return groups > 0;
  return is_collective(kind);
}

double KernelMeasurement::value() const {
  switch (unit) {
    case KernelUnit::tflops:
      return figure * 1e12;
    case KernelUnit::pflops:
      return figure * 1e15;
    case KernelUnit::gbps:
      return figure * 1e9;
    case KernelUnit::us:
      return 6.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) / (figure * 1e-6);
    case KernelUnit::fraction_of_peak:
      break;
  }
  return figure;
}

KernelSource parse_kernel_source(const std::string& text, const std::string& name) {
  const YamlDoc doc(name);
  const YAML::Node root = yaml::parse(text, name);
  doc.check_map(root, "", {"source", "measurements"});
  KernelSource s;
  read_source_citation(doc, root, s, {{"section", &s.section}},
                       "expected repository (with path and commit) or paper: where the figures are");
  read_record_list(doc, root, "measurements", "measurement", [&](const YAML::Node& m, const std::string& key) {
    s.measurements.push_back(read_measurement(doc, m, key));
    return s.measurements.back().id;
  });
  return s;
}

std::vector<KernelSource> load_kernel_record(const std::string& dir) {
  std::vector<KernelSource> out;
  read_record_folder(dir, "the kernel-level record's folder of *.yaml files",
                     "kernel-level measurements, one file per source", "kernel record",
                     [&](const std::string& text, const std::string& f) {
                       out.push_back(parse_kernel_source(text, f));
                       return out.back().id;
                     });
  return out;
}

}  // namespace tptune
