// The scatter of candidates, the stacked time bars and the memory bar of the HTML report (html_report.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "sim/report/html_report.h"
#include "sim/report/step_report.h"
#include "sim/report/svg.h"

namespace tptune {

namespace {

constexpr double kGiB = 1073741824.0;

std::string tp_colour(int tp) {
  static const std::map<int, std::string> c = {{1, "#7f7f7f"},  {2, "#1f77b4"},  {4, "#2ca02c"}, {8, "#d62728"},
                                               {16, "#9467bd"}, {32, "#8c564b"}, {64, "#e377c2"}};
  auto it = c.find(tp);
  return it == c.end() ? "#17becf" : it->second;
}

int shape_of(bool float8, bool async_tp) { return (float8 ? 1 : 0) + (async_tp ? 2 : 0); }

}  // namespace

double ms_per_1k_tokens(const StepReport& r, double ms) {
  const double tokens = static_cast<double>(r.gradient_accumulation_steps) * static_cast<double>(r.local_batch_size) *
                        static_cast<double>(r.seq_len) / std::max(1, r.cp_degree);
  return tokens > 0 ? ms * r.tp_degree * std::max(1, r.pp_degree) / tokens * 1000.0 : 0;
}

std::string html_scatter(const std::vector<ReportPoint>& points, double memory_limit_gib,
                         const std::vector<ReportPlan>& plans, size_t out_of_memory) {
  constexpr double W = 820, H = 470, L = 80, R = 630, T = 20, B = 400;
  double max_mem = memory_limit_gib, max_tps = 0;
  for (const auto& p : points) {
    max_mem = std::max(max_mem, p.peak_gib);
    if (p.scheduled) max_tps = std::max(max_tps, p.tokens_per_second_per_gpu);
  }
  for (const auto& pl : plans)
    if (pl.ok) {
      max_mem = std::max(max_mem, pl.report.memory.peak / kGiB);
      max_tps = std::max(max_tps, pl.report.tokens_per_second_per_gpu);
    }
  // The x range ends a little past the limit and the scheduled points: far misses would squeeze the feasible region,
  // so candidates beyond the range sit at its right edge (their ticks) and the legend says how far they go.
  double x_max = memory_limit_gib;
  for (const auto& p : points)
    if (p.scheduled) x_max = std::max(x_max, p.peak_gib);
  for (const auto& pl : plans)
    if (pl.ok) x_max = std::max(x_max, pl.report.memory.peak / kGiB);
  x_max = std::min(max_mem, x_max * 1.25);
  double x_lo = 0, x_hi = x_max, y_lo = 0, y_hi = max_tps * 1.05;
  const auto xt = svg::nice_ticks(x_lo, x_hi, 8);
  const auto yt = svg::nice_ticks(y_lo, y_hi, 6);
  const svg::Axis x{x_lo, x_hi, L, R}, y{y_lo, y_hi, B, T};
  svg::Svg s(W, H, "every evaluated candidate: tokens/s per GPU against peak memory per GPU");
  s.x_axis(x, xt, B, T, "peak memory per GPU (GiB)");
  s.y_axis(y, yt, L, R, "throughput (tokens/s per GPU)", true);

  // The memory limit.
  s.line(x.at(memory_limit_gib), B, x.at(memory_limit_gib), T, "#b00", 1.5, "6 4");
  s.text(x.at(memory_limit_gib) - 4, T + 12, fmt::format("memory limit {:.1f} GiB", memory_limit_gib), "end",
         "small limit");

  // Candidates over the limit were never scheduled: ticks on the x axis at their peak memory, one per pixel column
  // (those past the axis at its end), taller where several coincide, the tooltip counting them.
  std::map<long, std::pair<size_t, double>> columns;  // pixel column -> (candidates, largest peak)
  size_t ticked = 0;
  for (const auto& p : points)
    if (!p.scheduled && p.peak_gib > 0) {
      auto& c = columns[std::lround(x.at(std::min(p.peak_gib, x_hi)))];
      ++c.first;
      c.second = std::max(c.second, p.peak_gib);
      ++ticked;
    }
  auto tick_height = [](size_t n) { return 8 + 3 * std::log2(static_cast<double>(n)); };
  for (const auto& [px, c] : columns) {
    const double h = tick_height(c.first);
    s.rect(static_cast<double>(px) - 0.5, B - h, 1, h, "#999",
           fmt::format("{} over the limit {} {:.1f} GiB", c.first, c.second > x_hi ? "past the axis, up to" : "at",
                       c.second));
  }
  const size_t over = std::max(out_of_memory, ticked);
  // The Pareto front: more throughput for more memory, nothing better on both.
  std::vector<const ReportPoint*> sched;
  for (const auto& p : points)
    if (p.scheduled) sched.push_back(&p);
  std::sort(sched.begin(), sched.end(), [](const ReportPoint* a, const ReportPoint* b) {
    return a->peak_gib != b->peak_gib ? a->peak_gib < b->peak_gib
                                      : a->tokens_per_second_per_gpu > b->tokens_per_second_per_gpu;
  });
  std::vector<std::pair<double, double>> front;
  double best = -1;
  for (const ReportPoint* p : sched)
    if (p->tokens_per_second_per_gpu > best) {
      best = p->tokens_per_second_per_gpu;
      front.emplace_back(x.at(p->peak_gib), y.at(p->tokens_per_second_per_gpu));
    }
  if (front.size() > 1) s.polyline(front, "#444", 1.2);
  for (const ReportPoint* p : sched)
    s.marker(
        shape_of(p->float8, p->async_tp), x.at(p->peak_gib), y.at(p->tokens_per_second_per_gpu), 4.2, tp_colour(p->tp),
        "#fff",
        fmt::format("{}: {:.0f} tokens/s per GPU, {:.1f} GiB", p->label, p->tokens_per_second_per_gpu, p->peak_gib));

  // The chosen plan and the baselines: their markers, then each one's name where it covers no marker, no other name
  // and not the memory limit's (svg::place_label).
  std::vector<svg::Box> taken;
  for (const ReportPoint* p : sched)
    taken.push_back(svg::marker_box(x.at(p->peak_gib), y.at(p->tokens_per_second_per_gpu), 4.2));
  for (const auto& [px, c] : columns)
    taken.push_back({static_cast<double>(px) - 1, B - tick_height(c.first), static_cast<double>(px) + 1, B});
  taken.push_back(svg::text_box(x.at(memory_limit_gib) - 4, T + 12,
                                fmt::format("memory limit {:.1f} GiB", memory_limit_gib), 11, "end"));
  struct Mark {
    size_t plan;
    double px, py, r;
  };
  std::vector<Mark> marks;
  for (size_t i = 0; i < plans.size(); ++i) {
    if (!plans[i].ok) continue;
    const double px = x.at(plans[i].report.memory.peak / kGiB), py = y.at(plans[i].report.tokens_per_second_per_gpu);
    const double r = i == 0 ? 9 : 8;
    if (i == 0)
      s.marker(0, px, py, r, "none", "#000");
    else
      s.marker(4, px, py, r, "#ffd700", "#000");
    taken.push_back(svg::marker_box(px, py, r));
    marks.push_back({i, px, py, r});
  }
  for (const Mark& m : marks) {
    const svg::Placed at = svg::place_label(m.px, m.py, m.r, plans[m.plan].name, 12, taken, {L, T, R, B});
    s.text(at.x, at.y, plans[m.plan].name, "start", "label");
    taken.push_back(at.box);
  }

  // Legend.
  double ly = T + 10;
  const double lx = R + 25;
  s.text(lx, ly, "TP degree (colour)", "start", "label");
  std::vector<int> tps;
  for (const auto& p : points)
    if (std::find(tps.begin(), tps.end(), p.tp) == tps.end()) tps.push_back(p.tp);
  std::sort(tps.begin(), tps.end());
  for (int tp : tps) {
    ly += 18;
    s.marker(0, lx + 6, ly - 4, 5, tp_colour(tp), "#fff");
    s.text(lx + 18, ly, fmt::format("tp {}", tp), "start", "small");
  }
  ly += 28;
  s.text(lx, ly, "shape", "start", "label");
  const char* shapes[] = {"bf16, sync TP", "float8, sync TP", "bf16, async TP", "float8, async TP"};
  for (int k = 0; k < 4; ++k) {
    ly += 18;
    s.marker(k, lx + 6, ly - 4, 5, "#888", "#fff");
    s.text(lx + 18, ly, shapes[k], "start", "small");
  }
  ly += 28;
  s.line(lx, ly - 4, lx + 14, ly - 4, "#444", 1.2);
  s.text(lx + 18, ly, "Pareto front", "start", "small");
  ly += 18;
  s.marker(0, lx + 6, ly - 4, 7, "none", "#000");
  s.text(lx + 18, ly, "chosen plan", "start", "small");
  ly += 18;
  s.marker(4, lx + 6, ly - 4, 7, "#ffd700", "#000");
  s.text(lx + 18, ly, "baselines", "start", "small");
  ly += 18;
  s.line(lx + 6, ly - 9, lx + 6, ly + 1, "#999", 1);
  s.text(lx + 18, ly, fmt::format("{} over the limit", over), "start", "small");
  ly += 14;
  if (over > ticked) {
    s.text(lx + 18, ly, fmt::format("({} as ticks at their peak,", ticked), "start", "small");
    ly += 14;
    s.text(lx + 18, ly, fmt::format("{} larger batches not lowered)", over - ticked), "start", "small");
  } else {
    s.text(lx + 18, ly, "(not scheduled)", "start", "small");
  }
  if (max_mem > x_hi) {
    ly += 14;
    s.text(lx + 18, ly, fmt::format("up to {:.0f} GiB", max_mem), "start", "small");
  }
  return s.str();
}

std::string html_breakdown_bars(const std::vector<ReportPlan>& plans) {
  constexpr double W = 820, L = 170, R = 700, T = 10, row = 44;
  const double B = T + row * static_cast<double>(plans.size()) + 6, H = B + 60;
  double hi = 0;
  for (const auto& p : plans)
    if (p.ok) hi = std::max(hi, ms_per_1k_tokens(p.report, p.report.step_time_ms));
  double lo = 0;
  const auto ticks = svg::nice_ticks(lo, hi, 6);
  const svg::Axis x{lo, hi, L, R};
  svg::Svg s(W, H, "where the time goes: ms per 1000 tokens per GPU");
  s.x_axis(x, ticks, B, T, "ms per 1000 tokens per GPU (lower is better)");
  // A pipeline's fourth term: its critical rank's idle time in the step (the bubble and the P2P waits), the rest of the
  // step beyond its breakdown (sim/pipeline/step.h). Drawn, and in the legend, only when a plan has a pipeline.
  const char* colours[] = {"#4e79a7", "#f28e2b", "#e15759", "#bab0ac"};
  const char* names[] = {"compute", "exposed TP comm", "exposed DP comm", "pipeline bubble"};
  const bool any_pipeline =
      std::any_of(plans.begin(), plans.end(), [](const ReportPlan& p) { return p.ok && p.report.pipeline.pp > 1; });
  const double base =
      plans.empty() || !plans[0].ok ? 0 : ms_per_1k_tokens(plans[0].report, plans[0].report.step_time_ms);
  for (size_t i = 0; i < plans.size(); ++i) {
    const double y0 = T + row * static_cast<double>(i) + 8;
    s.text(L - 8, y0 + 15, plans[i].name, "end", "label");
    if (!plans[i].ok) {
      s.text(L + 4, y0 + 15, "not simulated: " + plans[i].error, "start", "small");
      continue;
    }
    const StepReport& r = plans[i].report;
    const double bubble =
        r.pipeline.pp > 1 ? std::max(0.0, r.step_time_ms - r.compute_ms - r.exposed_tp_comm_ms - r.exposed_dp_comm_ms)
                          : 0.0;
    const double parts[] = {r.compute_ms, r.exposed_tp_comm_ms, r.exposed_dp_comm_ms, bubble};
    double at = 0;
    for (int k = 0; k < (r.pipeline.pp > 1 ? 4 : 3); ++k) {
      const double v = ms_per_1k_tokens(r, parts[k]);
      s.rect(x.at(at), y0, x.at(at + v) - x.at(at), 24, colours[k], fmt::format("{}: {:.2f} ms", names[k], v));
      at += v;
    }
    std::string note = fmt::format("{:.2f} ms", at);
    if (i > 0 && base > 0)
      note += fmt::format("  ({:.2f}x {})", at / base, plans[0].name == "winner" ? "the winner" : plans[0].name);
    s.text(x.at(at) + 6, y0 + 16, note, "start", "small");
  }
  double lx = L;
  for (int k = 0; k < (any_pipeline ? 4 : 3); ++k) {
    s.rect(lx, H - 14, 12, 12, colours[k]);
    s.text(lx + 16, H - 4, names[k], "start", "small");
    lx += 160;
  }
  return s.str();
}

std::string html_memory(const MemoryReport& m) {
  constexpr double W = 820, L = 20, R = 800, T = 22, H = 182;
  const double cap = m.capacity / kGiB, peak = m.peak / kGiB;
  double lo = 0, hi = std::max(cap, peak);
  const auto ticks = svg::nice_ticks(lo, hi, 8);
  const svg::Axis x{lo, hi, L, R};
  svg::Svg s(W, H, "memory per GPU at the peak");
  const struct {
    const char* name;
    double bytes;
    const char* colour;
  } parts[] = {
      {"fp32 master weights", m.master_params, "#4e79a7"},
      {"fp32 gradients", m.gradients, "#76b7b2"},
      {"AdamW states", m.optimizer, "#59a14f"},
      {"saved activations", m.activations, "#edc948"},
      {"working set", m.working_set, "#f28e2b"},
      {"parameters in flight", m.params_in_flight, "#b07aa1"},
      {"runtime overhead", m.runtime_overhead, "#bab0ac"},
  };
  double at = 0;
  for (const auto& p : parts) {
    const double v = p.bytes / kGiB;
    s.rect(x.at(at), T + 6, x.at(at + v) - x.at(at), 30, p.colour, fmt::format("{}: {:.2f} GiB", p.name, v));
    at += v;
  }
  s.line(x.at(cap), T, x.at(cap), T + 42, "#b00", 2, "5 3");
  s.text(x.at(cap) - 4, T + 54, fmt::format("capacity {:.1f} GiB", cap), "end", "small limit");
  s.text(x.at(peak), T - 6, fmt::format("peak {:.1f} GiB, during {}", peak, peak_phase_text(m.peak_phase)),
         x.at(peak) > (L + R) / 2 ? "end" : "start", "small");
  s.x_axis(x, ticks, T + 62, T + 62, "GiB per GPU");
  double lx = L, ly = T + 62 + 58;
  for (const auto& p : parts) {
    const std::string label = fmt::format("{} {:.1f}", p.name, p.bytes / kGiB);
    const double w = 24 + 6.2 * static_cast<double>(label.size());
    if (lx + w > R) {
      lx = L;
      ly += 16;
    }
    s.rect(lx, ly - 10, 11, 11, p.colour);
    s.text(lx + 15, ly, label, "start", "small");
    lx += w;
  }
  return s.str();
}

}  // namespace tptune
