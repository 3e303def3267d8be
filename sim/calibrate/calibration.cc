#include "sim/calibrate/calibration.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cmath>

#include "plans/util/error.h"
#include "plans/util/input_file.h"
#include "plans/util/output_file.h"
#include "plans/util/version.h"
#include "sim/cost/cost_param_fields.h"

namespace tptune {

namespace {

struct Doc {
  std::string name;
  std::string at(const YAML::Node& n) const {
    return n.Mark().line >= 0 ? fmt::format("{}:{}", name, n.Mark().line + 1) : name;
  }
  [[noreturn]] void fail(const YAML::Node& n, const std::string& key, const std::string& what) const {
    throw Error(fmt::format("{}: {}: {}", at(n), key, what));
  }
  static std::string shown(const YAML::Node& n) {
    if (!n) return "nothing";
    if (n.IsScalar()) return "'" + n.Scalar() + "'";
    return n.IsMap() ? "a map" : n.IsSequence() ? "a list" : "nothing";
  }
  double number(const YAML::Node& n, const std::string& key) const {
    if (n && n.IsScalar()) {
      try {
        double d = n.as<double>();
        if (std::isfinite(d)) return d;
      } catch (const YAML::Exception&) {
      }
    }
    fail(n, key, "expected a number, got " + shown(n));
  }
  std::string string(const YAML::Node& n, const std::string& key) const {
    if (!n || !n.IsScalar()) fail(n, key, "expected a string, got " + shown(n));
    return n.Scalar();
  }
  void keys(const YAML::Node& map, const std::string& key, std::initializer_list<const char*> allowed) const {
    if (!map.IsMap()) fail(map, key, "expected a map, got " + shown(map));
    for (const auto& kv : map) {
      const std::string k = kv.first.Scalar();
      bool ok = false;
      for (const char* a : allowed) ok = ok || k == a;
      if (!ok) fail(kv.first, key.empty() ? k : key + "." + k, "unknown key");
    }
  }
};

CollectiveKind parse_kind(const Doc& d, const YAML::Node& n, const std::string& key) {
  const std::string s = d.string(n, key);
  for (CollectiveKind k : {CollectiveKind::all_reduce, CollectiveKind::all_gather, CollectiveKind::reduce_scatter,
                           CollectiveKind::all_to_all, CollectiveKind::p2p})
    if (to_string(k) == s) return k;
  d.fail(n, key, "expected all_reduce, all_gather, reduce_scatter, all_to_all or p2p, got '" + s + "'");
}

FitResidual read_residual(const Doc& d, const YAML::Node& n, const std::string& key, FitResidual r) {
  if (n["samples"]) r.samples = static_cast<int>(d.number(n["samples"], key + ".samples"));
  if (n["median_rel_error"]) r.median_rel_error = d.number(n["median_rel_error"], key + ".median_rel_error");
  if (n["max_rel_error"]) r.max_rel_error = d.number(n["max_rel_error"], key + ".max_rel_error");
  return r;
}

}  // namespace

Calibration parse_calibration(const std::string& text, const std::string& name) {
  Doc d{name};
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw Error(fmt::format("{}:{}: not valid YAML: {}", name, e.mark.line + 1, e.msg));
  }
  if (!root.IsMap()) throw Error(fmt::format("{}: expected a calibration map (format: tptune-calibration)", name));
  d.keys(root, "",
         {"format", "version", "device", "environment", "files", "params", "collectives", "classes", "tptune"});
  if (!root["format"] || d.string(root["format"], "format") != "tptune-calibration")
    throw Error(fmt::format("{}: format: expected tptune-calibration, got {}",
                            root["format"] ? d.at(root["format"]) : name, Doc::shown(root["format"])));
  if (!root["version"] || d.number(root["version"], "version") != 1)
    throw Error(fmt::format("{}: version: expected 1, got {}", root["version"] ? d.at(root["version"]) : name,
                            Doc::shown(root["version"])));
  Calibration c;
  c.origin = name;
  if (!root["device"]) throw Error(fmt::format("{}: device: missing (the device preset the fit is relative to)", name));
  c.device = d.string(root["device"], "device");
  if (root["environment"]) c.environment = d.string(root["environment"], "environment");
  if (const YAML::Node f = root["files"]) {
    if (!f.IsSequence()) d.fail(f, "files", "expected a list of file names, got " + Doc::shown(f));
    for (const auto& x : f) c.files.push_back(d.string(x, "files[]"));
  }
  CostParams check;
  if (const YAML::Node ps = root["params"]) {
    if (!ps.IsMap()) d.fail(ps, "params", "expected a map of cost parameters, got " + Doc::shown(ps));
    for (const auto& kv : ps) {
      const std::string k = kv.first.Scalar();
      const std::string key = "params." + k;
      FittedParam p;
      p.name = k;
      if (kv.second.IsMap()) {
        d.keys(kv.second, key, {"value", "default", "class", "source"});
        if (!kv.second["value"]) d.fail(kv.second, key, "expected {value: V, default: D, class: C}, got no value");
        p.value = d.number(kv.second["value"], key + ".value");
        if (kv.second["default"]) p.default_value = d.number(kv.second["default"], key + ".default");
        if (kv.second["class"]) p.op_class = d.string(kv.second["class"], key + ".class");
        if (kv.second["source"]) p.source = d.string(kv.second["source"], key + ".source");
      } else {
        p.value = d.number(kv.second, key);
      }
      set_cost_param(check, k, p.value, d.at(kv.first));  // unknown names and out-of-range values
      c.params.push_back(p);
    }
  }
  if (const YAML::Node cs = root["collectives"]) {
    if (!cs.IsSequence()) d.fail(cs, "collectives", "expected a list of curves, got " + Doc::shown(cs));
    for (size_t i = 0; i < cs.size(); ++i) {
      const YAML::Node e = cs[i];
      const std::string key = fmt::format("collectives[{}]", i);
      d.keys(
          e, key,
          {"collective", "ranks", "alpha_us", "busbw_GBps", "points", "samples", "median_rel_error", "max_rel_error"});
      for (const char* req : {"collective", "ranks", "alpha_us", "busbw_GBps"})
        if (!e[req]) d.fail(e, key + "." + req, "missing");
      FittedCollective f;
      f.curve.kind = parse_kind(d, e["collective"], key + ".collective");
      const double ranks = d.number(e["ranks"], key + ".ranks");
      if (ranks < 2 || ranks > (1 << 20) || ranks != std::floor(ranks))
        d.fail(e["ranks"], key + ".ranks", fmt::format("expected an integer group size from 2, got {}", ranks));
      f.curve.ranks = static_cast<int>(ranks);
      f.curve.alpha_us = d.number(e["alpha_us"], key + ".alpha_us");
      if (f.curve.alpha_us < 0 || f.curve.alpha_us > 1e7)
        d.fail(e["alpha_us"], key + ".alpha_us", fmt::format("expected 0 .. 1e7 us, got {}", f.curve.alpha_us));
      f.curve.busbw_GBps = d.number(e["busbw_GBps"], key + ".busbw_GBps");
      if (!(f.curve.busbw_GBps > 0) || f.curve.busbw_GBps > 1e6)
        d.fail(e["busbw_GBps"], key + ".busbw_GBps",
               fmt::format("expected a positive number up to 1e6, got {}", f.curve.busbw_GBps));
      if (const YAML::Node pts = e["points"]) {
        const std::string pk = key + ".points";
        if (!pts.IsSequence()) d.fail(pts, pk, "expected a list of [bytes, us] pairs, got " + Doc::shown(pts));
        for (size_t j = 0; j < pts.size(); ++j) {
          const std::string w = fmt::format("{}[{}]", pk, j);
          if (!pts[j].IsSequence() || pts[j].size() != 2)
            d.fail(pts[j], w, "expected a [bytes, us] pair, got " + Doc::shown(pts[j]));
          const double bytes = d.number(pts[j][0], w + "[0]"), us = d.number(pts[j][1], w + "[1]");
          if (!(bytes >= 1 && bytes <= 1e15) || (!f.curve.points.empty() && bytes <= f.curve.points.back()[0]))
            d.fail(pts[j][0], w + "[0]",
                   fmt::format("expected a size in bytes from 1 to 1e15, larger than the previous point's, got {}",
                               bytes));
          if (!(us >= 0 && us <= 1e9))
            d.fail(pts[j][1], w + "[1]", fmt::format("expected a time of 0 .. 1e9 us, got {}", us));
          f.curve.points.push_back({bytes, us});
        }
      }
      f.residual = read_residual(d, e, key, {fmt::format("{}@{}", to_string(f.curve.kind), f.curve.ranks), 0, 0, 0});
      c.collectives.push_back(f);
    }
  }
  if (const YAML::Node cl = root["classes"]) {
    if (!cl.IsSequence()) d.fail(cl, "classes", "expected a list, got " + Doc::shown(cl));
    for (size_t i = 0; i < cl.size(); ++i) {
      const std::string key = fmt::format("classes[{}]", i);
      d.keys(cl[i], key, {"class", "samples", "median_rel_error", "max_rel_error"});
      if (!cl[i]["class"]) d.fail(cl[i], key + ".class", "missing");
      c.classes.push_back(read_residual(d, cl[i], key, {d.string(cl[i]["class"], key + ".class"), 0, 0, 0}));
    }
  }
  return c;
}

