#pragma once
// `tp-plan check`'s report of a CheckResult (sim/check/compare.h), in the three --format's:
//
//   format_check(r, "plan-baseline.json")            text: one screen for a terminal or a CI log
//   format_check_markdown(r, "plan-baseline.json")   markdown: a comment a CI job posts on the pull request
//   check_json(r, "plan-baseline.json")              JSON (format "tptune-check-result", version 1, stamped) for tools
//
// All three say the same things in the same order: the verdict; when the baseline was written by another tptune
// (or has no stamp), a note naming both builds and what to do (the change may come from tptune, not from the plan;
// re-baseline with --update); what changed in the setup; each metric baseline -> now with its change and its verdict
// against the limit, in percent ("slower by 3.20 % (limit 5 %)"); then what moved: the step time's breakdown, the top
// `top_n` op classes and ops (every one in JSON), and the memory terms. Text and markdown print no version unless the
// builds differ, so a report of the same prediction reads the same from every build.
#include <nlohmann/json.hpp>
#include <string>

#include "sim/check/compare.h"

namespace tptune {

// "PASS", "FAIL" (exit 1) or "CHANGED (baseline from another tptune)" (exit 4).
std::string check_verdict(const CheckResult& r);

// Empty when the baseline is this build's; else one sentence: "the baseline was written by tptune 0.0.9 (git
// 1a2b3c4), this is tptune 0.1.0 (git 5e6f7a8): a change may come from tptune, not from your plan; ...".
std::string build_note(const CheckResult& r);

// One metric's verdict against its limit: "FAIL: slower by 3.20 % (limit 2 %)", "ok: faster by 5.00 %",
// "ok: larger by 0.50 % (limit 1 %)", "ok: unchanged".
std::string metric_verdict(const MetricCheck& m);

// A tolerance as it is written: 2 -> "2 %", 0.5 -> "0.5 %".
std::string percent_text(double percent);

// The closing advice of a report, each rendering (text, Markdown) in its words, decided once by check_advice(): after a
// pass, `moved` when the prediction moved within the tolerances (nothing when it did not move); after a regression,
// `regression`; beyond the tolerances against another tptune's baseline, `other_build` with the exit status in place
// of its {}.
struct CheckAdviceWords {
  const char* moved;
  const char* regression;
  const char* other_build;
};
std::string check_advice(const CheckResult& r, const CheckAdviceWords& words);

std::string format_check(const CheckResult& r, const std::string& baseline_path, size_t top_n = 6);
std::string format_check_markdown(const CheckResult& r, const std::string& baseline_path, size_t top_n = 8);
// Every moved term, op class and op (no top_n), the exit status, both builds; stamped with this build.
nlohmann::json check_json(const CheckResult& r, const std::string& baseline_path);

}  // namespace tptune
