#pragma once
// Evaluation of one search candidate: constraints -> lower -> memory -> cost -> schedule -> report.
//
// The result is exactly what the brute-force path gives (lower(); simulate(); fits = peak + headroom <= capacity),
// number for number; the evaluator is only faster:
//  * static constraints (sim/search/constraints.h) refuse a candidate before it is lowered;
//  * each candidate is lowered with the config's training section at its own seq_len (candidate_training());
//  * candidates that differ only in activation checkpointing share one lowering per local batch size
//    (lower_unfinished(), plans/lower/incremental.h), finished for each policy; an async-TP-on structure takes its
//    async-off sibling's (unfinished_with_async_tp());
//  * candidates that differ only in local batch size share one Program (sim/search/batch_program.h): the caller
//    passes one StructureLowering through them, smallest batch first; the first two batch sizes are finished, the
//    others are the batch-parametric Program set to their batch (no lowering, no allocation);
//  * the memory model runs before the schedule, and a candidate that does not fit is not scheduled (its StepReport
//    then holds the memory only);
// tests/sim/search_reference.h is the reference these are checked against: every candidate lowered with lower().
// One evaluator per worker thread (no locking); each is used by one thread at a time.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "plans/language/config.h"
#include "plans/lower/incremental.h"
#include "plans/program/program.h"
#include "sim/cluster_spec.h"
#include "sim/cost/cost_params.h"
#include "sim/search/batch_program.h"
#include "sim/search/bound.h"
#include "sim/search/phase_times.h"
#include "sim/search/prune_reason.h"
#include "sim/search/space.h"
#include "sim/simulate.h"
#include "sim/timeline/timeline.h"

namespace tptune {

// The largest b in 1..limit with fits(b), by bisection, for `fits` monotone (true up to some b, false after); 1 when
// fits(1) is false. The search's and its test reference's largest-fitting-batch both bisect with it.
template <class Fits>
int64_t largest_fitting(int64_t limit, Fits&& fits) {
  int64_t lo = 1;
  if (limit > 1 && fits(1)) {
    int64_t hi = limit + 1;  // fits(lo); hi == limit + 1 or !fits(hi)
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      (fits(mid) ? lo : hi) = mid;
    }
  }
  return lo;
}

struct CandidateResult {
  Candidate candidate;
  PruneCause pruned;        // why it was pruned (sim/search/prune_reason.h); PruneReason::none when feasible
  std::string detail;       // the numbers behind the reason, or the full error message
  bool has_memory = false;  // report.memory is set (the candidate was lowered)
  bool has_step = false;    // the whole report is set (feasible)
  StepReport report;
  bool feasible() const { return pruned.none(); }
};

// Unfinished Programs (plans/lower/incremental.h) of one structure but its activation-checkpointing policy, by local
// batch size: lowered once, finished for every policy.
using UnfinishedByBatch = std::map<int64_t, UnfinishedProgram>;

// The Programs of one policy of a structure, evaluated smallest batch first (see CandidateEvaluator::evaluate).
struct BatchState {
  std::optional<Program> first;           // the first lowered batch size, until the BatchProgram is made
  std::optional<Program> second;          // the second, until a third batch size needs the BatchProgram: made then, not
                                          // before (when the second misses memory, no larger batch size is evaluated)
  std::unique_ptr<BatchProgram> program;  // from the first two; set to each later batch size
  // The UnfinishedProgram::id each was finished from by finish_lowering_into() (program: its first Program's); 0 when
  // not (plans/lower/incremental.h: the next policy's finish_lowering_into() into it copies less).
  uint64_t first_from = 0, second_from = 0, program_from = 0;
  bool lower_each = false;  // BatchProgram::make refused: lower every batch size
  std::string why_not;      // its reason
};

// What the candidates of one structure share while the search evaluates them (all but the activation-checkpointing
// policy and the local batch size equal; the seq_len is part of the structure: Programs at two sequence lengths have
// other shapes), one policy after the other, each smallest batch first.
struct StructureLowering {
  UnfinishedByBatch unfinished;  // by local batch size: lowered by the first policy that needs it, finished for each
  BatchState batch;              // the current policy's; the caller recycles it (CandidateEvaluator::recycle) before
                                 // the next policy
  bool last_policy = false;      // the current policy is the structure's last and `unfinished` is not kept for an
                                 // async-TP sibling: its Programs are finished into a Program an earlier policy
                                 // finished from them, or moved and finished whole, and then dropped
};

// What sweep_ac_layers() found for one enumerated candidate's block counts.
struct AcLayersSweep {
  std::vector<CandidateResult> kept;    // the scheduled feasible ones (candidate.ac_layers = k), k ascending
  std::map<PruneCause, size_t> pruned;  // reason -> how many of its block counts
};

