// The pipeline section of the HTML report (html_report.h) of a PP plan: the pipeline's figures as two tables, and
// each pp rank's schedule as one row of boxes, from the same PipelineReport::timeline `tp-plan explain` draws as
// text (sim/report/pipeline_text.h) and --trace writes (sim/report/pipeline_trace.h).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iterator>

#include "plans/util/enum_names.h"
#include "plans/util/error.h"
#include "sim/report/html_report.h"
#include "sim/report/pipeline_text.h"
#include "sim/report/svg.h"

namespace tptune {

namespace {

constexpr double kGiB = 1073741824.0;

// PipelineActionKind's colours, in declaration order (F, B, I, W).
constexpr std::string_view kKindColours[] = {"#4e79a7", "#e15759", "#f28e2b", "#59a14f"};
static_assert(std::size(kKindColours) == enum_count(PipelineActionKind::W));

std::string_view kind_colour(PipelineActionKind k) { return name_of(kKindColours, k); }

}  // namespace

std::vector<PipelineIdle> pipeline_idle_gaps(const PipelineReport& p, size_t rank) {
  std::vector<PipelineIdle> gaps;
  if (rank >= p.timeline.size()) return gaps;
  const double pass_us = pipeline_pass_us(p);
  double at = 0;
  for (const TimedPipelineAction& a : p.timeline[rank]) {
    if (a.start_us > at) gaps.push_back({at, a.start_us});
    at = std::max(at, a.end_us);
  }
  if (pass_us > at) gaps.push_back({at, pass_us});
  return gaps;
}

double pipeline_pass_us(const PipelineReport& p) {
  double end = p.schedule_ms * 1e3;
  for (const auto& rank : p.timeline)
    for (const TimedPipelineAction& a : rank) end = std::max(end, a.end_us);
  return end;
}

std::string html_pipeline_tables(const PipelineReport& p) {
  if (p.pp <= 1) throw Error("report: not a pipeline-parallel step (pp 1)");
  const int stages = static_cast<int>(p.stage_layers.size());
  const int64_t hops = pipeline_rank_transfers(p);
  std::string o = "<table>\n<tr><th>pipeline</th><th>value</th></tr>\n";
  auto row = [&o](std::string_view name, const std::string& value) {
    o += fmt::format("<tr><td>{}</td><td>{}</td></tr>\n", svg::escape(name), svg::escape(value));
  };
  row("pp degree, schedule", fmt::format("{}, {}", p.pp, to_string(p.schedule)));
  row("stages", fmt::format("{} ({} per rank), blocks per stage [{}]", stages, p.stages_per_rank,
                            fmt::join(p.stage_layers, ", ")));
  row("microbatches",
      fmt::format("{} of {} sequence{}", p.microbatches, p.microbatch_size, p.microbatch_size == 1 ? "" : "s"));
  row("schedule pass", fmt::format("{:.2f} ms", p.schedule_ms));
  row("bubble", fmt::format("{:.1f} % (mean idle fraction over ranks)", 100 * p.bubble_fraction));
  row("p2p per microbatch", fmt::format("{} transfers of {} ({} per pass), {:.1f} us each over {}", hops,
                                        pipeline_bytes_text(static_cast<double>(p.p2p_bytes)), hops * p.microbatches,
                                        p.p2p_us, p.p2p_network ? "the network" : "NVLink"));
  row("FSDP exposed",
      fmt::format("{:.2f} ms (first stage's all-gather, unhidden gradient reduction)", p.fsdp_exposed_ms));
  row("optimizer", fmt::format("{:.2f} ms (gradient norm and AdamW, once per step)", p.optimizer_ms));
  o += "</table>\n";
  o += "<table>\n<tr><th>pp rank</th><th>stages</th><th>blocks</th><th>busy (ms)</th><th>idle (ms)</th>"
       "<th>step ends (ms)</th><th>activations held</th><th>peak memory (GiB)</th></tr>\n";
  for (size_t k = 0; k < p.ranks.size(); ++k) {
    const PipelineRankReport& r = p.ranks[k];
    o += fmt::format(
        "<tr class=\"pp-rank\"><td>{}{}</td><td>{}</td><td>{}</td><td>{:.2f}</td><td>{:.2f}</td><td>{:.2f}</td>"
        "<td>{} ({:.2f} GiB)</td><td>{:.2f}</td></tr>\n",
        k, static_cast<int>(k) == p.critical_rank ? " (ends last)" : "", fmt::join(r.stages, ", "), r.layers, r.busy_ms,
        r.idle_ms, r.end_ms, r.peak_activations, r.activations / kGiB, r.peak_memory / kGiB);
  }
  return o + "</table>\n";
}

std::string html_pipeline_timeline(const PipelineReport& p) {
  if (p.pp <= 1) throw Error("report: not a pipeline-parallel step (pp 1)");
  check_pipeline_listed(p, "--report");
  constexpr double W = 820, L = 70, R = 800, T = 10, lane = 26;
  const size_t ranks = p.timeline.size();
  const double B = T + lane * static_cast<double>(ranks), H = B + 66;
  const double pass_us = pipeline_pass_us(p);
  double lo = 0, hi = pass_us / 1e3;  // ms
  const auto ticks = svg::nice_ticks(lo, hi, 8);
  const svg::Axis x{lo, hi, L, R};
  svg::Svg s(W, H, "each pp rank's schedule: one box per action, idle time hatched");
  for (size_t k = 0; k < ranks; ++k) {
    const double y = T + lane * static_cast<double>(k);
    s.rect(L, y, R - L, lane - 4, k % 2 ? "#f4f4f4" : "#fafafa", fmt::format("pp rank {}", k), "class=\"pp-row\"");
    s.text(L - 8, y + 16, fmt::format("rank {}", k), "end", "small");
    for (const PipelineIdle& g : pipeline_idle_gaps(p, k)) {
      const double x0 = x.at(g.start_us / 1e3), x1 = x.at(g.end_us / 1e3);
      s.rect(x0, y + 1, std::max(0.6, x1 - x0), lane - 6, "url(#pp-idle)",
             fmt::format("rank {} idle {:.2f} ms ({:.2f} to {:.2f} ms)", k, (g.end_us - g.start_us) / 1e3,
                         g.start_us / 1e3, g.end_us / 1e3),
             "class=\"pp-idle\"");
    }
    for (const TimedPipelineAction& a : p.timeline[k]) {
      const double x0 = x.at(a.start_us / 1e3), x1 = x.at(a.end_us / 1e3);
      const std::string name = to_string(a.action);
      s.rect(x0, y + 1, std::max(0.6, x1 - x0), lane - 6, kind_colour(a.action.kind),
             fmt::format("rank {}: {} ({}) of stage {}, microbatch {}: {:.2f} to {:.2f} ms", k, name,
                         pipeline_action_words(a.action.kind), a.action.stage, a.action.microbatch, a.start_us / 1e3,
                         a.end_us / 1e3),
             "class=\"pp-action\" stroke=\"#fff\" stroke-width=\"0.5\"");
      if (x1 - x0 > 6.0 * static_cast<double>(name.size()) + 4) s.text((x0 + x1) / 2, y + 15, name, "middle", "tiny");
    }
  }
  s.x_axis(x, ticks, B, T, "ms from the start of the schedule's pass");
  const PipelineActionKind kinds[] = {PipelineActionKind::F, PipelineActionKind::B, PipelineActionKind::I,
                                      PipelineActionKind::W};
  double lx = L;
  for (PipelineActionKind k : kinds) {
    s.rect(lx, H - 16, 11, 11, kind_colour(k));
    s.text(lx + 15, H - 6, fmt::format("{} {}", to_string(k), pipeline_action_words(k)), "start", "small");
    lx += 140;
  }
  s.rect(lx, H - 16, 11, 11, "url(#pp-idle)");
  s.text(lx + 15, H - 6, "idle (bubble)", "start", "small");
  // The hatch of the idle boxes, defined once in this element (the report has no shared <defs>).
  std::string out = s.str();
  const size_t open = out.find('>');
  out.insert(open + 1,
             "\n<defs><pattern id=\"pp-idle\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
             "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#fff\"/><line x1=\"0\" y1=\"0\" "
             "x2=\"0\" y2=\"6\" stroke=\"#bbb\" stroke-width=\"2\"/></pattern></defs>");
  return out;
}

}  // namespace tptune
