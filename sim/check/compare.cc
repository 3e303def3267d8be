// `tp-plan check`'s comparison (sim/check/compare.h); its reports are sim/check/check_report*.cc.
#include "sim/check/compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>

#include "plans/util/error.h"
#include "sim/check/check_noise.h"

namespace tptune {

namespace {

MetricCheck metric(const char* name, double base, double now, double worse_fraction, double limit_percent,
                   const char* worse_word, const char* better_word) {
  MetricCheck m;
  m.name = name;
  m.base = base;
  m.now = now;
  m.change_percent = base != 0 ? 100 * (now / base - 1) : 0;
  m.worse_percent = 100 * worse_fraction;
  m.limit_percent = limit_percent;
  m.fail = m.worse_percent > limit_percent + kNoisePercent;
  m.worse_word = worse_word;
  m.better_word = better_word;
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

}  // namespace

CheckResult compare(const CheckBaseline& base, const CheckBaseline& now, const CheckTolerances& tol) {
  CheckResult r;
  r.tolerances = tol;
  r.baseline_build = base.written_by;
  r.now_build = now.written_by.value_or(this_build());
  r.setup = now.setup;
  r.metrics.push_back(metric("step time (ms)", base.step_time_ms, now.step_time_ms,
                             now.step_time_ms / base.step_time_ms - 1, tol.max_slowdown_percent, "slower", "faster"));
  r.metrics.push_back(metric("tokens/s per GPU", base.tokens_per_second_per_gpu, now.tokens_per_second_per_gpu,
                             base.tokens_per_second_per_gpu / now.tokens_per_second_per_gpu - 1,
                             tol.max_slowdown_percent, "slower per token", "faster per token"));
  r.metrics.push_back(metric("peak memory (GiB)", base.peak_memory_gib, now.peak_memory_gib,
                             now.peak_memory_gib / base.peak_memory_gib - 1, tol.max_memory_growth_percent, "larger",
                             "smaller"));
  r.base_fits = base.fits_in_memory;
  r.now_fits = now.fits_in_memory;
  r.pass = !(base.fits_in_memory && !now.fits_in_memory);
  for (const MetricCheck& m : r.metrics) r.pass = r.pass && !m.fail;

  for (const auto& [k, v] : base.setup) {
    auto it = now.setup.find(k);
    if (it != now.setup.end() && it->second != v)
      r.setup_changes.push_back(fmt::format("{} {} -> {}", k, v, it->second));
  }
  // Keys recorded only when > 1 (baseline_from_report): absent means 1.
  for (std::string_view k : kSetupKeysAbsentAtOne) {
    const std::string key(k);
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

double parse_percent(const std::string& text, const std::string& option) {
  std::string s = text;
  while (!s.empty() && (s.back() == ' ' || s.back() == '%')) s.pop_back();
  char* end = nullptr;
  const double v = s.empty() ? NAN : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v) || v < 0 || v > kMaxTolerancePercent)
    throw Error(fmt::format("{} {}: expected a percentage from 0 to {:g} (5 means 5 %, not 0.05), such as 2% or 2",
                            option, text, kMaxTolerancePercent));
  return v;
}

}  // namespace tptune
