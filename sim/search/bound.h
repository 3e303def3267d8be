#pragma once
// Branch-and-bound for `tp-plan search`: a lower bound on a candidate's step time from its op costs alone, checked
// before the schedule (the timeline, then the report), and the best-so-far it is compared with.
//
// The bound. schedule() (sim/timeline/timeline.h) puts every op on one of four streams (compute, TP, DP, DP replicate)
// and starts it no earlier than its stream is free and no earlier than 0: `start >= free[stream]`, `end = start +
// duration`, `free[stream] = end` (Scheduler::run_expanded, and the fast path, which equals it). So each stream's free
// time after its last op is at least the sum of its ops' durations (instances x per-instance sum for block segments),
// and step_time_us = max over streams of free[stream] >= max over streams of that sum. No op starts before the host
// has issued it, after every op before it (CostParams::eager_dispatch_us), so the last op starts no earlier than the
// host's time for the whole step (OpCosts::host_dispatch_us); the larger of the two is step_time_lower_bound_us.
// make_report() (sim/simulate.cc) gives tokens/s per GPU = tokens_per_rank / (tp * step_time_us * 1e-6), decreasing
// in the step time, so tokens_per_rank / (tp * bound) is an upper bound on the candidate's tokens/s. Both are computed
// with a relative margin of 1e-9 (far above the rounding of the sums) so that the floating-point results keep the
// inequality too; tests/sim/search_bound_test.cc checks bound <= step time for every candidate of the examples.
//
// Pruning. A candidate whose tokens/s upper bound is below the tokens/s of k candidates already found feasible can
// not be in the top k (ranks_before, sim/search/search.h: tokens/s first); if one of them also needs no more memory
// than it, it is not on the Pareto front (sim/search/pareto.h: it is slower than something that needs no more memory)
// and, being slower, its removal changes no other candidate's place on it. The search prunes such a candidate as
// PruneReason::bound, so the first k of the ranking and the Pareto front equal brute force's, whichever order the
// worker threads finish in; only which candidates are pruned (the "bound" count) may vary between runs with threads
// > 1. Valid for the tokens_per_second and cost_per_token objectives (the same order); off for step_time and memory.
// Gradient accumulation (search.gradient_accumulation): the bound is one microbatch's Program's, and the step of ga
// microbatches (sim/accumulation.h) is not bounded by it in tokens/s terms without a per-microbatch bound, so the
// evaluator does not bound-prune a candidate with ga > 1 (it is scheduled; exactness is kept, only the saving lost).

#include <cstddef>
#include <mutex>
#include <vector>

#include "plans/program/program.h"
#include "sim/timeline/timeline.h"

namespace tptune {

// max over streams of the summed op durations and the host's dispatch of the step, microseconds, lowered by the 1e-9
// margin: <= schedule()'s step time.
double step_time_lower_bound_us(const Program& p, const OpCosts& costs);
// The same bound for every block count k of a Program split by ac_layers (plans/lower/incremental.h set_ac_layers()),
// from one costing: per stream, the segments outside the block backward, plus (L - k) x one block without recompute
// plus k x one checkpointed block; equal to step_time_lower_bound_us() of the Program at k but for rounding, which the
// margin covers.
struct SplitStreamSums {
  double fixed[kStreams] = {};         // every segment but the two block backward ones, instances included
  double plain[kStreams] = {};         // one instance of the block backward without recompute
  double checkpointed[kStreams] = {};  // one instance of the checkpointed block backward
  double host_fixed = 0, host_plain = 0, host_checkpointed = 0;  // the host's dispatch, the same way
};
SplitStreamSums split_stream_sums(const Program& split, const OpCosts& costs);
double step_time_lower_bound_us(const SplitStreamSums& s, int64_t n_layers, int64_t k);
// tokens_per_rank / (tp * bound): >= make_report()'s tokens/s per GPU, raised by the 1e-9 margin.
double tokens_per_second_upper_bound(const Program& p, double step_time_lower_bound_us);

// The feasible candidates found so far, as far as pruning needs them: the k best tokens/s, and the Pareto front of
// (peak memory, tokens/s). Shared by the worker threads (one mutex; a few comparisons under it per candidate).
class Incumbents {
 public:
  explicit Incumbents(size_t k) : k_(k) {}
  // A feasible candidate's result.
  void add(double tokens_per_second, double peak_memory);
  // True when k recorded candidates have tokens/s > `tokens_per_second_bound` and one of those needs at most
  // `peak_memory`: a candidate with these bounds is neither in the top k nor on the Pareto front.
  bool dominates(double tokens_per_second_bound, double peak_memory) const;
  size_t k() const { return k_; }
  // k candidates recorded (before that, dominates() is false for every candidate).
  bool holds_k() const;

 private:
  size_t k_;
  mutable std::mutex m_;
  std::vector<double> top_;  // the k best tokens/s, descending
  // Pareto front of what was added: peak memory ascending, tokens/s strictly ascending.
  struct Point {
    double memory, tps;
  };
  std::vector<Point> front_;
};

}  // namespace tptune
