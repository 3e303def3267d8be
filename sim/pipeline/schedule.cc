#include "sim/pipeline/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <deque>
#include <iterator>

#include "plans/language/plan.h"
#include "plans/lower/rewrite/pipeline_stage.h"
#include "plans/util/checked_math.h"
#include "plans/util/enum_names.h"
#include "plans/util/error.h"
#include "plans/util/limits.h"

namespace tptune {

namespace {

constexpr std::string_view kActionNames[] = {"F", "B", "I", "W"};
static_assert(std::size(kActionNames) == enum_count(PipelineActionKind::W));

using Actions = std::vector<PipelineAction>;
using Kind = PipelineActionKind;

// ScheduleGPipe._step_microbatches: every forward, then every backward, in microbatch order.
Actions gpipe_rank(int rank, int m) {
  Actions a;
  for (int i = 0; i < m; ++i) a.push_back({rank, i, Kind::F});
  for (int i = 0; i < m; ++i) a.push_back({rank, i, Kind::B});
  return a;
}

// Schedule1F1B._step_microbatches: warmup_chunks = min(m, pp - stage) forwards, then (one backward, one forward)
// until every forward is done, then the remaining backwards.
Actions one_f_one_b_rank(int rank, int pp, int m) {
  Actions a;
  const int warmup = std::min(m, pp - rank);
  int fwd = 0, bwd = 0;
  for (; fwd < warmup; ++fwd) a.push_back({rank, fwd, Kind::F});
  while (true) {
    a.push_back({rank, bwd++, Kind::B});
    if (fwd == m) break;
    a.push_back({rank, fwd++, Kind::F});
  }
  while (bwd < m) a.push_back({rank, bwd++, Kind::B});
  return a;
}

// ScheduleLoopedBFS._calculate_single_rank_operations: each local stage's forwards for every microbatch, earliest
// stage first; then the backwards, last stage first and microbatches in reverse.
Actions looped_bfs_rank(int rank, int pp, int v, int m) {
  Actions a;
  for (int local = 0; local < v; ++local)
    for (int i = 0; i < m; ++i) a.push_back({local * pp + rank, i, Kind::F});
  for (int local = v - 1; local >= 0; --local)
    for (int i = m - 1; i >= 0; --i) a.push_back({local * pp + rank, i, Kind::B});
  return a;
}

// _get_warmup_ops: (v - 1) x microbatches_per_round + factor x (pp - 1 - rank), at most m x v.
int interleaved_warmup_ops(int rank, int v, int microbatches_per_round, int pp, int m, int factor) {
  const int64_t warmup = int64_t{v - 1} * microbatches_per_round + int64_t{factor} * (pp - 1 - rank);
  return static_cast<int>(std::min<int64_t>(warmup, int64_t{m} * v));
}

// ScheduleInterleaved1F1B / ScheduleInterleavedZeroBubble._calculate_single_rank_operations and
// _get_1f1b_rank_ops: warmup forwards, then (forward, backward) pairs, then the cooldown backwards; local stages
// advance every microbatches_per_round operations (forwards in ascending, backwards in descending stage order).
// With zero bubble, backward is I, and each I from the (rank + 1)-th 1F1B operation on is followed by the W of the
// oldest I without one; the remaining Ws close the list.
Actions interleaved_rank(int rank, int pp, int v, int m, bool zero_bubble) {
  const int rounds = std::max(1, m / pp);
  const int per_round = m / rounds;
  const int warmup = interleaved_warmup_ops(rank, v, per_round, pp, m, zero_bubble ? 1 : 2);
  const int microbatch_ops = v * m;
  const int fwd_bwd = microbatch_ops - warmup;
  const int cooldown = microbatch_ops - fwd_bwd;
  const int total = warmup + fwd_bwd + cooldown;
  const int num_1f1b_microbatches = zero_bubble ? rank : 0;
  const Kind backward = zero_bubble ? Kind::I : Kind::B;

  auto forward_stage = [&](int step) { return ((step / per_round) % v) * pp + rank; };
  auto backward_stage = [&](int step) { return (v - 1 - ((step - warmup) / per_round) % v) * pp + rank; };

  const int num_stages = pp * v;
  std::vector<int> fwd_mb(num_stages, 0), bwd_mb(num_stages, 0), weight_mb(num_stages, 0);
  std::vector<int> backward_op_ids;
  size_t weight_op_count = 0;
  Actions a;
  auto add_weight = [&] {
    const int s = backward_stage(backward_op_ids[weight_op_count++]);
    a.push_back({s, weight_mb[s]++, Kind::W});
  };
  auto add_backward = [&](int op) {
    const int s = backward_stage(op);
    a.push_back({s, bwd_mb[s]++, backward});
    backward_op_ids.push_back(op);
    if (zero_bubble && op - warmup >= num_1f1b_microbatches) add_weight();
  };
  for (int op = 0; op < total; ++op) {
    if (op < warmup + fwd_bwd) {
      const int s = forward_stage(op);
      a.push_back({s, fwd_mb[s]++, Kind::F});
    }
    if (op >= warmup) add_backward(op);
  }
  while (zero_bubble && weight_op_count < backward_op_ids.size()) add_weight();
  return a;
}

// ScheduleZBVZeroBubble._calculate_single_rank_operations, chunk0 = stage r, chunk1 = stage 2pp-1-r, built for
// max(2pp-1, m) microbatches; the actions of microbatches past m are then dropped.
Actions zbv_rank(int rank, int pp, int m) {
  const int n_micro = std::max(2 * pp - 1, m);
  const int chunk0 = rank, chunk1 = 2 * pp - 1 - rank;
  int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
  Actions a;
  for (int i = 0; i < 2 * (pp - rank) - 1; ++i) a.push_back({chunk0, f0++, Kind::F});
  for (int i = 0; i < rank; ++i) {
    a.push_back({chunk1, f1++, Kind::F});
    a.push_back({chunk0, f0++, Kind::F});
  }
  for (int i = 0; i < pp - rank; ++i) {
    a.push_back({chunk1, f1++, Kind::F});
    a.push_back({chunk1, b1, Kind::I});
    a.push_back({chunk1, b1++, Kind::W});
  }
  while (f1 < f0 || f0 < n_micro) {
    if (f0 < n_micro) a.push_back({chunk0, f0++, Kind::F});
    a.push_back({chunk0, b0, Kind::I});
    a.push_back({chunk0, b0++, Kind::W});
    a.push_back({chunk1, f1++, Kind::F});
    a.push_back({chunk1, b1, Kind::I});
    a.push_back({chunk1, b1++, Kind::W});
  }
  int w0 = b0, w1 = b1;
  for (int i = 0; i < rank; ++i) {
    a.push_back({chunk0, b0++, Kind::I});
    a.push_back({chunk1, b1++, Kind::I});
  }
  for (int i = 0; i < pp - rank; ++i) {
    a.push_back({chunk0, b0++, Kind::I});
    a.push_back({chunk0, w0++, Kind::W});
  }
  while (w1 < b1) a.push_back({chunk1, w1++, Kind::W});
  while (w0 < b0) a.push_back({chunk0, w0++, Kind::W});
  std::erase_if(a, [m](const PipelineAction& x) { return x.microbatch >= m; });
  return a;
}

// ScheduleDualPipeV._calculate_single_rank_operations (stage0 = r, stage1 = 2pp-1-r), its eight steps; an
// OVERLAP_F_B is its two sub-actions, F then B.
Actions dual_pipe_v_rank(int rank, int pp, int m) {
  const int stage0 = rank, stage1 = 2 * pp - 1 - rank;
  // torch's counters[(stage, F | I)]: the next microbatch of each (its W counter only counts).
  std::vector<int> next_f(2 * pp, 0), next_i(2 * pp, 0);
  std::deque<PipelineAction> weight_queue;
  Actions a;
  auto add = [&](int stage, Kind kind) {
    if (kind == Kind::F) {
      a.push_back({stage, next_f[stage]++, Kind::F});
    } else if (kind == Kind::B) {
      a.push_back({stage, next_i[stage]++, Kind::B});
    } else {  // I: its W waits in the queue
      a.push_back({stage, next_i[stage], Kind::I});
      weight_queue.push_back({stage, next_i[stage]++, Kind::W});
    }
  };
  auto add_weight_if_pending = [&] {
    if (weight_queue.empty()) return;
    a.push_back(weight_queue.front());
    weight_queue.pop_front();
  };
  auto add_overlap_f_b = [&](int forward_stage, int backward_stage) {
    add(forward_stage, Kind::F);
    add(backward_stage, Kind::B);
  };
  for (int i = 0; i < (pp - rank - 1) * 2; ++i) add(stage0, Kind::F);  // step 1: F0
  for (int i = 0; i < rank + 1; ++i) {                                 // step 2: F0 F1
    add(stage0, Kind::F);
    add(stage1, Kind::F);
  }
  for (int i = 0; i < pp - rank - 1; ++i) {  // step 3: I1 W1 F1
    add(stage1, Kind::I);
    add_weight_if_pending();
    add(stage1, Kind::F);
  }
  const int step_4 = m - pp * 2 + rank + 1;
  for (int i = 0; i < step_4; ++i) {  // step 4: F0B1 F1B0 (the last rank's first F0, B1 not overlapped: same order)
    add_overlap_f_b(stage0, stage1);
    add_overlap_f_b(stage1, stage0);
  }
  for (int i = 0; i < pp - rank - 1; ++i) {  // step 5: B1 F1B0
    add(stage1, Kind::B);
    add_overlap_f_b(stage1, stage0);
  }
  const int step_6 = rank + 1;  // step 6: B1 B0, the second half zero bubble
  bool zb = false;
  for (int i = 0; i < step_6; ++i) {
    if (i == step_6 / 2 && rank % 2 == 1) zb = true;
    add(stage1, zb ? Kind::I : Kind::B);
    if (i == step_6 / 2 && rank % 2 == 0) zb = true;
    add(stage0, zb ? Kind::I : Kind::B);
  }
  for (int i = 0; i < pp - rank - 1; ++i) {  // step 7: W0 B0
    add_weight_if_pending();
    add(stage0, zb ? Kind::I : Kind::B);
  }
  for (int i = 0; i < rank + 1; ++i) add_weight_if_pending();  // step 8: W0
  return a;
}

void check_range(std::string_view schedule, std::string_view what, int64_t v, limits::IntRange r) {
  if (v < r.lo || v > r.hi)
    throw Error(fmt::format("pipeline schedule {}: {} must be in [{}, {}], got {}", schedule, what, r.lo, r.hi, v));
}

void check_arguments(PipelineScheduleKind kind, int64_t pp, int64_t v, int64_t m) {
  const std::string_view name = to_string(kind);
  check_range(name, "pp", pp, limits::degree);
  check_range(name, "stages_per_rank", v, limits::n_layers);
  check_range(name, "microbatches", m, limits::local_batch_size);
  const int64_t actions = checked_mul({pp, v, m, 3}, fmt::format("pipeline schedule {}: actions", name));
  if (actions > kMaxPipelineActions)
    throw Error(
        fmt::format("pipeline schedule {}: pp {} x stages_per_rank {} x microbatches {} x 3 = {} actions, "
                    "more than the {} a schedule may hold",
                    name, pp, v, m, actions, kMaxPipelineActions));
  switch (stage_placement(kind)) {
    case StagePlacement::single:
      if (v != 1)
        throw Error(
            fmt::format("pipeline schedule {}: a single-stage schedule needs stages_per_rank 1, got {}", name, v));
      break;
    case StagePlacement::v:
      if (v != 2)
        throw Error(fmt::format("pipeline schedule {}: a V-shaped schedule needs stages_per_rank 2, got {}", name, v));
      break;
    case StagePlacement::looped:
      break;
  }
  if (kind == PipelineScheduleKind::one_f_one_b && m < pp)
    throw Error(
        fmt::format("pipeline schedule {}: needs microbatches >= pp (the number of stages), got {} < {}", name, m, pp));
  if (kind == PipelineScheduleKind::dual_pipe_v && m < 2 * pp)
    throw Error(fmt::format("pipeline schedule {}: needs microbatches >= 2 x pp (the number of stages), got {} < {}",
                            name, m, 2 * pp));
  if (kind == PipelineScheduleKind::interleaved_1f1b || kind == PipelineScheduleKind::interleaved_zero_bubble) {
    const int64_t rounds = std::max<int64_t>(1, m / pp);
    if (m % rounds != 0)
      throw Error(
          fmt::format("pipeline schedule {}: needs microbatches a multiple of the rounds max(1, microbatches / "
                      "pp) = {}, got {} (pp {})",
                      name, rounds, m, pp));
  }
}

}  // namespace

std::string_view to_string(PipelineActionKind kind) { return name_of(kActionNames, kind); }

std::string to_string(const PipelineAction& a) {
  return fmt::format("{}{}{}", a.stage, to_string(a.kind), a.microbatch);
}

int PipelineSchedule::rank_of_stage(int stage) const {
  return pipeline_stage_rank(stage_placement(kind), pp, num_stages(), stage);
}

std::vector<int> PipelineSchedule::stages_of_rank(int rank) const {
  if (stage_placement(kind) == StagePlacement::v) return {rank, num_stages() - 1 - rank};
  std::vector<int> stages;
  for (int local = 0; local < stages_per_rank; ++local) stages.push_back(local * pp + rank);
  return stages;
}

PipelineSchedule build_schedule(PipelineScheduleKind kind, int64_t pp64, int64_t v64, int64_t m64) {
  check_arguments(kind, pp64, v64, m64);
  PipelineSchedule s;
  s.kind = kind;
  s.pp = static_cast<int>(pp64);
  s.stages_per_rank = static_cast<int>(v64);
  s.microbatches = static_cast<int>(m64);
  const int pp = s.pp, v = s.stages_per_rank, m = s.microbatches;
  s.ranks.reserve(pp);
  for (int r = 0; r < pp; ++r) {
    switch (kind) {
      case PipelineScheduleKind::gpipe:
        s.ranks.push_back(gpipe_rank(r, m));
        break;
      case PipelineScheduleKind::one_f_one_b:
        s.ranks.push_back(one_f_one_b_rank(r, pp, m));
        break;
      case PipelineScheduleKind::interleaved_1f1b:
        s.ranks.push_back(interleaved_rank(r, pp, v, m, false));
        break;
      case PipelineScheduleKind::looped_bfs:
        s.ranks.push_back(looped_bfs_rank(r, pp, v, m));
        break;
      case PipelineScheduleKind::interleaved_zero_bubble:
        s.ranks.push_back(interleaved_rank(r, pp, v, m, true));
        break;
      case PipelineScheduleKind::zbv_zero_bubble:
        s.ranks.push_back(zbv_rank(r, pp, m));
        break;
      case PipelineScheduleKind::dual_pipe_v:
        s.ranks.push_back(dual_pipe_v_rank(r, pp, m));
        break;
    }
  }
  return s;
}

PipelineSchedule build_plan_schedule(const Plan& plan, const PipelineSplit& split) {
  try {
    return build_schedule(plan.pp_schedule, split.pp, split.stages_per_rank, split.microbatches);
  } catch (const Error& e) {
    auto origin = [&](const char* key) {
      auto it = plan.provenance.find(key);
      return it != plan.provenance.end() ? fmt::format(" ({})", it->second) : std::string();
    };
    throw Error(fmt::format("{}: {}: microbatches = local_batch_size {}{} / pp_microbatch_size {}{} = {}",
                            plan_key_origin(plan, "pp_schedule"), e.what(), plan.local_batch_size,
                            origin("local_batch_size"), plan.pp_microbatch_size, origin("pp_microbatch_size"),
                            split.microbatches));
  }
}

}  // namespace tptune
