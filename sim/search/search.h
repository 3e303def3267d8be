#pragma once
// `tp-plan search`: from one config, the best TP plan for its cluster.
//
//   SearchResult r = search(cfg, {.threads = 8});
//   r.ranking[0] is the index (into r.results) of the winner.
//
// Candidates (sim/search/space.h) are evaluated in parallel (sim/search/eval.h: constraints, lowering shared between
// candidates, memory, op costs, schedule), each exactly as lower() + simulate() would, so the ranking equals that of a
// brute-force loop over every candidate (tests/sim/search_test.cc checks it) and the results equal, number for number,
// those of a search that lowers every candidate (tests/sim/search_reference.h, the tests' reference). Candidates that
// share a Program at tp 1 with an earlier one are pruned as "redundant at tp 1" (the earlier one is evaluated), and a
// larger local batch of a plan whose smaller batch misses the memory budget is pruned without being lowered.
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
// batch that fits memory, found by bisection (CandidateEvaluator::evaluate_largest_fitting); results carry that batch.
// When nothing is feasible, `closest` lists the candidates that came nearest: those that were lowered and only
// missed the memory budget, by how much they missed it, else one per pruning reason.

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "plans/language/config.h"
#include "sim/cluster_spec.h"
#include "sim/cost/cost_params.h"
#include "sim/pipeline/step.h"
#include "sim/search/candidate_results.h"
#include "sim/search/eval.h"
#include "sim/search/space.h"
#include "sim/trust.h"

namespace tptune {

struct SearchOptions {
  int threads = 0;  // 0: all hardware threads
  CostParams cost = default_cost_params();
  // Branch-and-bound (sim/search/bound.h): > 0 keeps the first `bound_top` of the ranking and the Pareto front exact
  // and prunes (PruneReason::bound) the candidates whose step-time lower bound, from their op costs, shows they can be
  // in neither, without scheduling them. The ranking then lists every candidate that might be in the top `bound_top`,
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
  std::map<PruneCause, size_t> pruned;  // reason -> candidates
  double elapsed_ms = 0;
  int threads = 1;
  size_t lowered = 0;            // lower() or lower_unfinished() calls
  size_t finished = 0;           // Programs from finish_lowering()
  size_t patched = 0;            // Programs from a BatchProgram
  size_t pipeline_programs = 0;  // microbatch Programs costed for the pipeline candidates (shared)
  PhaseTimes phases;             // summed over the workers
  // Every candidate, in enumeration order (then the ac_layers sweep's kept ones); those a static rule pruned are
  // counted, not stored, and rebuilt when read (sim/search/candidate_results.h): the search's memory grows with the
  // candidates that pass the static rules only.
  CandidateResults results;
  std::vector<int> ranking;  // feasible candidates, best first
  std::vector<int> closest;  // when none is feasible: the nearest misses, nearest first
  std::vector<int> pareto;   // feasible, tokens/s vs peak memory (sim/search/pareto.h), memory ascending
  // How far to trust the ranking's numbers (sim/trust.h): the cluster's device spec; a caller that searched with a
  // --calibration file's parameters replaces it.
  PredictionTrust trust;

  const CandidateResult* winner() const {
    return ranking.empty() ? nullptr : results.find(static_cast<size_t>(ranking[0]));
  }
};

SearchResult search(const Config& cfg, const SearchOptions& options = {});

// The microbatch Program that pipeline candidates share (cost_pipeline_program(), sim/pipeline/step.h): candidates
// that shares_pipeline_program() share it, so the search evaluates them together with one SharedPipelineProgram,
// which the first of them that needs it fills (the Program's costs, or the tptune::Error it threw, which every later
// one rethrows: the same error simulate_pipeline() would throw for each of them).
struct SharedPipelineProgram {
  std::optional<PipelineProgramCosts> costs;
  std::optional<std::string> error;  // the message of cost_pipeline_program()'s tptune::Error
};
// Whether two pipeline candidates share their microbatch Program: equal but for pp_schedule, pp_stages_per_rank,
// local_batch_size, gradient_accumulation_steps (and index), none of which the lowering reads.
bool shares_pipeline_program(const Candidate& a, const Candidate& b);

// One pipeline candidate (search.pp_degrees > 1) as the search evaluates it: the static rules, then simulate_pipeline()
// of its plan (sim/pipeline/step.h; its errors prune it as `simulation`), the memory budget and the throughput floor.
// With `shared` (for candidates that share_pipeline_program() with those it was used for before), the microbatch
// Program comes from it, computed on first use; the result is the same, number for number. With `incumbents`
// (branch-and-bound, sim/search/bound.h), a candidate whose pipeline bound (PipelineBound, sim/pipeline/step.h:
// tokens/s at most, peak memory at least) they dominate is pruned as PruneReason::bound before its timeline, and a
// feasible one is added to them.
CandidateResult evaluate_pipeline_candidate(const Config& cfg, const ClusterSpec& cluster, const CostParams& cost,
                                            const ResolvedSpace& space, const Candidate& c,
                                            SharedPipelineProgram* shared = nullptr, Incumbents* incumbents = nullptr);

// The last step of search(): counts the reasons of r.results (every candidate in enumeration order, then the
// ac_layers sweep's kept ones; the stored results' and the dropped counts) into r.pruned (which may hold counts
// already: the sweep's pruned block counts), and fills r.feasible, r.ranking, r.pareto and r.closest. For a caller that
// evaluated the candidates itself (the tests' reference search, tests/sim/search_reference.h).
void rank_results(SearchResult& r);

// The ranking order: true when `a` is strictly better than `b` under `o` (feasible results only); ties in enumeration
// order (enumerated_before).
bool ranks_before(const CandidateResult& a, const CandidateResult& b, Objective o);
// Enumeration order: the index, then (search.ac_layers' swept candidates, which share their enumerated candidate's
// index) the block count.
bool enumerated_before(const Candidate& a, const Candidate& b);

}  // namespace tptune
