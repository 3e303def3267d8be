#pragma once
// Comparing a plan's prediction with its check baseline: the logic of `tp-plan check` (tools/tp_plan_check.cc).
//
//   CheckResult res = compare(read_baseline(path), baseline_from_report(report), {0.02, 0.01});
//   fmt::print("{}", format_check(res, path));   // exit res.pass ? 0 : 1
//
// Fails when, relative to the baseline,
//   step time       grew by more than max_slowdown          (now / base - 1 > max_slowdown)
//   tokens/s per GPU fell by more than max_slowdown         (base / now - 1 > max_slowdown: the same slowdown,
//                                                             measured in time per token; differs from the step
//                                                             time when the local batch changed)
//   peak memory     grew by more than max_memory_growth     (now / base - 1 > max_memory_growth)
//   the plan no longer fits in GPU memory (it did before).
// Improvements pass (and are reported, so that the baseline can be refreshed with --update). The explanation lists
// what moved: the step time's breakdown (compute + exposed TP + exposed DP communication = step time, so these
// account for the whole change), the op classes and the individual ops whose time per step moved most, and the
// memory terms that moved, each "baseline -> now (delta)".
#include <string>
#include <vector>

#include "sim/check/baseline.h"

namespace tptune {

struct CheckTolerances {
  double max_slowdown = 0.02;       // fraction: 0.02 = 2 %
  double max_memory_growth = 0.01;  // fraction
};

struct MetricCheck {
  std::string name;  // "step time (ms)"
  double base = 0, now = 0;
  double change = 0;  // now / base - 1
  double worse = 0;   // how much worse, as a fraction (negative: better)
  double limit = 0;   // the tolerance on `worse`
  bool fail = false;
};

struct Delta {
  std::string what;  // an op key, op class or breakdown term
  double base = 0, now = 0;
  bool only_base = false, only_now = false;  // an op that disappeared / appeared
  double delta() const { return now - base; }
};

struct CheckResult {
  bool pass = true;
  std::vector<MetricCheck> metrics;  // step time, tokens/s per GPU, peak memory
  bool base_fits = true, now_fits = true;
  std::vector<std::string> setup_changes;  // "tp 8 -> 4"
  std::vector<Delta> breakdown;            // compute, exposed_tp_comm, exposed_dp_comm
  std::vector<Delta> kinds;                // op classes, largest |delta| first
  std::vector<Delta> ops;                  // ops, largest |delta| first
  std::vector<Delta> memory;               // memory terms, largest |delta| first
  CheckTolerances tolerances;
};

CheckResult compare(const CheckBaseline& base, const CheckBaseline& now, const CheckTolerances& tol);

// One screen: verdict, setup changes, the metrics against their limits, and (when something moved) the breakdown,
// the top `top_n` op classes and ops, and the memory terms that moved. `baseline_path` names the baseline.
std::string format_check(const CheckResult& r, const std::string& baseline_path, size_t top_n = 6);

// "2%", "2 %", "2" (percent) or "0.5%" -> 0.02 / 0.005; tptune::Error naming `option` for anything else (negative,
// not finite, not a number).
double parse_percent(const std::string& text, const std::string& option);

}  // namespace tptune
