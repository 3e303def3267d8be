#include "sim/pipeline/schedule_sim.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "plans/util/error.h"

namespace tptune {

namespace {

std::string describe(const PipelineSchedule& s) {
  return fmt::format("pipeline schedule {} (pp {}, stages_per_rank {}, microbatches {})", to_string(s.kind), s.pp,
                     s.stages_per_rank, s.microbatches);
}

void check_costs(const PipelineSchedule& s, const std::vector<StageCost>& costs, double p2p_us) {
  if (static_cast<int64_t>(costs.size()) != s.num_stages())
    throw Error(
        fmt::format("{}: expected {} stage costs (one per stage), got {}", describe(s), s.num_stages(), costs.size()));
  auto check = [&](double v, const std::string& what) {
    if (!std::isfinite(v) || v < 0)
      throw Error(fmt::format("{}: {} must be a finite time >= 0 us, got {}", describe(s), what, v));
  };
  check(p2p_us, "p2p_us");
  for (size_t i = 0; i < costs.size(); ++i) {
    check(costs[i].fwd_us, fmt::format("stage {} fwd_us", i));
    check(costs[i].bwd_us, fmt::format("stage {} bwd_us", i));
    check(costs[i].bwd_weight_us, fmt::format("stage {} bwd_weight_us", i));
    if (costs[i].bwd_weight_us > costs[i].bwd_us)
      throw Error(
          fmt::format("{}: stage {} bwd_weight_us {} exceeds its bwd_us {} (the weight gradient is part of the "
                      "backward)",
                      describe(s), i, costs[i].bwd_weight_us, costs[i].bwd_us));
  }
}

// End times of what each (stage, microbatch) has done; negative: not yet.
struct Progress {
  int microbatches;
  std::vector<double> f_end, grad_end, w_end;  // grad_end: B or I
  std::vector<char> grad_is_split;             // the backward was I (W still to come)
  Progress(int stages, int m)
      : microbatches(m),
        f_end(static_cast<size_t>(stages) * m, -1),
        grad_end(f_end),
        w_end(f_end),
        grad_is_split(f_end.size(), 0) {}
  size_t at(int stage, int mb) const { return static_cast<size_t>(stage) * microbatches + mb; }
};

double duration(const StageCost& c, PipelineActionKind k) {
  switch (k) {
    case PipelineActionKind::F:
      return c.fwd_us;
    case PipelineActionKind::B:
      return c.bwd_us;
    case PipelineActionKind::I:
      return c.bwd_us - c.bwd_weight_us;
    case PipelineActionKind::W:
      break;
  }
  return c.bwd_weight_us;
}

// When `a` on rank `rank` may start as far as its dependencies go; nullopt while one has not run.
std::optional<double> ready_at(const PipelineSchedule& s, const Progress& p, const PipelineAction& a, int rank,
                               double p2p_us) {
  auto arrival = [&](int producer_stage, double end) {
    return end + (s.rank_of_stage(producer_stage) != rank ? p2p_us : 0);
  };
  const size_t i = p.at(a.stage, a.microbatch);
  switch (a.kind) {
    case PipelineActionKind::F:
      if (a.stage == 0) return 0.0;
      if (p.f_end[p.at(a.stage - 1, a.microbatch)] < 0) return std::nullopt;
      return arrival(a.stage - 1, p.f_end[p.at(a.stage - 1, a.microbatch)]);
    case PipelineActionKind::B:
    case PipelineActionKind::I: {
      if (p.f_end[i] < 0) return std::nullopt;
      if (a.stage == s.num_stages() - 1) return p.f_end[i];
      const double grad = p.grad_end[p.at(a.stage + 1, a.microbatch)];
      if (grad < 0) return std::nullopt;
      return std::max(p.f_end[i], arrival(a.stage + 1, grad));
    }
    case PipelineActionKind::W:
      break;
  }
  if (p.grad_end[i] < 0 || !p.grad_is_split[i]) return std::nullopt;
  return p.grad_end[i];
}

// Records `a` ending at `end`; tptune::Error when it ran before.
void record(const PipelineSchedule& s, Progress& p, const PipelineAction& a, double end) {
  const size_t i = p.at(a.stage, a.microbatch);
  auto once = [&](std::vector<double>& ends) {
    if (ends[i] >= 0) throw Error(fmt::format("{}: {} runs twice", describe(s), to_string(a)));
    ends[i] = end;
  };
  switch (a.kind) {
    case PipelineActionKind::F:
      once(p.f_end);
      break;
    case PipelineActionKind::B:
    case PipelineActionKind::I:
      once(p.grad_end);
      p.grad_is_split[i] = a.kind == PipelineActionKind::I;
      break;
    case PipelineActionKind::W:
      once(p.w_end);
      break;
  }
}

void check_actions(const PipelineSchedule& s) {
  if (static_cast<int>(s.ranks.size()) != s.pp)
    throw Error(fmt::format("{}: expected {} ranks' action lists, got {}", describe(s), s.pp, s.ranks.size()));
  for (int r = 0; r < s.pp; ++r)
    for (const PipelineAction& a : s.ranks[r]) {
      if (a.stage < 0 || a.stage >= s.num_stages() || a.microbatch < 0 || a.microbatch >= s.microbatches)
        throw Error(fmt::format("{}: rank {} has {}, outside its {} stages x {} microbatches", describe(s), r,
                                to_string(a), s.num_stages(), s.microbatches));
      if (s.rank_of_stage(a.stage) != r)
        throw Error(fmt::format("{}: rank {} has {}, but stage {} is on rank {}", describe(s), r, to_string(a), a.stage,
                                s.rank_of_stage(a.stage)));
    }
}

}  // namespace

double PipelineTimeline::bubble_fraction() const {
  if (ranks.empty()) return 0;
  double sum = 0;
  for (const PipelineRankTimeline& r : ranks) sum += r.idle_fraction;
  return sum / static_cast<double>(ranks.size());
}

PipelineTimeline simulate_schedule(const PipelineSchedule& s, const std::vector<StageCost>& costs, double p2p_us) {
  check_costs(s, costs, p2p_us);
  check_actions(s);
  Progress progress(s.num_stages(), s.microbatches);
  PipelineTimeline tl;
  tl.ranks.resize(s.pp);
  std::vector<size_t> next(s.pp, 0);
  std::vector<int> held(s.pp, 0);
  size_t remaining = 0;
  for (const auto& list : s.ranks) remaining += list.size();
  while (remaining > 0) {
    bool advanced = false;
    for (int r = 0; r < s.pp; ++r) {
      const std::vector<PipelineAction>& list = s.ranks[r];
      PipelineRankTimeline& rank = tl.ranks[r];
      while (next[r] < list.size()) {
        const PipelineAction& a = list[next[r]];
        const std::optional<double> ready = ready_at(s, progress, a, r, p2p_us);
        if (!ready) break;
        const double free_at = rank.actions.empty() ? 0.0 : rank.actions.back().end_us;
        const double start = std::max(free_at, *ready);
        const double end = start + duration(costs[a.stage], a.kind);
        record(s, progress, a, end);
        rank.actions.push_back({a, start, end});
        rank.busy_us += end - start;
        if (a.kind == PipelineActionKind::F) rank.peak_activations = std::max(rank.peak_activations, ++held[r]);
        if (a.kind == PipelineActionKind::B || a.kind == PipelineActionKind::W) --held[r];
        ++next[r];
        --remaining;
        advanced = true;
      }
    }
    if (!advanced) {
      std::string waiting;
      for (int r = 0; r < s.pp; ++r)
        if (next[r] < s.ranks[r].size())
          waiting += fmt::format("{}rank {} at {}", waiting.empty() ? "" : ", ", r, to_string(s.ranks[r][next[r]]));
      throw Error(fmt::format("{}: cannot run to its end: {} wait for actions that never run", describe(s), waiting));
    }
  }
  for (int stage = 0; stage < s.num_stages(); ++stage)
    for (int mb = 0; mb < s.microbatches; ++mb) {
      const size_t i = progress.at(stage, mb);
      const bool complete = progress.f_end[i] >= 0 && progress.grad_end[i] >= 0 &&
                            (progress.grad_is_split[i] ? progress.w_end[i] >= 0 : progress.w_end[i] < 0);
      if (!complete)
        throw Error(fmt::format("{}: stage {} microbatch {} does not run F and B (or F, I and W) once each",
                                describe(s), stage, mb));
    }
  for (const PipelineRankTimeline& r : tl.ranks)
    if (!r.actions.empty()) tl.step_us = std::max(tl.step_us, r.actions.back().end_us);
  for (PipelineRankTimeline& r : tl.ranks) {
    r.idle_us = tl.step_us - r.busy_us;
    r.idle_fraction = tl.step_us > 0 ? r.idle_us / tl.step_us : 0;
  }
  return tl;
}

}  // namespace tptune
