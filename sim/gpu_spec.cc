#include "sim/gpu_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "plans/util/error.h"
#include "plans/util/limits.h"
#include "plans/util/yaml_util.h"
#include "sim/cost/cost_param_fields.h"
#include "sim/gpu_presets_data.h"

namespace tptune {

double GpuSpec::peak_flops(DType t) const {
  switch (t) {
    case DType::bf16:
      return bf16_tflops * 1e12;
    case DType::fp16:
      return fp16_tflops * 1e12;
    case DType::fp32:
      return fp32_tflops * 1e12;
    case DType::fp8_e4m3:
    case DType::fp8_e5m2:
      if (!has_float8())
        throw Error(fmt::format("float8 is not supported on {} ({}): it has no float8 tensor cores", name,
                                description.empty() ? origin : description));
      return fp8_tflops * 1e12;
  }
  return 0;
}

namespace {

// `v` read as T when it is a scalar yaml-cpp reads as T, else nothing (the caller's error says what was expected).
template <class T>
std::optional<T> scalar_as(const YAML::Node& v) {
  if (!v.IsScalar()) return std::nullopt;
  try {
    return v.as<T>();
  } catch (const YAML::Exception&) {
    return std::nullopt;
  }
}

struct Reader {
  const YAML::Node& root;
  std::string file;
  std::set<std::string> seen;

