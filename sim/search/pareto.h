#pragma once
// The Pareto front of a search: the feasible candidates that no other feasible candidate beats on both throughput
// (tokens/s per GPU, higher is better) and peak memory (lower is better). Whatever the objective, these are the only
// plans worth choosing between: the fastest one, the smallest one, and each trade between them.
//
// A candidate is on the front when no feasible candidate has tokens/s >= its own and peak <= its own with at least
// one of the two strictly better. Of candidates equal on both, the first in enumeration order stands for them.
// The front is listed by peak memory ascending (so tokens/s ascends too). O(n log n): one sort by memory, one sweep.

#include <vector>

#include "sim/search/candidate_results.h"
#include "sim/search/eval.h"

namespace tptune {

// `feasible`: indices into `results` of feasible candidates (SearchResult::ranking, in any order).
std::vector<int> pareto_front(const std::vector<CandidateResult>& results, const std::vector<int>& feasible);
// The same of a search's results (positions; feasible results are always stored).
std::vector<int> pareto_front(const CandidateResults& results, const std::vector<int>& feasible);

}  // namespace tptune
