#pragma once
// The candidates of `tp-plan search`: every full plan of the config's `search:` section (plans/language/config.h).
//
// A candidate fixes everything a Plan holds: the TP degree, the plan family (a preset's module plan or a user plan
// file's), HSDP replicate degree, float8 recipe, async TP, loss parallel, activation checkpointing and local batch
// size; dp_shard is world / (tp x dp_replicate) — and the sequence length it trains at (search.seq_lens). The space is
// the Cartesian product of the section's lists, enumerated in a fixed order (seq_len, tp, dp_replicate, cp, ep, family,
// float8, async, loss parallel, AC, local batch; the config's list order within each), so that a candidate's index
// identifies
// it and ties in the ranking break the same way every run. The sequence length is outermost: each length's block is
// the space as it was before the axis existed, in its old order (a one-length space enumerates exactly as before),
// and everything the search shares between candidates (lowerings, batch-parametric Programs, async-TP siblings) stays
// within one length, whose Programs have other shapes.
//
// Defaults when the config has no `search:` section or leaves a list out are SearchSpace's (plans/language/config.h),
// except tp_degrees, whose default is the divisors of the world size up to 2 x gpus_per_node (TP beyond two nodes is
// never worth its inter-node traffic for the models tptune knows, and would only lengthen the list of pruned
// candidates), and ep_degrees (default_ep_degrees()).
//
// Expert parallelism (search.ep_degrees, a mixture-of-experts model): ep is an axis beside cp (a dense model's list is
// [1], so its space enumerates as before the axis existed). A candidate's ep must divide the routed experts and its
// dp_shard x cp x tp (torchtitan's sparse mesh, plans/language/expert_parallel.h); the ones that do not, and the
// combinations the MoE lowering refuses (async TP, float8 tensorwise), are pruned by static
// reasons the report counts (sim/search/constraints.h).
//
// User plan files: their module styles define the family; the search varies the toggles around them, except
// loss_parallel, which a module plan fixes (its output projection either keeps vocab-sharded logits or not), so a
// file's own loss_parallel is kept.

#include <cstdint>
#include <string>
#include <vector>

#include "plans/language/config.h"
#include "plans/language/plan.h"
#include "plans/language/plan_toggles.h"

namespace tptune {

// One plan family: a preset (module plan derived from the toggles) or a loaded plan file (module plan fixed).
struct PlanFamily {
  std::string name;  // "vanilla", "sequence_parallel", or the file's family / file name
  bool preset = true;
  Plan file_plan;  // the loaded file (preset == false)
  // Whether the family is known to use sequence parallelism (the presets; unknown, and so false, for files: their
  // lowering decides what async TP and the sequence split need).
  bool sequence_parallel = false;
};

// A candidate: its plan's toggles (PlanToggles, plans/language/plan_toggles.h) and its family. Each holder's reading of
// a toggle: dp_shard is world / (tp_degree x dp_replicate), 0 when that is not whole; ac_layers is 0 (every block) as
// enumerate_candidates() gives it, and the search's ac_layers sweep sets k; seq_len is one of ResolvedSpace::seq_lens
// (the candidate is lowered and simulated with the config's training.seq_len set to it: candidate_training());
// gradient_accumulation_steps, with search.gradient_accumulation, is global_batch_size / (local batch x dp_shard x
// dp_replicate) when that is whole (else 1, and the static rule prunes the candidate), 1 otherwise; it is not part of
// the Program (a microbatch): the report applies it (sim/accumulation.h).
struct Candidate : PlanToggles {
  int index = 0;   // position in enumeration order
  int family = 0;  // into ResolvedSpace::families
};

// The config's `search:` section (SearchSpace, plans/language/config.h: the axes' lists, the objective and the
// constraints) with the defaults filled in (tp_degrees, dp_replicate, ep_degrees, seq_lens), and what resolving adds:
// the families (presets and loaded plan files, in that order), the world size and the config's seq_len.
struct ResolvedSpace : SearchSpace {
  std::vector<PlanFamily> families;  // the presets, then the plan files (loaded)
  // max_local_batch_size > 0: local_batch_sizes is {max_local_batch_size}, and each candidate's batch is the largest
  // that fits in 1..max_local_batch_size.
  // ac_layers: block counts k < n_layers, ascending. Not enumerated: each candidate with a policy other than none
  // stands for itself (every block) and one candidate per k, which the search sweeps from one lowering
  // (CandidateEvaluator::sweep_ac_layers, sim/search/eval.h); candidates() counts them all.
  int64_t config_seq_len = 0;  // the config's training.seq_len
  int world_size = 1;

