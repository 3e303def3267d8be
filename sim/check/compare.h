#pragma once
// Comparing a plan's prediction with its check baseline: the logic of `tp-plan check` (tools/tp_plan/check.cc).
//
//   CheckResult res = compare(read_baseline(path), baseline_from_report(report), {2, 1});   // percent
//   fmt::print("{}", format_check(res, path));   // sim/check/check_report.h: text, markdown or JSON
//   return res.exit_status();
//
// Every tolerance and relative change is in percent: 5 means 5 %. Fails when, relative to the baseline,
//   step time       grew by more than max_slowdown_percent       (100 (now / base - 1) > max_slowdown_percent)
//   tokens/s per GPU fell by more than max_slowdown_percent      (100 (base / now - 1): the same slowdown, measured
//                                                                  in time per token; differs from the step time
//                                                                  when the local batch changed)
//   peak memory     grew by more than max_memory_growth_percent  (100 (now / base - 1))
//   the plan no longer fits in GPU memory (it did before).
// Improvements pass (and are reported, so that the baseline can be refreshed with --update). The explanation lists
// what moved: the step time's breakdown (compute + exposed TP + exposed DP communication = step time, so these
// account for the whole change), the op classes and the individual ops whose time per step moved most, and the
// memory terms that moved, each "baseline -> now (delta)".
//
// Which tptune predicted the baseline (sim/check/tool_build.h) decides what a failure means. A baseline written by
// another build (another version or git hash), or one without the stamp, holds another cost model's predictions:
// the comparison is still made and shown, with a note naming both builds, and a change beyond the tolerances exits
// with its own status (kExitOtherBuild), so that CI tells "tptune changed" from "your plan got slower". Exit status:
//   0  within the tolerances (also against another build's baseline: the note says the numbers mix both changes)
//   1  beyond them, against a baseline this build wrote: the plan (config, plan, cluster) regressed
//   4  beyond them, against another build's baseline: the change may come from tptune; re-baseline with --update
// (2 is bad input and 3 an internal error: tools/tp_plan/main.cc.)
#include <optional>
#include <string>
#include <vector>

#include "sim/check/baseline.h"
#include "sim/check/tool_build.h"

namespace tptune {

inline constexpr int kExitPass = 0;
inline constexpr int kExitRegression = 1;
inline constexpr int kExitOtherBuild = 4;

// The largest tolerance parse_percent accepts, in percent.
inline constexpr double kMaxTolerancePercent = 1000;

struct CheckTolerances {
  double max_slowdown_percent = 2;       // 2 means 2 %
  double max_memory_growth_percent = 1;  // percent
};

struct MetricCheck {
  std::string name;  // "step time (ms)"
  double base = 0, now = 0;
  double change_percent = 0;  // 100 (now / base - 1)
  double worse_percent = 0;   // how much worse, in percent (negative: better)
  double limit_percent = 0;   // the tolerance on `worse_percent`
  bool fail = false;
  std::string worse_word, better_word;  // "slower" / "faster", "slower per token", "larger" / "smaller"
};

struct Delta {
  std::string what;  // an op key, op class or breakdown term
  double base = 0, now = 0;
  bool only_base = false, only_now = false;  // an op that disappeared / appeared
  double delta() const { return now - base; }
};

struct CheckResult {
  bool pass = true;                  // within every tolerance, and still fits if it did
  std::vector<MetricCheck> metrics;  // step time, tokens/s per GPU, peak memory
  bool base_fits = true, now_fits = true;
  std::map<std::string, std::string> setup;  // what is predicted now (model, plan, tp, ...: CheckBaseline::setup)
  std::vector<std::string> setup_changes;    // "tp 8 -> 4"
  std::vector<Delta> breakdown;              // compute, exposed_tp_comm, exposed_dp_comm
  std::vector<Delta> kinds;                  // op classes, largest |delta| first
  std::vector<Delta> ops;                    // ops, largest |delta| first
  std::vector<Delta> memory;                 // memory terms, largest |delta| first
  CheckTolerances tolerances;
  std::optional<ToolBuild> baseline_build;  // who wrote the baseline (nullopt: no stamp)
  ToolBuild now_build;                      // who predicted now

  // The baseline was not written by this build (or carries no stamp).
  bool other_build() const { return !baseline_build || *baseline_build != now_build; }
  // 0, 1 or 4, as above.
  int exit_status() const { return pass ? kExitPass : other_build() ? kExitOtherBuild : kExitRegression; }
};

// `now.written_by` absent (a prediction made here) means this_build().
CheckResult compare(const CheckBaseline& base, const CheckBaseline& now, const CheckTolerances& tol);

// "2%", "2 %", "2" or "0.5%" -> 2 / 0.5: a tolerance in percent (5 means 5 %, not 0.05), 0 to 1000. tptune::Error
// naming `option` and the unit for anything else (negative, above 1000, not finite, not a number).
double parse_percent(const std::string& text, const std::string& option);

}  // namespace tptune