class CandidateEvaluator {
 public:
  CandidateEvaluator(const Config& cfg, const ClusterSpec& cluster, const CostParams& cost, const ResolvedSpace& space);

  // Evaluates `c` (not its tp-1 representative: the caller copies that result), the next candidate of structure `s`:
  // its Program is the BatchProgram of `s.batch` set to its batch size once the policy's first two batch sizes were
  // evaluated, else finished from the structure's unfinished Program at its batch size (lowered by the first policy
  // that needs it). Exactly lower() + simulate() of its plan, whichever way its Program was made.
  CandidateResult evaluate(const Candidate& c, StructureLowering& s);
  // `c` at the largest local batch in 1..limit at which it lowers and fits memory with the headroom, evaluated there
  // (at 1 when none does: the result then says why). Bisection: about log2(limit) probes instead of `limit`, and each
  // probe is the batch-parametric Program (sim/search/batch_program.h) set to its batch: the first two probes (1 and
  // the first midpoint, the same for every policy of a structure) are finished from `unfinished` (the structure's,
  // shared with its other policies as evaluate() shares them), and the others are BatchProgram::at() of the two: no
  // lowering, and at(b) == lower(b) field for field; the evaluation at the answer reuses the probes' Program.
  // Exact because "fits" is monotone, true up to some batch and false above it: every tensor of a Program is
  // non-decreasing in the local batch (activations, logits and their gradients scale with it; parameters, gradients
  // and optimizer state do not depend on it) and the op list does not change with it, so memory_model()'s peak is
  // non-decreasing in it; and the batch-dependent refusals of lower() (check_local_batch(): the largest tensor and
  // FLOP counts within limits) hold from some batch upwards. tests/sim/search_bisect_test.cc checks both premises
  // on the example spaces, and the answer against enumerating every size and against lowering every probe.
  CandidateResult evaluate_largest_fitting(const Candidate& c, int64_t limit, UnfinishedByBatch& unfinished);
  // `c` evaluated from `prog`, the Program its caller made for it (lower() of candidate_plan() of `c` at one
  // microbatch, gradient_accumulation_steps 1, under candidate_training()): what evaluate() does once it has the
  // Program (memory, op costs, bound, schedule, report). For a caller that lowers every candidate itself: the tests'
  // reference search (tests/sim/search_reference.h), which checks the evaluator's ways of making Programs.
  CandidateResult evaluate_program(const Candidate& c, const Program& prog);
  // search.ac_layers: the candidates that are `c` (a policy other than none, on every block) on the first k blocks,
  // for every k of the space's ac_layers, each exactly as lower() + simulate() of its plan would give, without a
  // lowering per k. The Program at one k is finished from the structure's unfinished Program at c's batch
  // (`unfinished`, shared with c's other policies; lowered by the first that needs it) and costed once; the Programs at
  // the other k differ only in two segments' layer ranges (set_ac_layers(), plans/lower/incremental.h), so their op
  // costs are the same, their memory is memory_from_parts() of the same parts with other block counts (sim/memory.h),
  // and their op-cost bound is the same per-stream sums with other counts (SplitStreamSums, sim/search/bound.h). So
  // every k costs a memory check, and with `incumbents` a bound check; only the ones these do not prune are scheduled
  // (evaluate_program()) and, when feasible, kept. `oom`: one flag per k, set when k missed memory at a smaller batch
  // of this policy (peak memory is non-decreasing in the local batch): those k are pruned without a look, and when
  // all are set nothing is lowered.
  void sweep_ac_layers(const Candidate& c, UnfinishedByBatch& unfinished, std::vector<char>& oom, AcLayersSweep& out);
  // Programs this evaluator no longer needs: their buffers are reused by later finish_lowering_into() calls (a fresh
  // Program and its destruction cost about as much as finishing it). The arguments are left empty.
  // `from`: the UnfinishedProgram::id `p` was finished from by finish_lowering_into(), unchanged since (0: unknown).
  void recycle(Program&& p, uint64_t from = 0);
  void recycle(BatchState& b);
  void recycle(UnfinishedByBatch& u);
  // Async TP off and on share their unfinished Programs (plans/lower/incremental.h, unfinished_with_async_tp()): the
  // search keeps a structure's with async TP off (`c` any of its candidates) when its async-TP-on sibling is to be
  // evaluated, and takes them for that sibling, set to its plan (its checks run; an entry whose check throws is
  // dropped, so that evaluate() lowers it anew and reports what lower() throws). Empty when this evaluator kept none
  // for it.
  bool has_async_sibling(const Candidate& c) const;
  void keep_for_async_sibling(const Candidate& c, UnfinishedByBatch&& u);
  UnfinishedByBatch take_async_sibling(const Candidate& c);
  // Branch-and-bound (sim/search/bound.h): when set, a candidate the incumbents dominate is pruned as
  // PruneReason::bound after its op costs, before its schedule; every feasible result is added to them. Shared by all
  // evaluators.
  Incumbents* incumbents = nullptr;
  // false: a result a static rule prunes has no detail (the search counts such candidates without keeping their
  // results, and rebuilds one with its detail when it is read: sim/search/candidate_results.h).
  bool static_details = true;
  PhaseTimes phases;                              // where this evaluator's time went
  size_t lowered = 0, finished = 0, patched = 0;  // lower() or lower_unfinished(); finish_lowering(); at()

