#include "sim/report/pipeline_trace.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "plans/util/error.h"
#include "sim/report/pipeline_text.h"

namespace tptune {

nlohmann::json pipeline_chrome_trace(const PipelineReport& p) {
  using nlohmann::json;
  if (p.pp <= 1) throw Error("trace: not a pipeline-parallel step (pp 1)");
  check_pipeline_listed(p, "--trace");
  json events = json::array();
  events.push_back({{"name", "process_name"},
                    {"ph", "M"},
                    {"pid", 0},
                    {"args",
                     {{"name", fmt::format("pipeline (simulated): one pass of {} on pp {}, {} microbatches",
                                           to_string(p.schedule), p.pp, p.microbatches)}}}});
  for (size_t k = 0; k < p.timeline.size(); ++k) {
    const std::string stages =
        k < p.ranks.size() ? fmt::format(" (stages {})", fmt::join(p.ranks[k].stages, ", ")) : "";
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", k},
                      {"args", {{"name", fmt::format("pp rank {}{}", k, stages)}}}});
    events.push_back(
        {{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 0}, {"tid", k}, {"args", {{"sort_index", k}}}});
  }
  for (size_t k = 0; k < p.timeline.size(); ++k)
    for (const TimedPipelineAction& a : p.timeline[k])
      events.push_back(
          {{"name", fmt::format("{} s{} mb{}", to_string(a.action.kind), a.action.stage, a.action.microbatch)},
           {"cat", std::string(to_string(a.action.kind))},
           {"ph", "X"},
           {"pid", 0},
           {"tid", k},
           {"ts", a.start_us},
           {"dur", a.end_us - a.start_us},
           {"args",
            {{"action", to_string(a.action)},
             {"stage", a.action.stage},
             {"microbatch", a.action.microbatch},
             {"kind", std::string(pipeline_action_words(a.action.kind))}}}});
  return json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

}  // namespace tptune
