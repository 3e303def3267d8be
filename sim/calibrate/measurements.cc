#include "sim/calibrate/measurements.h"

#include <fmt/format.h>

#include <limits>
#include <map>

#include "plans/language/config.h"
#include "plans/language/pipeline_parallel.h"
#include "plans/language/plan.h"
#include "plans/lower/lower.h"
#include "plans/program/profile_format.h"
#include "plans/util/error.h"
#include "plans/util/input_file.h"
#include "plans/util/json_text.h"
#include "plans/util/limits.h"
#include "sim/profiled_program.h"

namespace tptune {

namespace {

using nlohmann::json;

// The typed reads of a profile or bench file: JsonDoc's checks (plans/util/json_text.h), with the statistic to read.
struct Reader {
  std::string path;
  const char* stat = "median";
  JsonDoc doc{path};
  [[noreturn]] void fail(const std::string& where, const std::string& what) const { doc.fail(where, what); }
  const json& field(const json& j, const std::string& where, const char* key) const {
    return doc.member(j, where, key);
  }
  // A time in us (plans/program/profile_format.h: 0 .. 1e9 us, the calibration file's own bound on a time too).
  double number(const json& j, const std::string& where, const char* key) const {
    return measured_time_us(doc, field(j, where, key), json_key(where, key));
  }
  // A non-negative integer, at most `hi` (checked before it is narrowed to an int anywhere).
  int64_t integer(const json& j, const std::string& where, const char* key,
                  int64_t hi = std::numeric_limits<int64_t>::max()) const {
    return doc.integer(j, where, key, {0, hi});
  }
  std::string string(const json& j, const std::string& where, const char* key) const {
    return doc.string(j, where, key);
  }
};

CollectiveKind parse_collective(const Reader& r, const std::string& where, const std::string& s) {
  for (CollectiveKind k : {CollectiveKind::all_reduce, CollectiveKind::all_gather, CollectiveKind::reduce_scatter,
                           CollectiveKind::all_to_all, CollectiveKind::p2p})
    if (to_string(k) == s) return k;
  if (s == "send_recv") return CollectiveKind::p2p;
  r.fail(where, fmt::format("expected all_reduce, all_gather, reduce_scatter, all_to_all or p2p, got '{}'", s));
}

// A profile (read by plans/program/profile_format.h) becomes its Program again, checked against it
// (sim/profiled_program.h: its op records are expand()'s ops one to one), each timed record one of its template ops.
void load_profile(const Reader& r, const json& j, Measurements& m) {
  const Profile prof = parse_profile(j, m.path);
  const JsonDoc& doc = r.doc;
  ProfiledProgram profiled = profiled_program(prof, m.path);
  Program& p = profiled.program;
  const Plan& plan = profiled.plan;
  if (plan.pp_degree > 1) m.pipeline = MeasuredPipeline{profiled.config.model, profiled.config.training, plan, {}, {}};
  // A single-GPU profile of tp N local shapes (plans/program/profile_format.h, local_shapes_of_tp) ran on one process.
  const bool single = prof.local_shapes_of_tp.has_value();
  const int64_t pp = plan.pp_degree;
  if (!single && p.tp * p.dp * pp != m.ranks)
    r.fail("program",
           pp > 1 ? fmt::format("tp {} x dp {} x pp {} does not match environment.ranks {}", p.tp, p.dp, pp, m.ranks)
                  : fmt::format("tp {} x dp {} does not match environment.ranks {}", p.tp, p.dp, m.ranks));
  // The point-to-point times between neighbouring pp ranks: collective samples (p2p, a group of 2) for the fit.
  if (m.pipeline)
    for (size_t i = 0; i < prof.pipeline->p2p.size(); ++i) {
      const ProfileP2P& x = prof.pipeline->p2p[i];
      MeasuredOp o;
      o.source = MeasuredOp::Source::collective;
      o.name = fmt::format("pipeline.p2p[{}]", i);
      o.collective = CollectiveKind::p2p;
      o.bytes = x.bytes;
      o.group_size = 2;
      o.time_us =
          require(*x.time_us.statistic(r.stat), doc, json_key(fmt::format("pipeline.p2p[{}].time_us", i), r.stat));
      m.ops.push_back(std::move(o));
    }
  if (m.pipeline)
    for (const ProfilePipelineRank& pr : prof.pipeline->ranks) {
      m.pipeline->rank_end_us.push_back(pr.end_us);
      m.pipeline->rank_busy_us.push_back(pr.busy_us);
    }
  // Record i is op i of expand(p) (checked above): its template op is found by address.
  const FlatProgram flat = expand(p);
  for (size_t i = 0; i < prof.ops.size(); ++i) {
    const ProfileOp& rec = prof.ops[i];
    if (!rec.measured) {  // a collective a single-GPU profile could not run: nothing to fit
      m.unseeded_collectives += !rec.seeded_from_local;
      continue;
    }
    const Op& op = *flat.ops[i].op;
    MeasuredOp o;
    o.source = MeasuredOp::Source::program;
    o.name = rec.name;
    for (size_t s = 0; s < p.segments.size(); ++s) {
      const auto& ops = p.segments[s].ops;
      if (!ops.empty() && &op >= &ops.front() && &op <= &ops.back()) {
        o.segment = static_cast<int>(s);
        o.op = static_cast<int>(&op - &ops.front());
      }
    }
    if (const auto* c = std::get_if<CollectiveOp>(&op.kind)) {
      o.collective = c->kind;
      o.bytes = c->bytes;
      o.group_size = c->group == Group::tp   ? p.tp
                     : c->group == Group::dp ? p.dp
                     : c->group == Group::cp ? p.cp
                                             : p.dp_replicate;
    }
    o.time_us = require(*rec.time_us->statistic(r.stat), doc, json_key(fmt::format("ops[{}].time_us", i), r.stat));
    m.ops.push_back(std::move(o));
  }
  if (prof.step_wall)
    m.step_wall_us = require(*prof.step_wall->time_us.statistic(r.stat), doc, json_key("step_wall_us", r.stat));
  if (single) {
    if (*prof.local_shapes_of_tp != p.tp)
      r.fail("local_shapes_of_tp",
             fmt::format("{}, but the profiled Program is lowered for tp {}", *prof.local_shapes_of_tp, p.tp));
    m.local_shapes_of_tp = p.tp;
    if (prof.compute_wall)
      m.compute_wall_us =
          require(*prof.compute_wall->time_us.statistic(r.stat), doc, json_key("compute_wall_us", r.stat));
  }
  m.program = std::move(p);
}

void load_bench(const Reader& r, const json& j, Measurements& m) {
  const std::string bench = r.string(j, "", "bench");
  const json& results = r.field(j, "", "results");
  if (!results.is_array() || results.empty()) r.fail("results", "expected a non-empty list");
  for (size_t i = 0; i < results.size(); ++i) {
    const std::string w = fmt::format("results[{}]", i);
    const json& rec = results[i];
    MeasuredOp o;
    o.time_us = r.number(r.field(rec, w, "time_us"), w + ".time_us", r.stat);
    if (bench == "gemm") {
      o.source = MeasuredOp::Source::gemm;
      o.gemm.m = r.integer(rec, w, "m");
      o.gemm.n = r.integer(rec, w, "n");
      o.gemm.k = r.integer(rec, w, "k");
      o.gemm.a_dtype = o.gemm.b_dtype = o.gemm.c_dtype = parse_dtype(r.string(rec, w, "dtype"), m.path + ": " + w);
      o.name = fmt::format("gemm {}x{}x{}", o.gemm.m, o.gemm.n, o.gemm.k);
    } else if (bench == "collectives") {
      o.source = MeasuredOp::Source::collective;
      o.collective = parse_collective(r, w + ".collective", r.string(rec, w, "collective"));
      o.bytes = r.integer(rec, w, "bytes");
      o.group_size = static_cast<int>(r.doc.integer(rec, w, "ranks", limits::world_size));
      o.name = fmt::format("{} {} B on {}", to_string(o.collective), o.bytes, o.group_size);
    } else if (bench == "memory") {
      o.source = MeasuredOp::Source::memory;
      o.bytes = r.integer(rec, w, "bytes");
      o.name = fmt::format("{} {} B", r.string(rec, w, "kernel"), o.bytes);
    } else {
      r.fail("bench", fmt::format("expected gemm, collectives or memory, got '{}'", bench));
    }
    m.ops.push_back(std::move(o));
  }
  if (bench == "gemm" && j.contains("sweep")) {
    const json& sw = j["sweep"];
    if (r.integer(sw, "sweep", "gemms") != static_cast<int64_t>(results.size()))
      r.fail("sweep.gemms", fmt::format("expected {} (one per result)", results.size()));
    m.sweep_us = r.number(r.field(sw, "sweep", "time_us"), "sweep.time_us", r.stat);
  }
}

}  // namespace

bool oversubscribed(const Measurements& m) {
  const auto cores = m.environment.find("cores");
  // Compared as JSON numbers: a count past INT_MAX must not be narrowed (wrapped) into a small one first.
  return cores != m.environment.end() && cores->is_number_integer() && *cores > 0 && *cores < m.ranks;
}

std::string environment_key(const json& env) {
  std::string libs;
  if (env.contains("libraries") && env["libraries"].is_object())
    for (const auto& [k, v] : env["libraries"].items())
      libs += fmt::format("{}{} {}", libs.empty() ? "" : ", ", k, v.is_string() ? v.get<std::string>() : v.dump());
  auto str = [&](const char* k) { return env.contains(k) && env[k].is_string() ? env[k].get<std::string>() : "?"; };
  auto num = [&](const char* k) { return env.contains(k) ? env[k].dump() : "?"; };
  return fmt::format("{} | {} | threads {} | {}", str("backend"), str("device"), num("threads_per_rank"), libs);
}

std::string environment_device(const json& env, const std::string& path) {
  const std::string backend =
      env.contains("backend") && env["backend"].is_string() ? env["backend"].get<std::string>() : "";
  if (backend == "cpu") return "cpu";
  if (env.contains("device_preset") && env["device_preset"].is_string()) return env["device_preset"].get<std::string>();
  throw Error(fmt::format("{}: environment.backend: expected cpu (or a device_preset naming the GPU preset), got '{}'",
                          path, backend));
}

Measurements parse_measurements(const json& j, const std::string& path, const std::string& statistic) {
  if (statistic != "median" && statistic != "min")
    throw Error(fmt::format("--statistic: expected median or min, got '{}'", statistic));
  Reader r{path, statistic == "min" ? "min" : "median"};
  Measurements m;
  m.path = path;
  if (!j.is_object()) r.fail("top level", "expected a JSON object (a tptune profile or bench file)");
  m.format = r.string(j, "", "format");
  if (m.format != "tptune-profile" && m.format != "tptune-bench")
    r.fail("format", fmt::format("expected tptune-profile or tptune-bench, got '{}'", m.format));
  if (r.integer(j, "", "version") != 1) r.fail("version", "expected 1 (the only version this tp-plan reads)");
  m.environment = r.field(j, "", "environment");
  r.string(m.environment, "environment", "backend");
  r.string(m.environment, "environment", "device");
  m.ranks = static_cast<int>(r.doc.integer(m.environment, "environment", "ranks", limits::world_size));
  environment_device(m.environment, path);
  if (m.format == "tptune-profile")
    load_profile(r, j, m);
  else
    load_bench(r, j, m);
  return m;
}

Measurements load_measurements(const std::string& path, const std::string& statistic) {
  const std::string text = read_input_file(path, "tp-run profile or bench JSON", kMaxDataInputBytes);
  // Syntax errors: "PATH:LINE: invalid JSON (expected ...): what" (plans/util/json_text.h).
  return parse_measurements(parse_json_text(text, path, "a tp-run profile or bench file"), path, statistic);
}

}  // namespace tptune