 private:
  const Config& cfg_;
  const ClusterSpec& cluster_;
  const CostParams& cost_;
  const ResolvedSpace& space_;
  // The config's training section at `c`'s seq_len (candidate_training() without a copy): valid until the next call.
  const Training& training(const Candidate& c);
  Training training_;
  // evaluate_program() into `r` (its candidate set); `costs` / `memory`: cost_ops(prog) / memory_model(prog) when
  // the caller has them (the ac_layers sweep).
  void evaluate_into(CandidateResult& r, const Program& prog, const std::string& plan_source,
                     int64_t gradient_accumulation_steps, const OpCosts* costs = nullptr,
                     const MemoryReport* memory = nullptr);
  // Whether a static constraint refuses `c` (then `r` says which).
  bool refused(CandidateResult& r, const Candidate& c);
  // Evaluates `c` into `r` from the Programs `batch` already holds (its first Program when it is at c's batch and
  // policy; its BatchProgram, made from its first two Programs when there are two), or returns false when it holds
  // none that serves `c`.
  bool evaluate_from_batch(CandidateResult& r, const Candidate& c, const Plan& plan, BatchState& batch);
  // The largest local batch in 1..limit at which `c` lowers and fits (evaluate_largest_fitting()); the probes'
  // Programs are left in `probes`.
  int64_t largest_fitting_batch(const Candidate& c, int64_t limit, BatchState& probes, UnfinishedByBatch& unfinished);
  OpCosts sweep_costs_;  // sweep_ac_layers()'s op costs of sweep_ (the same at every block count)
  OpCosts costs_;        // evaluate_into()'s op costs of the Program it evaluates (its buffers reused)
  // The schedule's structure of the last Program scheduled (sim/timeline/timeline.h): the next one of its structure and
  // policy (the next local batch size) reuses it.
  ScheduleCache schedule_cache_;
  // `c`'s Program at its batch for largest_fitting_batch(): batch.program->at(), or finished (then kept in `batch` as
  // its first Program, or made into its BatchProgram with the first). Throws what lower() throws.
  const Program& program_at(const Candidate& c, BatchState& batch, UnfinishedByBatch& unfinished);
  // The structure's unfinished Program at `c`'s batch size, lowered from `plan` by the first candidate that needs it.
  UnfinishedByBatch::iterator unfinished_at(UnfinishedByBatch& unfinished, const Candidate& c, const Plan& plan);
  // A recycled Program (or an empty one): one finished from the unfinished Program `want` when there is one (then
  // `*from` is `want`, else 0).
  Program take_program(uint64_t want = 0, uint64_t* from = nullptr);
  Program sweep_;  // sweep_ac_layers()'s split Program (its buffers reused from one call to the next)
  static constexpr size_t kSparePrograms = 8;
  struct Spare {
    Program prog;
    uint64_t from = 0;  // the UnfinishedProgram::id it was finished from, unchanged since (0: unknown)
  };
  std::vector<Spare> spare_;
  static constexpr size_t kKeptSiblings =
      4;  // structures between a sibling pair in enumeration order: 1 (loss parallel)
  std::vector<std::pair<Candidate, UnfinishedByBatch>> siblings_;  // oldest first
};

// peak + headroom <= capacity: the search's memory constraint.
bool fits_with_headroom(const MemoryReport& m, double headroom_gib);

// The search's two constraints on a simulated candidate, one check for the single-Program path (CandidateEvaluator)
// and the pipeline's (sim/search/search.cc). Each sets r.pruned and r.detail when the candidate fails it.
// Its memory (r.report.memory) against fits_with_headroom(); false when it does not fit.
bool within_memory(CandidateResult& r, const SearchSpace& space);
// Its step (r.report, r.has_step set) against space.min_tokens_per_second_per_gpu; one that passes is added to
// `incumbents` (when set).
void check_throughput(CandidateResult& r, const SearchSpace& space, Incumbents* incumbents);

}  // namespace tptune
