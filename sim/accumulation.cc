#include "sim/accumulation.h"

#include <algorithm>
#include <variant>

namespace tptune {

bool is_optimizer_segment(const Segment& s) { return is_optimizer_step(s.kind); }

MicrobatchTimes microbatch_times(const Program& p, const Timeline& tl) {
  double end = 0;
  double dp_busy[2] = {0, 0};  // per microbatch: Group::dp, Group::dp_replicate
  for (size_t s = 0; s < p.segments.size() && s < tl.segments.size(); ++s) {
    const Segment& seg = p.segments[s];
    if (is_optimizer_segment(seg)) continue;
    const SegmentTimes& st = tl.segments[s];
    if (st.ops == 0 || st.instances <= 0) continue;
    // Ops of one stream run in order and instances follow one another, so the last instance ends last; time()
    // covers the extrapolated steady state too.
    const int last = st.instances - 1;
    for (size_t j = 0; j < seg.ops.size() && j < static_cast<size_t>(st.ops); ++j) {
      const OpTime t = st.time(last, static_cast<int>(j));
      if (const auto* c = std::get_if<CollectiveOp>(&seg.ops[j].kind);
          c && (c->group == Group::dp || c->group == Group::efsdp || c->group == Group::dp_replicate)) {
        dp_busy[c->group == Group::dp_replicate ? 1 : 0] += (t.end - t.start) * st.instances;
        if (tl.comm_overlaps_compute) continue;  // else it ran on the compute stream: the next microbatch waits
      }
      end = std::max(end, t.end);
    }
  }
  return {end, std::max(dp_busy[0], dp_busy[1])};
}

double microbatch_us(const Program& p, const Timeline& tl) { return microbatch_times(p, tl).period_us(); }

double accumulated_step_us(const Program& p, const Timeline& tl, int64_t gradient_accumulation_steps) {
  if (gradient_accumulation_steps <= 1) return tl.step_time_us;
  return tl.step_time_us + static_cast<double>(gradient_accumulation_steps - 1) * microbatch_us(p, tl);
}

}  // namespace tptune