  std::string where(const YAML::Node& n) const {
    YAML::Mark m = n.Mark();
    if (m.line < 0) return file;
    return fmt::format("{}:{}", file, m.line + 1);
  }
  std::string text(const YAML::Node& n) const {
    if (n.IsScalar()) return yaml::shown(n.Scalar());
    return n.IsMap() ? "a map" : n.IsSequence() ? "a list" : "nothing";
  }
  // The node of a figure: `key: V` or `key: {value: V, source: S}`. Records the source.
  YAML::Node figure(const std::string& key, GpuSpec& spec) {
    seen.insert(key);
    YAML::Node n = root[key];
    if (!n)
      throw Error(fmt::format("{}: {}: missing (a GPU spec needs every figure; see sim/gpu_spec.h)", where(root), key));
    if (n.IsMap()) {
      for (const auto& kv : n) {
        const std::string k = key_name(kv.first);
        if (k != "value" && k != "source")
          throw Error(
              fmt::format("{}: {}.{}: unknown key, expected value or source", where(kv.first), key, yaml::shown(k)));
      }
      if (!n["value"])
        throw Error(fmt::format("{}: {}: expected {{value: ..., source: ...}}, got no value", where(n), key));
      if (n["source"]) {
        if (!n["source"].IsScalar())
          throw Error(
              fmt::format("{}: {}.source: expected a string, got {}", where(n["source"]), key, text(n["source"])));
        spec.sources[key] = n["source"].Scalar();
      }
      return n["value"];
    }
    return n;
  }
  // A key of a spec map: a plain name (an inline spec may have been written with any YAML as a key).
  std::string key_name(const YAML::Node& k) const {
    if (!k.IsScalar())
      throw Error(fmt::format("{}: GPU spec: expected keys that are plain names, got {}", where(k), text(k)));
    return k.Scalar();
  }
  // A finite figure in limits::gpu_figure ((0, 1e6]; [0, 1e6] with allow_zero). yaml-cpp's as<double>() reads
  // ".inf" and ".nan", so the range test is written to refuse them.
  double number(const std::string& key, GpuSpec& spec, bool allow_zero = false,
                limits::RealRange range = limits::gpu_figure) {
    YAML::Node v = figure(key, spec);
    const std::optional<double> read = scalar_as<double>(v);
    const double d = read.value_or(0);
    if (allow_zero) range.lo_open = false;
    if (!read || !std::isfinite(d) || d > range.hi || d < range.lo || (range.lo_open && d == range.lo))
      throw Error(fmt::format("{}: {}: expected a number in {}, got {}", where(v), key, yaml::range_text(range),
                              v.IsScalar() ? "'" + text(v) + "'" : text(v)));
    return d;
  }
  bool boolean(const std::string& key, GpuSpec& spec) {
    YAML::Node v = figure(key, spec);
    try {
      if (v.IsScalar()) return v.as<bool>();
    } catch (const YAML::Exception&) {
    }
    throw Error(fmt::format("{}: {}: expected true or false, got '{}'", where(v), key, text(v)));
  }
  std::string string(const std::string& key) {
    seen.insert(key);
    YAML::Node v = root[key];
    if (!v) return "";
    if (!v.IsScalar()) throw Error(fmt::format("{}: {}: expected a string, got {}", where(v), key, text(v)));
    return v.Scalar();
  }
};

// The `calibration` block (sim/gpu_spec.h): runs, sources, mean_error, loso_mean_error; every key checked.
PresetCalibration parse_calibration_block(const YAML::Node& cb, const Reader& r) {
  if (!cb.IsMap())
    throw Error(fmt::format("{}: calibration: expected a map {{runs, sources, mean_error, loso_mean_error}}, got {}",
                            r.where(cb), cb.IsScalar() ? "'" + r.text(cb) + "'" : r.text(cb)));
  PresetCalibration c;
  auto fraction = [&](const char* key) {
    const YAML::Node v = cb[key];
    const double d = scalar_as<double>(v).value_or(-1);
    if (!std::isfinite(d) || d < 0 || d > 10)
      throw Error(fmt::format("{}: calibration.{}: expected a fraction in [0, 10] (0.09 = 9 %), got {}", r.where(v),
                              key, v.IsScalar() ? "'" + r.text(v) + "'" : r.text(v)));
    return d;
  };
  for (const auto& kv : cb) {
    const std::string k = r.key_name(kv.first);
    if (k != "runs" && k != "sources" && k != "mean_error" && k != "loso_mean_error" && k != "loao_mean_error")
      throw Error(fmt::format(
          "{}: calibration.{}: unknown key, expected runs, sources, mean_error, loso_mean_error or loao_mean_error",
          r.where(kv.first), yaml::shown(k)));
  }
  for (const char* key : {"runs", "sources", "mean_error"})
    if (!cb[key])
      throw Error(fmt::format("{}: calibration: {}: missing (a calibration block states runs, sources and mean_error)",
                              r.where(cb), key));
  const YAML::Node runs = cb["runs"];
  const int64_t n = scalar_as<int64_t>(runs).value_or(0);
  if (n < 1 || n > 1000000)
    throw Error(fmt::format("{}: calibration.runs: expected an integer in [1, 1000000], got {}", r.where(runs),
                            runs.IsScalar() ? "'" + r.text(runs) + "'" : r.text(runs)));
  c.runs = static_cast<int>(n);
  const YAML::Node src = cb["sources"];
  if (!src.IsSequence() || src.size() == 0)
    throw Error(fmt::format("{}: calibration.sources: expected a list of one or more source ids, got {}", r.where(src),
                            r.text(src)));
  for (const auto& e : src) {
    if (!e.IsScalar() || e.Scalar().empty())
      throw Error(fmt::format("{}: calibration.sources: expected source ids (strings), got {}", r.where(e), r.text(e)));
    c.sources.push_back(e.Scalar());
  }
  c.mean_error = fraction("mean_error");
  if (cb["loso_mean_error"]) c.loso_mean_error = fraction("loso_mean_error");
  if (cb["loao_mean_error"]) c.loao_mean_error = fraction("loao_mean_error");
  return c;
}

}  // namespace

GpuSpec parse_gpu_spec(const YAML::Node& node, const std::string& file) {
  if (!node || !node.IsMap()) {
    std::string where = node && node.Mark().line >= 0 ? fmt::format("{}:{}", file, node.Mark().line + 1) : file;
    throw Error(fmt::format("{}: GPU spec: expected a map of figures (see sim/gpu_spec.h)", where));
  }
  Reader r{node, file, {}};
  GpuSpec s;
  s.origin = r.where(node);
  s.name = r.string("name");
  s.description = r.string("description");
  if (s.name.empty()) s.name = "custom";
  s.bf16_tflops = r.number("bf16_tflops", s);
  s.fp16_tflops = r.number("fp16_tflops", s);
  s.fp8_tflops = r.number("fp8_tflops", s, /*allow_zero=*/true);
  s.fp32_tflops = r.number("fp32_tflops", s);
  s.hbm_bandwidth_GBps = r.number("hbm_bandwidth_GBps", s);
  s.memory_GiB = r.number("memory_GiB", s);
  double sms = r.number("sm_count", s, false, {double(limits::sm_count.lo), double(limits::sm_count.hi), false});
  if (sms != static_cast<int>(sms))
    throw Error(fmt::format("{}: sm_count: expected a positive integer, got '{}'", r.where(node["sm_count"]), sms));
  s.sm_count = static_cast<int>(sms);
  s.nvlink_bandwidth_GBps = r.number("nvlink_bandwidth_GBps", s, false, limits::bandwidth_GBps);
  s.nvlink_latency_us = r.number("nvlink_latency_us", s, true, limits::latency_us);
  s.nvswitch = r.boolean("nvswitch", s);
  s.nvls = r.boolean("nvls", s);
  s.network_bandwidth_GBps = r.number("network_bandwidth_GBps", s, false, limits::bandwidth_GBps);
  s.network_latency_us = r.number("network_latency_us", s, true, limits::latency_us);
  if (node["architecture"]) {
    // The kernel generation whose architecture-level cost terms the part shares (sim/calibrate/kernel_fit.h).
    const YAML::Node v = r.figure("architecture", s);
    const std::vector<std::string>& known = gpu_architectures();
    if (!v.IsScalar() || std::find(known.begin(), known.end(), v.Scalar()) == known.end())
      throw Error(fmt::format("{}: architecture: expected one of {}, got {}", r.where(v), fmt::join(known, ", "),
                              v.IsScalar() ? "'" + r.text(v) + "'" : r.text(v)));
    s.architecture = v.Scalar();
  }
  if (node["kernel_sources"]) {
    // The kernel-level sources (profiles/kernels ids) its architecture's terms are compared with.
    r.seen.insert("kernel_sources");
    const YAML::Node ks = node["kernel_sources"];
    if (!ks.IsSequence() || ks.size() == 0)
      throw Error(fmt::format("{}: kernel_sources: expected a list of one or more source ids, got {}", r.where(ks),
                              ks.IsScalar() ? "'" + r.text(ks) + "'" : r.text(ks)));
    for (const auto& e : ks) {
      if (!e.IsScalar() || e.Scalar().empty())
        throw Error(fmt::format("{}: kernel_sources: expected source ids (strings), got {}", r.where(e), r.text(e)));
      s.kernel_sources.push_back(e.Scalar());
    }
  }
  if (node["power_limit_W"]) s.power_limit_W = r.number("power_limit_W", s, false, limits::power_limit_W);
  if (node["cost_params"]) {
    r.seen.insert("cost_params");
    const YAML::Node cp = node["cost_params"];
    if (!cp.IsMap())
      throw Error(fmt::format("{}: cost_params: expected a map of cost parameters, got {}", r.where(cp), r.text(cp)));
    CostParams check;
    for (const auto& kv : cp) {
      if (!kv.first.IsScalar())
        throw Error(fmt::format("{}: cost_params: expected keys that are plain names", r.where(cp)));
      const std::string k = kv.first.Scalar();
      Reader sub{cp, file, {}};
      GpuSpec scratch;
      const double v = sub.number(k, scratch, /*allow_zero=*/true);
      set_cost_param(check, k, v, r.where(kv.first));  // unknown names and ranges, with the line
      s.cost_params.emplace_back(k, v);
      if (scratch.sources.count(k)) s.sources["cost_params." + k] = scratch.sources[k];
    }
  }
  if (node["calibration"]) {
    r.seen.insert("calibration");
    s.calibration = parse_calibration_block(node["calibration"], r);
  }
  for (const auto& kv : node) {
    const std::string k = r.key_name(kv.first);
    if (!r.seen.count(k))
      throw Error(fmt::format("{}: {}: unknown key in a GPU spec (see sim/gpu_spec.h for the keys)", r.where(kv.first),
                              yaml::shown(k)));
  }
  if (s.nvls && !s.nvswitch)
    throw Error(fmt::format("{}: nvls: NVLink SHARP needs an NVSwitch (nvswitch: true)", r.where(node["nvls"])));
  return s;
}

const std::vector<std::string>& gpu_architectures() {
  static const std::vector<std::string> names{"ampere", "hopper", "blackwell", "cpu"};
  return names;
}

std::vector<std::string> gpu_preset_names() {
  std::vector<std::string> names;
  for (const auto& p : embedded_gpu_presets()) names.emplace_back(p.name);
  return names;
}

GpuSpec gpu_preset(const std::string& name, const std::string& where) {
  // Parsed once per process: the presets are constant text, and parsing one cost about as much as a tenth of a
  // whole 405B search (each search resolves its cluster).
  static std::mutex mutex;
  static std::map<std::string, GpuSpec, std::less<>> parsed;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = parsed.find(name); it != parsed.end()) return it->second;
  }
  for (const auto& p : embedded_gpu_presets()) {
    if (p.name != name) continue;
    YAML::Node node;
    try {
      node = YAML::Load(std::string(p.text));
    } catch (const YAML::Exception& e) {
      throw Error(fmt::format("{}:{}: {}", p.path, e.mark.line + 1, e.msg));
    }
    GpuSpec spec = parse_gpu_spec(node, std::string(p.path));
    std::lock_guard<std::mutex> lock(mutex);
    parsed.emplace(name, spec);
    return spec;
  }
  throw Error(fmt::format("{}: unknown GPU preset '{}' (known: {})", where, yaml::shown(name),
                          fmt::join(gpu_preset_names(), ", ")));
}

}  // namespace tptune