Calibration load_calibration(const std::string& path) {
  return parse_calibration(read_input_file(path, "calibration YAML"), path);
}

std::string calibration_yaml(const Calibration& c) {
  YAML::Emitter y;
  y << YAML::BeginMap;
  y << YAML::Key << "format" << YAML::Value << "tptune-calibration";
  y << YAML::Key << "version" << YAML::Value << 1;
  y << YAML::Key << "device" << YAML::Value << c.device;
  y << YAML::Key << "environment" << YAML::Value << YAML::DoubleQuoted << c.environment;
  y << YAML::Key << "files" << YAML::Value << YAML::Flow << c.files;
  y << YAML::Key << "params" << YAML::Value << YAML::BeginMap;
  for (const auto& p : c.params) {
    y << YAML::Key << p.name << YAML::Value << YAML::Flow << YAML::BeginMap;
    y << YAML::Key << "value" << YAML::Value << p.value;
    y << YAML::Key << "default" << YAML::Value << p.default_value;
    y << YAML::Key << "class" << YAML::Value << p.op_class;
    if (!p.source.empty()) y << YAML::Key << "source" << YAML::Value << YAML::DoubleQuoted << p.source;
    y << YAML::EndMap;
  }
  y << YAML::EndMap;
  y << YAML::Key << "collectives" << YAML::Value << YAML::BeginSeq;
  for (const auto& f : c.collectives) {
    y << YAML::Flow << YAML::BeginMap;
    y << YAML::Key << "collective" << YAML::Value << std::string(to_string(f.curve.kind));
    y << YAML::Key << "ranks" << YAML::Value << f.curve.ranks;
    y << YAML::Key << "alpha_us" << YAML::Value << f.curve.alpha_us;
    y << YAML::Key << "busbw_GBps" << YAML::Value << f.curve.busbw_GBps;
    if (!f.curve.points.empty()) {
      y << YAML::Key << "points" << YAML::Value << YAML::BeginSeq;
      for (const auto& p : f.curve.points) y << YAML::Flow << YAML::BeginSeq << p[0] << p[1] << YAML::EndSeq;
      y << YAML::EndSeq;
    }
    y << YAML::Key << "samples" << YAML::Value << f.residual.samples;
    y << YAML::Key << "median_rel_error" << YAML::Value << f.residual.median_rel_error;
    y << YAML::Key << "max_rel_error" << YAML::Value << f.residual.max_rel_error;
    y << YAML::EndMap;
  }
  y << YAML::EndSeq;
  y << YAML::Key << "classes" << YAML::Value << YAML::BeginSeq;
  for (const auto& r : c.classes) {
    y << YAML::Flow << YAML::BeginMap;
    y << YAML::Key << "class" << YAML::Value << r.op_class;
    y << YAML::Key << "samples" << YAML::Value << r.samples;
    y << YAML::Key << "median_rel_error" << YAML::Value << r.median_rel_error;
    y << YAML::Key << "max_rel_error" << YAML::Value << r.max_rel_error;
    y << YAML::EndMap;
  }
  y << YAML::EndSeq;
  y << YAML::Key << kVersionStampKey << YAML::Value << YAML::Flow << YAML::BeginMap;
  y << YAML::Key << "version" << YAML::Value << YAML::DoubleQuoted << std::string(version());
  y << YAML::Key << "git_hash" << YAML::Value << YAML::DoubleQuoted << std::string(git_hash());
  y << YAML::EndMap;
  y << YAML::EndMap;
  return std::string("# Written by tp-plan calibrate (sim/calibrate/calibration.h describes the format).\n") +
         y.c_str() + "\n";
}

