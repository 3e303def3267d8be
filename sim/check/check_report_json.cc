// `tp-plan check --format json` (sim/check/check_report.h).
#include "plans/util/version.h"
#include "sim/check/check_report.h"

namespace tptune {

namespace {

nlohmann::json deltas(const std::vector<Delta>& d) {
  nlohmann::json out = nlohmann::json::array();
  for (const Delta& x : d)
    out.push_back({{"what", x.what},
                   {"baseline", x.base},
                   {"now", x.now},
                   {"delta", x.delta()},
                   {"only_baseline", x.only_base},
                   {"only_now", x.only_now}});
  return out;
}

}  // namespace

nlohmann::json check_json(const CheckResult& r, const std::string& baseline_path) {
  nlohmann::json j = json_header("tptune-check-result", 1);
  j["verdict"] = check_verdict(r);
  j["exit_status"] = r.exit_status();
  j["baseline"] = baseline_path;
  j["baseline_written_by"] = r.baseline_build ? to_json(*r.baseline_build) : nlohmann::json();
  j["same_tptune"] = !r.other_build();
  j["note"] = build_note(r);
  j["tolerances"] = {{"max_slowdown_percent", r.tolerances.max_slowdown_percent},
                     {"max_memory_growth_percent", r.tolerances.max_memory_growth_percent}};
  nlohmann::json metrics = nlohmann::json::array();
  for (const MetricCheck& m : r.metrics)
    metrics.push_back({{"name", m.name},
                       {"baseline", m.base},
                       {"now", m.now},
                       {"change_percent", m.change_percent},
                       {"worse_percent", m.worse_percent},
                       {"limit_percent", m.limit_percent},
                       {"fail", m.fail},
                       {"verdict", metric_verdict(m)}});
  j["metrics"] = metrics;
  j["fits_in_memory"] = {{"baseline", r.base_fits}, {"now", r.now_fits}};
  j["setup"] = r.setup;
  j["setup_changes"] = r.setup_changes;
  j["breakdown_ms"] = deltas(r.breakdown);
  j["op_classes_ms"] = deltas(r.kinds);
  j["ops_ms"] = deltas(r.ops);
  j["memory_gib"] = deltas(r.memory);
  return with_version_stamp(std::move(j));
}

}  // namespace tptune
