#include "sim/search/bound.h"

#include <algorithm>

namespace tptune {

namespace {
// Relative margin of the bounds: a sum of ~1e5 doubles in a different order than the schedule's chain of starts and
// ends differs by far less than 1e-9 relative (~1e5 roundings of 1.1e-16 each).
constexpr double kMargin = 1e-9;

// One instance of segment s: its op durations summed per stream.
void per_stream(const Program& p, const OpCosts& costs, size_t s, double (&out)[kStreams]) {
  const Segment& seg = p.segments[s];
  for (size_t j = 0; j < seg.ops.size(); ++j) out[static_cast<int>(stream_of(seg.ops[j]))] += costs.duration_us[s][j];
}

}  // namespace

double step_time_lower_bound_us(const Program& p, const OpCosts& costs) {
  double busy[kStreams] = {};
  for (size_t s = 0; s < p.segments.size(); ++s) {
    const Segment& seg = p.segments[s];
    double per_instance[kStreams] = {};
    per_stream(p, costs, s, per_instance);
    // Instances as expand() (plans/program/program.cc) and the schedule count them.
    const double instances = segment_instances(p, seg);
    for (int k = 0; k < kStreams; ++k) busy[k] += per_instance[k] * instances;
  }
  // The host issues every op before it can run (sim/timeline/timeline.h).
  return std::max(*std::max_element(busy, busy + kStreams), costs.host_dispatch_us) * (1 - kMargin);
}

SplitStreamSums split_stream_sums(const Program& p, const OpCosts& costs) {
  SplitStreamSums out;
  for (size_t s = 0; s < p.segments.size(); ++s) {
    const Segment& seg = p.segments[s];
    double per_instance[kStreams] = {};
    per_stream(p, costs, s, per_instance);
    const bool bwd = seg.kind == SegmentKind::block_bwd;
    double* into = !bwd ? out.fixed : seg.first_layer > 0 ? out.plain : out.checkpointed;
    const double instances = bwd ? 1.0 : segment_instances(p, seg);
    for (int k = 0; k < kStreams; ++k) into[k] += per_instance[k] * instances;
    if (s < costs.segment_dispatch_us.size())
      (!bwd                  ? out.host_fixed
       : seg.first_layer > 0 ? out.host_plain
                             : out.host_checkpointed) += costs.segment_dispatch_us[s] * instances;
  }
  return out;
}

double step_time_lower_bound_us(const SplitStreamSums& s, int64_t n_layers, int64_t k) {
  double busy = 0;
  const auto plain = static_cast<double>(n_layers - k), ckpt = static_cast<double>(k);
  for (int i = 0; i < kStreams; ++i) busy = std::max(busy, s.fixed[i] + plain * s.plain[i] + ckpt * s.checkpointed[i]);
  busy = std::max(busy, s.host_fixed + plain * s.host_plain + ckpt * s.host_checkpointed);
  return busy * (1 - kMargin);
}

double tokens_per_second_upper_bound(const Program& p, double step_time_lower_bound_us) {
  if (step_time_lower_bound_us <= 0) return 1e300;  // nothing to bound with
  return static_cast<double>(p.tokens_per_rank()) / (p.tp * step_time_lower_bound_us * 1e-6) * (1 + kMargin);
}

void Incumbents::add(double tps, double memory) {
  std::lock_guard<std::mutex> lock(m_);
  if (top_.size() < k_ || tps > top_.back()) {
    top_.insert(std::upper_bound(top_.begin(), top_.end(), tps, std::greater<double>()), tps);
    if (top_.size() > k_) top_.pop_back();
  }
  // Front: skip a point that something needing no more memory is at least as fast as; else drop the points it
  // dominates (more or equal memory, no faster) and insert it.
  auto at = std::upper_bound(front_.begin(), front_.end(), memory,
                             [](double m, const Point& q) { return m < q.memory; });  // first with memory > `memory`
  if (at != front_.begin() && std::prev(at)->tps >= tps) return;
  auto end = at;
  while (end != front_.end() && end->tps <= tps) ++end;
  // Points before `at` with equal memory are slower: drop them too.
  auto begin = at;
  while (begin != front_.begin() && std::prev(begin)->memory == memory) --begin;
  at = front_.erase(begin, end);
  front_.insert(at, Point{memory, tps});
}

bool Incumbents::holds_k() const {
  std::lock_guard<std::mutex> lock(m_);
  return k_ > 0 && top_.size() >= k_;
}

bool Incumbents::dominates(double tps_bound, double memory) const {
  std::lock_guard<std::mutex> lock(m_);
  if (k_ == 0 || top_.size() < k_ || !(top_.back() > tps_bound)) return false;
  // The fastest recorded candidate that needs at most `memory`: the last front point with memory <= `memory`.
  auto at =
      std::upper_bound(front_.begin(), front_.end(), memory, [](double m, const Point& q) { return m < q.memory; });
  return at != front_.begin() && std::prev(at)->tps > tps_bound;
}

}  // namespace tptune
