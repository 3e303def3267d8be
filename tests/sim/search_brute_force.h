#pragma once
// The search tests' brute force: a candidate's plan through lower() and simulate() on its own, and the check that a
// search result equals it over every candidate (search_test.cc, search_moe_test.cc).

#include <string>

#include "plans/language/config.h"
#include "plans/language/plan.h"
#include "sim/cluster_spec.h"
#include "sim/cost/cost_params.h"
#include "sim/search/search.h"
#include "sim/simulate.h"

namespace tptune::test {

// The brute-force path: the candidate's plan, lower(), simulate(), and the search's memory rule.
struct Brute {
  bool computed = false;  // this candidate was brute-forced (every one; under ASan every kSanitizerStride-th)
  bool ok = false;        // lowered and simulated
  std::string error;
  StepReport report;
  bool feasible() const { return ok && fits; }
  bool fits = false;
};
Brute brute(const Config& cfg, const ClusterSpec& cl, const Plan& plan, double headroom,
            const CostParams& cost = default_cost_params());

// Checks a search result against brute force over every candidate: same feasibility, same numbers, same ranking.
// Under ASan every kSanitizerStride-th candidate (tests/sanitizer_stride.h; the search itself still runs whole, and the
// ranking is compared on the candidates brute-forced): lowering and simulating whole example spaces again took 60 to
// 600 s per test there, on 2 cores.
void check_against_brute_force(const Config& cfg, const SearchResult& r,
                               const CostParams& cost = default_cost_params());

}  // namespace tptune::test
