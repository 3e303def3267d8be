// `tp-plan check`'s verdict phrases and its text report (sim/check/check_report.h).
#include "sim/check/check_report.h"

#include <fmt/format.h>

#include <cmath>
#include <iterator>

#include "sim/check/check_noise.h"

namespace tptune {

namespace {

template <typename... T>
void append(std::string& o, fmt::format_string<T...> f, T&&... args) {
  fmt::format_to(std::back_inserter(o), f, std::forward<T>(args)...);
}

std::string clip(const std::string& s, size_t width) { return s.size() > width ? s.substr(0, width - 3) + "..." : s; }

void append_deltas(std::string& o, const char* title, const std::vector<Delta>& d, size_t top_n, int precision) {
  if (d.empty()) return;
  append(o, "\n  {:<52} {:>11} {:>11} {:>11}\n", title, "baseline", "now", "delta");
  for (size_t i = 0; i < d.size() && i < top_n; ++i) {
    const Delta& x = d[i];
    const char* tag = x.only_base ? "  (gone)" : x.only_now ? "  (new)" : "";
    append(o, "    {:<50} {:>11.{}f} {:>11.{}f} {:>+11.{}f}{}\n", clip(x.what, 50), x.base, precision, x.now, precision,
           x.delta(), precision, tag);
  }
  if (d.size() > top_n) append(o, "    ... and {} more\n", d.size() - top_n);
}

}  // namespace

std::string check_verdict(const CheckResult& r) {
  switch (r.exit_status()) {
    case kExitPass:
      return "PASS";
    case kExitRegression:
      return "FAIL";
    default:
      return "CHANGED (baseline from another tptune)";
  }
}

std::string build_note(const CheckResult& r) {
  if (!r.other_build()) return "";
  const std::string who = r.baseline_build ? fmt::format("the baseline was written by {}", r.baseline_build->describe())
                                           : std::string(
                                                 "the baseline carries no tptune version (written before versions were "
                                                 "stamped)");
  return fmt::format(
      "{}, this is {}: a change may come from tptune, not from your plan; re-baseline with this tptune from the plan "
      "before your change (`tp-plan check ... --update` on the base branch) and commit it",
      who, r.now_build.describe());
}

std::string percent_text(double percent) { return fmt::format("{:g} %", percent); }

std::string metric_verdict(const MetricCheck& m) {
  const char* head = m.fail ? "FAIL" : "ok";
  if (std::abs(m.worse_percent) <= kNoisePercent) return fmt::format("{}: unchanged", head);
  if (m.worse_percent < 0) return fmt::format("{}: {} by {:.2f} %", head, m.better_word, -m.worse_percent);
  return fmt::format("{}: {} by {:.2f} % (limit {})", head, m.worse_word, m.worse_percent,
                     percent_text(m.limit_percent));
}

std::string check_advice(const CheckResult& r, const CheckAdviceWords& words) {
  switch (r.exit_status()) {
    case kExitPass:
      return !r.breakdown.empty() || !r.memory.empty() ? words.moved : "";
    case kExitRegression:
      return words.regression;
    default:
      return fmt::format(fmt::runtime(words.other_build), kExitOtherBuild);
  }
}

std::string format_check(const CheckResult& r, const std::string& baseline_path, size_t top_n) {
  std::string o;
  append(o, "tp-plan check: {} against {} (max slowdown {}, max memory growth {})\n", check_verdict(r), baseline_path,
         percent_text(r.tolerances.max_slowdown_percent), percent_text(r.tolerances.max_memory_growth_percent));
  if (r.other_build()) append(o, "  note: {}\n", build_note(r));
  if (!r.setup_changes.empty()) {
    append(o, "  setup changed:");
    for (size_t i = 0; i < r.setup_changes.size(); ++i) append(o, "{} {}", i ? ";" : "", r.setup_changes[i]);
    append(o, "\n");
  }
  append(o, "\n  {:<20} {:>12} {:>12} {:>9}\n", "", "baseline", "now", "change");
  for (const MetricCheck& m : r.metrics)
    append(o, "  {:<20} {:>12.2f} {:>12.2f} {:>9}  {}\n", m.name, m.base, m.now,
           fmt::format("{:+.2f} %", m.change_percent), metric_verdict(m));
  append(o, "  {:<20} {:>12} {:>12} {:>9}  {}\n", "fits in memory", r.base_fits ? "yes" : "no",
         r.now_fits ? "yes" : "no", "", r.base_fits && !r.now_fits ? "FAIL: no longer fits" : "ok");

  append_deltas(o, "where the step time moved (ms: these add up to it)", r.breakdown, top_n, 2);
  append_deltas(o, "op classes that moved most (busy ms per step)", r.kinds, top_n, 2);
  append_deltas(o, "ops that moved most (ms per step, all instances)", r.ops, top_n, 3);
  append_deltas(o, "memory that moved (GiB per GPU)", r.memory, top_n, 3);
  o += check_advice(
      r,
      {.moved = "\n  the prediction moved within the tolerances; refresh the baseline with --update if intended\n",
       .regression = "\n  if this change is intended, write the new baseline with --update and commit it\n",
       .other_build = "\n  beyond the tolerances against another tptune's baseline (exit {}): see the note above\n"});
  return o;
}

}  // namespace tptune
