#pragma once
// `tp-plan search`: from one config, the best TP plan for its cluster.
//
//   SearchResult r = search(cfg, {.threads = 8});
//   r.ranking[0] is the index (into r.results) of the winner.
//
// Candidates (sim/search/space.h) are evaluated in parallel (sim/search/eval.h: constraints, lowering, memory,
// memoized op costs, schedule), each exactly as lower() + simulate() would, so the ranking equals that of a
// brute-force loop over every candidate (tests/sim/search_test.cc checks it). Candidates that share a Program at
// tp 1 with an earlier one are pruned as "redundant at tp 1" (the earlier one is evaluated), and a larger local batch
// of a plan whose smaller batch misses the memory budget is pruned without being lowered.
//
// With SearchOptions::bound_top = k, candidates that provably can be neither in the top k nor on the Pareto front are
// pruned as "bound" before their schedule (sim/search/bound.h); the first k of the ranking and the front are unchanged.
//
// With search.seq_lens, each candidate runs at its own sequence length; tokens/s per GPU (and so cost per token) is
// per token, so candidates at different lengths rank against each other (step time and memory are per step).
// Ranking by the space's objective, best first; ties broken by the next criterion, then by enumeration order:
//   tokens_per_second   tokens/s per GPU (higher), then peak memory (lower)
//   cost_per_token      the same order (search.gpu_hour_price / tokens per GPU-hour), reported in USD per 1M tokens
//   step_time           step time (lower), then tokens/s per GPU (higher)
//   memory              peak memory (lower), then tokens/s per GPU (higher)
// With search.max_local_batch_size (instead of local_batch_sizes), each candidate is evaluated at its largest local
// batch that fits memory, found by bisection (CandidateEvaluator::largest_fitting_batch); results carry that batch.
// When nothing is feasible, `closest` lists the candidates that came nearest: those that were lowered and only
// missed the memory budget, by how much they missed it, else one per pruning reason.

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "plans/config.h"
#include "sim/cluster_spec.h"
#include "sim/cost_params.h"
#include "sim/search/eval.h"
#include "sim/search/space.h"

namespace tptune {

struct SearchOptions {
  int threads = 0;  // 0: all hardware threads
  CostParams cost = default_cost_params();
  // Memoize op durations across candidates (sim/search/eval.h). Off by default: measured, it does not pay with
  // today's cost functions (405B default space on one core: 106 ms with, 104 ms without; 8B: 196 vs 176 ms); it is
  // kept, and tested equal, for cost models that get expensive (calibrated curves).
  bool memoize_op_costs = false;
  // Prune larger local batches of a candidate whose smaller batch already misses the memory budget, without
  // lowering them (exact: peak memory is non-decreasing in the local batch). false: lower everything (measurements).
  bool skip_larger_batches = true;
  // Lower each structure (a candidate but its local batch size) at its first two batch sizes only and set the
  // batch-parametric Program to the others (sim/search/batch_program.h): the same Programs, field for field.
  // false: lower every candidate (the reference the tests compare against, and the "before" of bench_search).
  bool batch_parametric = true;
  // Lower each structure but its activation-checkpointing policy once per batch size (lower_unfinished(), plans/
  // lower.h) and finish it for every policy, into Programs the evaluator recycles (finish_lowering_into()); and give
  // a sequence-parallel structure's unfinished Programs with async TP off to its async-on sibling
  // (unfinished_with_async_tp(): the lowering proper does not read async_tp): the same Programs. false: lower every
  // candidate (with the above).
  bool share_policy_lowering = true;
  // Branch-and-bound (sim/search/bound.h): > 0 keeps the first `bound_top` of the ranking and the Pareto front exact
  // and prunes (prune::kBound) the candidates whose step-time lower bound, from their op costs, shows they can be in
  // neither, without scheduling them. The ranking then lists every candidate that might be in the top `bound_top`,
  // not every feasible one. Used for the tokens_per_second and cost_per_token objectives only (for the others it is
  // off). 0 (the default): every feasible candidate is scheduled and ranked.
  size_t bound_top = 0;
  // Called on the calling thread about every 100 ms while the search runs, and once at the end.
  std::function<void(size_t done, size_t total)> progress;
};

struct SearchResult {
  ResolvedSpace space;
  ClusterSpec cluster;
  size_t evaluated = 0;  // candidates in the space
  size_t feasible = 0;
  std::map<std::string, size_t> pruned;  // reason -> candidates
  double elapsed_ms = 0;
  int threads = 1;
  size_t memo_hits = 0, memo_misses = 0;
  size_t lowered = 0;                    // lower() or lower_unfinished() calls
  size_t finished = 0;                   // Programs from finish_lowering() (share_policy_lowering)
  size_t patched = 0;                    // Programs from a BatchProgram (batch_parametric)
  PhaseTimes phases;                     // summed over the workers
  std::vector<CandidateResult> results;  // every candidate, in enumeration order
  std::vector<int> ranking;              // feasible candidates, best first
  std::vector<int> closest;              // when none is feasible: the nearest misses, nearest first
  std::vector<int> pareto;               // feasible, tokens/s vs peak memory (sim/search/pareto.h), memory ascending

  const CandidateResult* winner() const {
    return ranking.empty() ? nullptr : &results[static_cast<size_t>(ranking[0])];
  }
};

SearchResult search(const Config& cfg, const SearchOptions& options = {});

// The ranking order: true when `a` is strictly better than `b` under `o` (feasible results only); ties in enumeration
// order (enumerated_before).
bool ranks_before(const CandidateResult& a, const CandidateResult& b, Objective o);
// Enumeration order: the index, then (search.ac_layers' swept candidates, which share their enumerated candidate's
// index) the block count.
bool enumerated_before(const Candidate& a, const Candidate& b);

}  // namespace tptune