void save_calibration(const Calibration& c, const std::string& path) {
  write_output("--out", path, calibration_yaml(c));
}

void apply_calibration(CostParams& c, const Calibration& cal) {
  const std::string where = cal.origin.empty() ? "calibration" : cal.origin;
  for (const auto& p : cal.params) set_cost_param(c, p.name, p.value, where);
  for (const auto& f : cal.collectives) {
    bool replaced = false;
    for (auto& m : c.measured_collectives)
      if (m.kind == f.curve.kind && m.ranks == f.curve.ranks) {
        m = f.curve;
        replaced = true;
      }
    if (!replaced) c.measured_collectives.push_back(f.curve);
  }
}

std::vector<std::string> calibration_terms(const Calibration& cal) {
  std::vector<std::string> out;
  const std::string from = cal.origin.empty() ? "fit" : cal.origin;
  for (const auto& p : cal.params) out.push_back(fmt::format("{} {:.4g} ({})", p.name, p.value, from));
  for (const auto& f : cal.collectives)
    out.push_back(fmt::format("{}@{} alpha {:.3g} us, busbw {:.3g} GB/s ({})", to_string(f.curve.kind), f.curve.ranks,
                              f.curve.alpha_us, f.curve.busbw_GBps, from));
  return out;
}

}  // namespace tptune
