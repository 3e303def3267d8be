#include "sim/report/measured_trace.h"

#include <fmt/format.h>

#include <map>

#include "plans/error.h"
#include "plans/input_file.h"
#include "plans/json_text.h"
#include "sim/report/trace.h"

namespace tptune {

namespace {

using nlohmann::json;

// name -> the durations of its occurrences, in order (an op name recurs only across steps of a chunked op).
using Occurrences = std::map<std::string, std::vector<double>>;

}  // namespace

std::vector<ProfiledOp> parse_profile_ops(const std::string& text, const std::string& name, std::string* device,
                                          json* program) {
  const json j = parse_json_text(text, name, "a tp-run profile");
  const JsonDoc doc(name);
  const json* format = j.is_object() ? doc.find(j, "", "format") : nullptr;
  if (format && !format->is_string()) doc.fail("format", "a string", *format);
  if (!format || *format != "tptune-profile")
    throw Error(fmt::format("{}: expected a tp-run profile (\"format\": \"tptune-profile\")", name));
  // Compared as a JSON number, never narrowed first (4294967297 as an int is 1).
  const json* version = doc.find(j, "", "version");
  if (!version || !version->is_number_integer() || *version != 1)
    throw Error(fmt::format("{}: version: expected 1 (the profile format this tp-plan reads)", name));
  if (!j.contains("ops") || !j["ops"].is_array() || j["ops"].empty())
    throw Error(fmt::format("{}: ops: expected a non-empty list of op records", name));
  if (device) {
    *device = "";
    if (j.contains("environment") && j["environment"].is_object()) {
      const json& env = j["environment"];
      auto label = [&](const char* key) {
        const json* v = doc.find(env, "environment", key);
        return v ? doc.string_value(*v, json_key("environment", key)) : std::string("?");
      };
      *device = fmt::format("{}: {}", label("backend"), label("device"));
    }
  }
  if (program) *program = j.contains("program") ? j["program"] : json();
  std::vector<ProfiledOp> ops;
  for (size_t i = 0; i < j["ops"].size(); ++i) {
    const json& r = j["ops"][i];
    if (!r.is_object() || !r.contains("name") || !r["name"].is_string())
      throw Error(fmt::format("{}: ops[{}].name: expected a string", name, i));
    if (!r.contains("time_us") || !r["time_us"].is_object() || !r["time_us"].contains("median") ||
        !r["time_us"]["median"].is_number() || r["time_us"]["median"].get<double>() < 0)
      throw Error(fmt::format("{}: ops[{}].time_us.median: expected a non-negative number", name, i));
    ProfiledOp m;
    m.name = r["name"].get<std::string>();
    m.phase = r.contains("phase") && r["phase"].is_string() ? r["phase"].get<std::string>() : "";
    m.kind = r.contains("kind") && r["kind"].is_string() ? r["kind"].get<std::string>() : "";
    m.median_us = r["time_us"]["median"].get<double>();
    ops.push_back(std::move(m));
  }
  return ops;
}

std::vector<ProfiledOp> load_profile_ops(const std::string& path, std::string* device, json* program) {
  return parse_profile_ops(read_input_file(path, "tp-run profile JSON", kMaxDataInputBytes), path, device, program);
}

json chrome_trace_with_measured(const Program& p, const OpCosts& costs, const Timeline& tl,
                                const std::vector<ProfiledOp>& measured, const std::string& label) {
  json trace = chrome_trace(p, costs, tl);
  json& events = trace["traceEvents"];
  // Simulated durations by name and occurrence (in start order, the order the profile executed them in).
  Occurrences predicted;
  std::map<std::string, std::vector<size_t>> sim_events;
  for (size_t e = 0; e < events.size(); ++e)
    if (events[e].value("ph", "") == "X") sim_events[events[e]["name"].get<std::string>()].push_back(e);
  for (auto& [name, idx] : sim_events) {
    std::stable_sort(idx.begin(), idx.end(),
                     [&](size_t a, size_t b) { return events[a]["ts"].get<double>() < events[b]["ts"].get<double>(); });
    for (size_t e : idx) predicted[name].push_back(events[e]["dur"].get<double>());
  }
  std::map<std::string, size_t> seen;
  size_t matched = 0;
  json added = json::array();
  added.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"args", {{"name", label}}}});
  added.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", 0}, {"args", {{"name", "serialized"}}}});
  double t = 0;
  for (const ProfiledOp& m : measured) {
    json args = {{"phase", m.phase}, {"kind", m.kind}, {"measured_us", m.median_us}};
    const size_t k = seen[m.name]++;
    auto it = predicted.find(m.name);
    if (it != predicted.end() && k < it->second.size()) {
      const double pred = it->second[k];
      args["predicted_us"] = pred;
      if (pred > 0) args["ratio"] = m.median_us / pred;
      events[sim_events[m.name][k]]["args"]["measured_us"] = m.median_us;
      ++matched;
    } else {
      args["predicted_us"] = nullptr;  // not in the simulated Program
    }
    added.push_back({{"name", m.name},
                     {"cat", m.phase},
                     {"ph", "X"},
                     {"pid", 1},
                     {"tid", 0},
                     {"ts", t},
                     {"dur", m.median_us},
                     {"args", std::move(args)}});
    t += m.median_us;
  }
  if (matched == 0)
    throw Error(
        fmt::format("{}: none of its {} op names occurs in the simulated Program: profile the same config and "
                    "plan (tp-run profile CONFIG --plan ...)",
                    label, measured.size()));
  for (auto& e : added) events.push_back(std::move(e));
  trace["otherData"] = {{"measured_ops", measured.size()}, {"matched_by_name", matched}};
  return trace;
}

}  // namespace tptune
