#pragma once
// The tests' reference search: search() (sim/search/search.h) without any of its ways of sharing work between
// candidates. Every candidate is lowered on its own with lower() (plans/lower/lower.h) and evaluated from that Program
// by CandidateEvaluator::evaluate_program() (sim/search/eval.h); no larger local batch is pruned because a smaller one
// missed memory (every candidate is lowered and has its own memory report and detail); with
// search.max_local_batch_size every bisection probe is lowered. The search shares lowerings between
// activation-checkpointing policies, between async TP off and on and between local batch sizes (plans/
// plans/lower/incremental.h, sim/search/batch_program.h) and skips the larger batches of a policy that missed memory:
// the exactness tests check that it gives this reference's results, number for number (batch_program_test.cc,
// search_seq_test.cc, search_bisect_test.cc, search_test.cc, search_moe_test.cc).
//
// The result is a SearchResult as search() fills it, except: `lowered` counts this search's lower() calls
// (`finished` and `patched` are 0), there is no branch-and-bound, and spaces with search.ac_layers are refused
// (tptune::Error; their sweep is checked against lower() + simulate() of every block count in
// search_ac_layers_test.cc).

#include "plans/language/config.h"
#include "sim/cost/cost_params.h"
#include "sim/search/search.h"

namespace tptune::test {

SearchResult reference_search(const Config& cfg, int threads = 2, const CostParams& cost = default_cost_params());

// Whether the search's larger-batch shortcut pruned `r`: out of memory without a memory report of its own (a smaller
// local batch of its policy missed the budget; sim/search/search.h). The reference evaluates such a candidate and
// finds it out of memory too, with its own report and detail.
bool pruned_by_larger_batch_shortcut(const CandidateResult& r);

}  // namespace tptune::test
