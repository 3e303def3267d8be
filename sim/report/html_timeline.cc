// One block's forward and backward on the three streams (four with HSDP's replicate all-reduces), for the HTML report
// (html_report.h). The times are the Timeline's (sim/timeline/timeline.h), the same OpTime::start and OpCosts durations
// chrome_trace() writes.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "plans/util/error.h"
#include "sim/report/html_report.h"
#include "sim/report/svg.h"

namespace tptune {

namespace {

std::string op_colour(const Op& op) {
  if (const auto* c = std::get_if<CollectiveOp>(&op.kind))
    return c->group == Group::dp             ? "#e15759"
           : c->group == Group::dp_replicate ? "#9c755f"
           : c->group == Group::cp           ? "#76b7b2"
                                             : "#f28e2b";
  if (std::holds_alternative<GemmOp>(op.kind)) return op.phase == Phase::recompute ? "#a0cbe8" : "#4e79a7";
  if (std::holds_alternative<AttentionOp>(op.kind)) return op.phase == Phase::recompute ? "#8cd17d" : "#59a14f";
  if (std::holds_alternative<CastFp8Op>(op.kind)) return "#b07aa1";
  return "#bab0ac";
}

struct Box {
  const Op* op;
  double start, dur;
  bool prefetched;  // issued by the previous block (SegmentTimes::prefetched)
  std::string_view
      copy;  // an FSDP copy folded into op's duration, drawn beside it (sim/timeline/fsdp_copies.h); "": the op
};

constexpr const char* kCopyColour = "#d37295";

}  // namespace

std::string html_block_timeline(const Program& p, const OpCosts& costs, const Timeline& tl) {
  struct Panel {
    SegmentKind segment;
    const char* title;
    std::vector<Box> boxes;
    double t0 = 0, span = 0, compute_span = 0;
    int layer = 0;
  };
  Panel panels[] = {{SegmentKind::block_fwd, "forward", {}}, {SegmentKind::block_bwd, "backward", {}}};
  int layer = -1;         // the forward's layer, whose backward the second panel shows
  bool any_copy = false;  // an FSDP copy drawn: its legend entry
  for (Panel& pn : panels) {
    // The forward: a steady-state layer, away from the first and last blocks (the middle instance). The backward:
    // the same layer's, from the block.bwd segment that runs it (a plan's ac_layers splits them in two).
    size_t s = p.segments.size();
    int inst = -1;
    // (A dense-first mixture of experts has a block.fwd per block variant: the forward is the one most layers run.)
    auto widest = [&](size_t k) {
      for (size_t j = 0; j < p.segments.size() && j < tl.segments.size(); ++j)
        if (p.segments[j].kind == pn.segment && tl.segments[j].instances > tl.segments[k].instances) return false;
      return true;
    };
    for (size_t k = 0; k < p.segments.size() && k < tl.segments.size() && inst < 0; ++k) {
      if (p.segments[k].kind != pn.segment || (layer < 0 && !widest(k))) continue;
      s = k;
      inst = layer < 0 ? tl.segments[k].instances / 2 : layer_instance(p, p.segments[k], layer);
    }
    if (s == p.segments.size())
      throw Error(fmt::format("report: the Program has no {} segment", to_string(pn.segment)));
    if (inst < 0) inst = tl.segments[s].instances / 2;  // not reached: every block's backward is in one segment
    const Segment& seg = p.segments[s];
    const SegmentTimes& st = tl.segments[s];
    pn.layer = instance_layer(p, seg, inst);
    if (layer < 0) layer = pn.layer;
    // Time 0 is the block's first op that the block issues itself; ops the previous block issued for it (FSDP's
    // prefetched all-gather, SegmentTimes::prefetched) are drawn from 0 and say so, or noted when already done.
    double lo = std::numeric_limits<double>::infinity(), any_lo = lo, hi = -lo;
    for (int j = 0; j < st.ops; ++j) {
      const Op& op = seg.ops[static_cast<size_t>(j)];
      const OpTime t = st.time(inst, j);
      const double d = costs.duration_us[s][static_cast<size_t>(j)];
      const bool pre = j < static_cast<int>(st.prefetched.size()) && st.prefetched[static_cast<size_t>(j)];
      const FsdpCopyShare copy = fsdp_copy_share(costs, s, static_cast<size_t>(j));
      if (copy.before_us > 0) pn.boxes.push_back({&op, t.start, copy.before_us, pre, fsdp_copy_name(op, true)});
      pn.boxes.push_back({&op, t.start + copy.before_us, d - copy.before_us - copy.after_us, pre, {}});
      if (copy.after_us > 0)
        pn.boxes.push_back({&op, t.start + d - copy.after_us, copy.after_us, pre, fsdp_copy_name(op, false)});
      any_copy = any_copy || copy.before_us > 0 || copy.after_us > 0;
      if (!pre) lo = std::min(lo, t.start);
      any_lo = std::min(any_lo, t.start);
      hi = std::max(hi, t.start + d);
    }
    if (!std::isfinite(lo)) lo = any_lo;
    pn.t0 = pn.boxes.empty() ? 0 : lo;
    pn.span = pn.boxes.empty() ? 0 : hi - lo;
    pn.compute_span = st.instance_stats(inst).span_us;
  }
  constexpr double W = 820, L = 120, R = 800, lane = 26, gap = 64;
  // the replicate lane only for HSDP plans, the cp lane only for context-parallel ones
  const int lanes_n = p.ep > 1 ? kStreams : p.cp > 1 ? kStreams - 1 : p.dp_replicate > 1 ? 4 : 3;
  const double panel_h = lanes_n * lane;
  const double H = 20 + 2 * (panel_h + gap) + 20;
  svg::Svg s(W, H, "one transformer block, forward and backward, on the compute, TP and DP streams");
  double y = 24;
  for (const Panel& pn : panels) {
    // Each panel's axis fitted to its own content: the backward takes about twice the forward's time, and a shared
    // axis left the forward in a third of its width.
    double lo = 0, hi = pn.span / 1000.0;  // ms
    const auto ticks = svg::nice_ticks(lo, hi, 8);
    const svg::Axis x{lo, hi, L, R};
    s.text(L, y - 8,
           fmt::format("{} of layer {}: {:.2f} ms on the compute stream", pn.title, pn.layer, pn.compute_span / 1000.0),
           "start", "label");
    const char* lanes[kStreams] = {"compute", "TP comm", "DP comm", "DP replicate", "CP comm", "EP comm"};
    for (int k = 0; k < lanes_n; ++k) {
      s.rect(L, y + k * lane, R - L, lane - 4, k % 2 ? "#f4f4f4" : "#fafafa");
      s.text(L - 8, y + k * lane + 16, lanes[k], "end", "small");
    }
    int done_before[kStreams] = {};  // prefetched ops that finished before the block started
    for (const Box& b : pn.boxes) {
      const int k = static_cast<int>(stream_of(*b.op));
      if (b.prefetched && b.start + b.dur <= pn.t0) {
        ++done_before[k];
        continue;
      }
      const double early = std::max(0.0, pn.t0 - b.start);  // issued before the block's first compute op
      const double x0 = x.at((b.start + early - pn.t0) / 1000.0), x1 = x.at((b.start - pn.t0 + b.dur) / 1000.0);
      std::string tip =
          b.copy.empty()
              ? fmt::format("{} ({}, {:.1f} us)", layer_fqn(pn.layer, b.op->name), to_string(b.op->phase), b.dur)
              : fmt::format("{} ({}, {:.1f} us, beside {})", layer_fqn(pn.layer, std::string(b.copy)),
                            to_string(b.op->phase), b.dur, b.op->name);
      if (early > 0) tip += fmt::format(", issued {:.1f} us earlier by the previous block", early);
      s.rect(x0, y + k * lane + 1, std::max(0.6, x1 - x0), lane - 6, b.copy.empty() ? op_colour(*b.op) : kCopyColour,
             tip, "stroke=\"#fff\" stroke-width=\"0.3\"");
      if (!b.copy.empty()) continue;  // no label: a copy's box is narrow
      // Label the boxes wide enough for their short name ("wq.fwd", "ffn_norm.fwd", "fwd.all_gather").
      std::string name = b.op->name;
      const size_t dot = name.find('.');
      if (dot != std::string::npos && (name.rfind("attention.", 0) == 0 || name.rfind("feed_forward.", 0) == 0))
        name = name.substr(dot + 1);
      if (x1 - x0 > 6.0 * static_cast<double>(name.size()) + 4)
        s.text((x0 + x1) / 2, y + k * lane + 15, name, "middle", "tiny");
    }
    for (int k = 0; k < lanes_n; ++k)
      if (done_before[k] > 0)
        s.text(L + 6, y + k * lane + 15,
               fmt::format("{} op{} prefetched by the previous block, done before this one starts", done_before[k],
                           done_before[k] == 1 ? "" : "s"),
               "start", "small");
    s.x_axis(x, ticks, y + panel_h, y, "ms from the block's start");
    y += panel_h + gap;
  }
  const struct {
    const char* name;
    const char* colour;
  } legend[] = {{"GEMM", "#4e79a7"},  {"attention", "#59a14f"}, {"recompute", "#a0cbe8"}, {"float8 cast", "#b07aa1"},
                {"other", "#bab0ac"}, {"TP", "#f28e2b"},        {"DP (FSDP)", "#e15759"}};
  double lx = L;
  const double step = any_copy ? 84 : 95;  // eight entries with the FSDP copies' in the same width
  for (const auto& l : legend) {
    s.rect(lx, H - 16, 11, 11, l.colour);
    s.text(lx + 15, H - 6, l.name, "start", "small");
    lx += step;
  }
  if (any_copy) {
    s.rect(lx, H - 16, 11, 11, kCopyColour);
    s.text(lx + 15, H - 6, "FSDP copy", "start", "small");
  }
  return s.str();
}

}  // namespace tptune