  size_t size() const;  // number of enumerated candidates of the pp 1 space (enumerate_candidates())
  // Number of pipeline candidates (pipeline_candidates() of the pp 1 space): size() x the pp degrees above 1 x
  // pp_schedules x pp_stages_per_rank x pp_microbatch_sizes; 0 when no pp degree is above 1.
  size_t pipeline_size() const;
  // enumerate_candidates(*this)[index] (index < size()), decoded from the index without the list.
  Candidate candidate_at(size_t index) const;
  // The same from `same_structure`, a candidate of the same structure (all but the activation checkpointing and the
  // local batch size equal: the two innermost lists), decoding only those two.
  Candidate candidate_at(size_t index, const Candidate& same_structure) const;
  // pipeline_candidates(*this, enumerate_candidates(*this), first_index)[k] (k < pipeline_size()), likewise.
  Candidate pipeline_candidate_at(size_t k, int first_index) const;
  // Every candidate of the space: size() plus, for each enumerated candidate with a policy other than none, one per
  // ac_layers value (at most limits::max_swept_candidates).
  int64_t candidates() const;
  // Whether the space is about sequence lengths (more than one, or one other than training.seq_len): then the
  // candidates' plans carry their seq_len (Plan::seq_len, for the plan YAML and the exports).
  // Whether the space has pipeline candidates (search.pp_degrees other than [1]).
  bool searches_pp() const {
    for (int pp : pp_degrees)
      if (pp > 1) return true;
    return false;
  }
  bool searches_seq_len() const {
    return seq_lens.size() > 1 || (seq_lens.size() == 1 && seq_lens[0] != config_seq_len);
  }
};

// Divisors of the world size up to 2 x gpus_per_node (at least {1}).
std::vector<int> default_tp_degrees(const Cluster& c);
// search.ep_degrees when the config gives none: for a mixture-of-experts model every degree its sparse mesh may take
// on `world_size` GPUs, the divisors of the world size that divide the routed experts (torchtitan's parallel_dims: ep
// divides dp_shard x cp x tp, itself a divisor of the world; GroupedExperts Shard(0): ep divides the experts), in
// ascending order from 1; for a dense model {1}.
std::vector<int> default_ep_degrees(const Model& m, int world_size);
// The config's space with defaults filled in and plan files loaded (tptune::Error naming the file on bad input).
// Every path to the candidates passes here, so this is where the space's size is capped: more than
// limits::max_search_candidates candidates, the pp 1 ones and the pipeline ones together (with search.ac_layers,
// more than limits::max_swept_candidates swept), is a tptune::Error "<file>:<line>: search space size (...): N
// candidates (...); expected at most M: shorten search.<list> (<file>:<line>), ..." that gives the full count, each
// list's length, and the longest lists with where they are stated; counted with saturating arithmetic, so lists
// whose product overflows 64 bits are refused alike.
ResolvedSpace resolve_space(const Config& cfg);
// Every candidate, in enumeration order.
std::vector<Candidate> enumerate_candidates(const ResolvedSpace& s);
// The pipeline candidates (search.pp_degrees > 1): each enumerated candidate of `base` (the pp 1 space) with each
// pp degree > 1, schedule, stages per rank and microbatch size (in the lists' order, innermost the microbatch size),
// indexed from
// `first_index` (after `base` when pp 1 is searched too, else 0); dp_shard world / (pp x tp x cp x dp_replicate) (0
// when not whole), gradient accumulation likewise.
std::vector<Candidate> pipeline_candidates(const ResolvedSpace& s, const std::vector<Candidate>& base, int first_index);
// The full Plan of a candidate: the family's module plan with the candidate's toggles (and its seq_len when
// s.searches_seq_len()).
Plan candidate_plan(const ResolvedSpace& s, const Candidate& c);
// The training section a candidate runs with: `t` with seq_len set to the candidate's.
Training candidate_training(const Training& t, const Candidate& c);
// One line: "tp 8 sequence_parallel float8=tensorwise async_tp=true ... local_batch=2"; HSDP candidates say
// "tp 8 dp_replicate 2 sequence_parallel ..." (the key only when dp_replicate > 1), expert-parallel ones "tp 2 ep 4
// ..." (only when ep > 1), and candidates that accumulate
// end in "... local_batch=2 grad_accum=4" (only when > 1); when the space has more than one sequence length,
// "... local_batch=2 seq=4096".
std::string describe(const ResolvedSpace& s, const Candidate& c);
// The AC policy for tables: "none", "selective", "full", or with ac_layers k "sel 40" / "full 40" (on the first k
// blocks).
std::string ac_label(const Candidate& c);

}  // namespace tptune
