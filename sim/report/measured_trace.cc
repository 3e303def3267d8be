#include "sim/report/measured_trace.h"

#include <fmt/format.h>

#include <map>

#include "plans/program/profile_format.h"
#include "plans/util/error.h"
#include "plans/util/json_text.h"
#include "sim/profiled_program.h"
#include "sim/report/trace.h"

namespace tptune {

namespace {

using nlohmann::json;

// name -> the durations of its occurrences, in order (an op name recurs only across steps of a chunked op).
using Occurrences = std::map<std::string, std::vector<double>>;

// The trace's view of a profile (plans/program/profile_format.h reads it), checked against the simulated Program
// (sim/profiled_program.h): each measured record's name, phase, kind and median.
std::vector<ProfiledOp> profiled_ops(const Profile& prof, const std::string& name, const Program& simulated,
                                     std::string* device) {
  check_profile(prof, simulated.plan, simulated, name, ProfiledAgainst::simulated);
  const JsonDoc doc(name);
  if (device)
    *device =
        prof.environment.is_null() ? "" : fmt::format("{}: {}", prof.backend.value_or("?"), prof.device.value_or("?"));
  std::vector<ProfiledOp> ops;
  ops.reserve(prof.ops.size());
  for (size_t i = 0; i < prof.ops.size(); ++i) {
    const ProfileOp& r = prof.ops[i];
    // An op tp-run did not run ("measured": false: a single-process profile's collectives, a pipeline's optimizer)
    // has no time to lay on the track; its simulated event stays without measured_us.
    if (!r.measured) continue;
    const double median = require(r.time_us->median, doc, fmt::format("ops[{}].time_us.median", i));
    ops.push_back({r.name, r.phase, r.kind.value_or(""), median});
  }
  return ops;
}

}  // namespace

std::vector<ProfiledOp> parse_profile_ops(const std::string& text, const std::string& name, const Program& simulated,
                                          std::string* device) {
  return profiled_ops(parse_profile_text(text, name), name, simulated, device);
}

std::vector<ProfiledOp> load_profile_ops(const std::string& path, const Program& simulated, std::string* device) {
  return profiled_ops(load_profile(path), path, simulated, device);
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
