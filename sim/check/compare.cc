// `tp-plan check`'s comparison and its one-screen report (sim/check/compare.h).
#include "sim/check/compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <map>

#include "plans/error.h"

namespace tptune {

namespace {

// Relative changes below this are floating-point noise, not a change of the prediction.
constexpr double kNoise = 1e-9;

MetricCheck metric(const char* name, double base, double now, double worse, double limit) {
  MetricCheck m;
  m.name = name;
  m.base = base;
  m.now = now;
  m.change = base != 0 ? now / base - 1 : 0;
  m.worse = worse;
  m.limit = limit;
  m.fail = worse > limit + kNoise;
  return m;
}

bool moved(const Delta& d) {
  return d.only_base || d.only_now || std::abs(d.delta()) > kNoise * std::max(std::abs(d.base), std::abs(d.now));
}

std::vector<Delta> diff_maps(const std::map<std::string, double>& base, const std::map<std::string, double>& now) {
  std::vector<Delta> out;
  for (const auto& [k, v] : base) {
    auto it = now.find(k);
    const bool gone = it == now.end();
    out.push_back({k, v, gone ? 0 : it->second, gone, false});
  }
  for (const auto& [k, v] : now)
    if (!base.count(k)) out.push_back({k, 0, v, false, true});
  return out;
}

void sort_by_size(std::vector<Delta>& d) {
  d.erase(std::remove_if(d.begin(), d.end(), [](const Delta& x) { return !moved(x); }), d.end());
  std::stable_sort(d.begin(), d.end(),
                   [](const Delta& a, const Delta& b) { return std::abs(a.delta()) > std::abs(b.delta()); });
}

template <typename... T>
void append(std::string& o, fmt::format_string<T...> f, T&&... args) {
  fmt::format_to(std::back_inserter(o), f, std::forward<T>(args)...);
}

std::string signed_pct(double fraction) { return fmt::format("{:+.2f}%", 100 * fraction); }

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

CheckResult compare(const CheckBaseline& base, const CheckBaseline& now, const CheckTolerances& tol) {
  CheckResult r;
  r.tolerances = tol;
  r.metrics.push_back(metric("step time (ms)", base.step_time_ms, now.step_time_ms,
                             now.step_time_ms / base.step_time_ms - 1, tol.max_slowdown));
  r.metrics.push_back(metric("tokens/s per GPU", base.tokens_per_second_per_gpu, now.tokens_per_second_per_gpu,
                             base.tokens_per_second_per_gpu / now.tokens_per_second_per_gpu - 1, tol.max_slowdown));
  r.metrics.push_back(metric("peak memory (GiB)", base.peak_memory_gib, now.peak_memory_gib,
                             now.peak_memory_gib / base.peak_memory_gib - 1, tol.max_memory_growth));
  r.base_fits = base.fits_in_memory;
  r.now_fits = now.fits_in_memory;
  r.pass = !(base.fits_in_memory && !now.fits_in_memory);
  for (const MetricCheck& m : r.metrics) r.pass = r.pass && !m.fail;

  for (const auto& [k, v] : base.setup) {
    auto it = now.setup.find(k);
    if (it != now.setup.end() && it->second != v)
      r.setup_changes.push_back(fmt::format("{} {} -> {}", k, v, it->second));
  }
  // dp_replicate and gradient_accumulation_steps are recorded only when > 1 (baseline_from_report): absent means 1.
  for (const char* key : {"dp_replicate", "gradient_accumulation_steps"}) {
    auto value = [&](const CheckBaseline& b) {
      auto it = b.setup.find(key);
      return it == b.setup.end() ? std::string("1") : it->second;
    };
    if (value(base) != value(now) && !(base.setup.count(key) && now.setup.count(key)))
      r.setup_changes.push_back(fmt::format("{} {} -> {}", key, value(base), value(now)));
  }

  r.breakdown = diff_maps(base.breakdown_ms, now.breakdown_ms);
  r.breakdown.erase(std::remove_if(r.breakdown.begin(), r.breakdown.end(), [](const Delta& d) { return !moved(d); }),
                    r.breakdown.end());
  r.kinds = diff_maps(base.kind_ms, now.kind_ms);
  sort_by_size(r.kinds);
  r.memory = diff_maps(base.memory_gib, now.memory_gib);
  sort_by_size(r.memory);
  std::map<std::string, double> base_ops, now_ops;
  for (const BaselineOp& op : base.ops) base_ops[op.key()] += op.total_ms;
  for (const BaselineOp& op : now.ops) now_ops[op.key()] += op.total_ms;
  r.ops = diff_maps(base_ops, now_ops);
  sort_by_size(r.ops);
  return r;
}

std::string format_check(const CheckResult& r, const std::string& baseline_path, size_t top_n) {
  std::string o;
  append(o, "tp-plan check: {} against {} (max slowdown {:.2f}%, max memory growth {:.2f}%)\n",
         r.pass ? "PASS" : "FAIL", baseline_path, 100 * r.tolerances.max_slowdown,
         100 * r.tolerances.max_memory_growth);
  if (!r.setup_changes.empty()) {
    append(o, "  setup changed:");
    for (size_t i = 0; i < r.setup_changes.size(); ++i) append(o, "{} {}", i ? ";" : "", r.setup_changes[i]);
    append(o, "\n");
  }
  append(o, "\n  {:<20} {:>12} {:>12} {:>9} {:>9}\n", "", "baseline", "now", "change", "limit");
  for (const MetricCheck& m : r.metrics) {
    const bool lower_is_better = m.name.rfind("tokens", 0) != 0;
    const std::string limit = fmt::format("{}{:.2f}%", lower_is_better ? "+" : "-", 100 * m.limit);
    const char* verdict = m.fail ? "FAIL" : m.worse < -kNoise ? "ok (better)" : "ok";
    append(o, "  {:<20} {:>12.2f} {:>12.2f} {:>9} {:>9}  {}\n", m.name, m.base, m.now, signed_pct(m.change), limit,
           verdict);
  }
  append(o, "  {:<20} {:>12} {:>12} {:>9} {:>9}  {}\n", "fits in memory", r.base_fits ? "yes" : "no",
         r.now_fits ? "yes" : "no", "", "", r.base_fits && !r.now_fits ? "FAIL" : "ok");

  append_deltas(o, "where the step time moved (ms: these add up to it)", r.breakdown, top_n, 2);
  append_deltas(o, "op classes that moved most (busy ms per step)", r.kinds, top_n, 2);
  append_deltas(o, "ops that moved most (ms per step, all instances)", r.ops, top_n, 3);
  append_deltas(o, "memory that moved (GiB per GPU)", r.memory, top_n, 3);
  if (r.pass && (!r.breakdown.empty() || !r.memory.empty()))
    append(o, "\n  the prediction moved within the tolerances; refresh the baseline with --update if intended\n");
  if (!r.pass) append(o, "\n  if this change is intended, write the new baseline with --update and commit it\n");
  return o;
}

double parse_percent(const std::string& text, const std::string& option) {
  std::string s = text;
  while (!s.empty() && (s.back() == ' ' || s.back() == '%')) s.pop_back();
  char* end = nullptr;
  const double v = s.empty() ? NAN : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v) || v < 0 || v > 1000)
    throw Error(fmt::format("{} {}: expected a percentage between 0 and 1000, such as 2%", option, text));
  return v / 100;
}

}  // namespace tptune
