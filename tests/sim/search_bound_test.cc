// Branch-and-bound (sim/search/bound.h): the step-time bound is below every simulated step time, the incumbents'
// dominance rule on hand-made values, and with SearchOptions::bound_top = k the first k of the ranking and the Pareto
// front equal the full search's (itself equal to brute force, tests/sim/search_test.cc) on the example spaces, with
// 1 and 2 threads, while some candidates are pruned as "bound".
#include <algorithm>
#include <catch2/catch.hpp>
#include <string>

#include "plans/lower/lower.h"
#include "sim/search/bound.h"
#include "sim/search/constraints.h"
#include "sim/search/search.h"
#include "sim/simulate.h"
#include "tests/fixtures.h"
#include "tests/sanitizer_stride.h"

using namespace tptune;

namespace {

size_t count(const SearchResult& r, PruneReason reason) {
  auto it = r.pruned.find(reason);
  return it == r.pruned.end() ? 0 : it->second;
}

}  // namespace

TEST_CASE("bound: the op-cost step-time bound is at most the simulated step time, for every feasible candidate",
          "[search][bound]") {
  for (const char* name :
       {"llama3-8b-h100.yaml", "gpt-a100.yaml", "llama3-405b-h100.yaml", "tiny-llama.yaml", "llama3-405b-hsdp.yaml"}) {
    const Config cfg = test::example_config(name);
    const SearchResult r = search(cfg, {});
    REQUIRE(!r.ranking.empty());
    const CostParams cost = default_cost_params();
    for (size_t k = 0; k < r.ranking.size(); k += test::kSanitizerStride) {
      const CandidateResult& c = r.results[static_cast<size_t>(r.ranking[k])];
      INFO(name << ": " << describe(r.space, c.candidate));
      const Program p = lower(cfg.model, cfg.training, candidate_plan(r.space, c.candidate));
      const OpCosts costs = cost_ops(p, r.cluster, cost);
      const double lb = step_time_lower_bound_us(p, costs);
      const double step_us = schedule(p, costs, cost).step_time_us;
      CHECK(lb > 0);
      CHECK(lb <= step_us);
      CHECK(c.report.step_time_ms * 1e3 == Approx(step_us).epsilon(1e-12));
      CHECK(tokens_per_second_upper_bound(p, lb) >= c.report.tokens_per_second_per_gpu);
      // Not a vacuous bound: the busiest stream is at least a third of the step (compute dominates these plans;
      // exposed communication is the rest).
      CHECK(lb >= step_us / 3);
    }
  }
}

TEST_CASE("bound: incumbents prune only below the k-th best and behind a point that needs no more memory",
          "[search][bound]") {
  Incumbents in(2);
  CHECK_FALSE(in.dominates(1, 100));  // nothing recorded yet
  in.add(1000, 50);                   // (tokens/s, peak memory)
  CHECK_FALSE(in.dominates(1, 100));  // only one of the k = 2 recorded
  in.add(800, 80);
  // The 2nd best is 800: a bound of 799 is below both; both need <= 80 <= 100.
  CHECK(in.dominates(799, 100));
  CHECK_FALSE(in.dominates(800, 100));  // ties are not pruned (800 is not > 800)
  // Needs 40: nothing recorded needs <= 40, so it could be on the Pareto front.
  CHECK_FALSE(in.dominates(799, 40));
  // Needs 60: the 1000 tokens/s point needs 50 <= 60.
  CHECK(in.dominates(799, 60));
  in.add(900, 30);                     // now top 2 = {1000, 900}; front = (30, 900), (50, 1000); (80, 800) is dominated
  CHECK(in.dominates(899, 40));        // behind (30, 900)
  CHECK_FALSE(in.dominates(950, 40));  // 950 < 1000 but nothing at <= 40 memory is faster than 950
  CHECK_FALSE(in.dominates(900, 100));  // 900 is not below the 2nd best (900)
  in.add(700, 30);                      // slower at the same memory: changes nothing
  CHECK(in.dominates(899, 40));
  in.add(950, 30);  // faster at the same memory: replaces (30, 900); top 2 = {1000, 950}
  CHECK(in.dominates(949, 30));
  CHECK_FALSE(in.dominates(951, 40));
}

TEST_CASE("bound: top k and the Pareto front equal the full search's on the example spaces, over threads",
          "[search][bound]") {
  for (const char* name : {"llama3-8b-h100.yaml", "llama3-70b-h100.yaml", "llama3-405b-h100.yaml", "gpt-a100.yaml",
                           "tiny-gpt.yaml", "tiny-llama.yaml", "llama3-405b-hsdp.yaml"}) {
    if (test::kSanitized && std::string(name) == "llama3-405b-hsdp.yaml") continue;  // 7 searches of 4320 candidates
    const Config cfg = test::example_config(name);
    SearchOptions full;
    full.threads = 1;
    const SearchResult ref = search(cfg, full);
    CHECK(count(ref, PruneReason::bound) == 0);  // off by default
    size_t pruned_any = 0;
    for (size_t k : {size_t{1}, size_t{5}, size_t{10}}) {
      for (int threads : {1, 2}) {
        INFO(name << " top " << k << " threads " << threads);
        SearchOptions o;
        o.threads = threads;
        o.bound_top = k;
        const SearchResult r = search(cfg, o);
        REQUIRE(r.ranking.size() >= std::min(k, ref.ranking.size()));
        for (size_t i = 0; i < std::min(k, ref.ranking.size()); ++i) {
          CHECK(r.ranking[i] == ref.ranking[i]);
          const size_t c = static_cast<size_t>(r.ranking[i]);
          CHECK(r.results[c].report.step_time_ms == ref.results[c].report.step_time_ms);
          CHECK(r.results[c].report.memory.peak == ref.results[c].report.memory.peak);
        }
        CHECK(r.pareto == ref.pareto);
        // Every candidate pruned by the bound is feasible-or-below-min-throughput in the full search, outside its top
        // k and off its front; every other candidate has the same verdict.
        const std::vector<int> top(ref.ranking.begin(),
                                   ref.ranking.begin() + static_cast<long>(std::min(k, ref.ranking.size())));
        for (size_t i = 0; i < r.results.size(); ++i) {
          if (r.results[i].pruned == PruneReason::bound) {
            CHECK((ref.results[i].feasible() || ref.results[i].pruned == PruneReason::min_throughput));
            CHECK(std::find(top.begin(), top.end(), static_cast<int>(i)) == top.end());
            CHECK(std::find(ref.pareto.begin(), ref.pareto.end(), static_cast<int>(i)) == ref.pareto.end());
          } else {
            CHECK(r.results[i].pruned == ref.results[i].pruned);
          }
        }
        CHECK(r.feasible + count(r, PruneReason::bound) ==
              ref.feasible + count(ref, PruneReason::min_throughput) - count(r, PruneReason::min_throughput));
        pruned_any += count(r, PruneReason::bound);
      }
    }
    // The 8B space (385 feasible) has plenty to prune at k = 1: the test would notice a bound that never fires.
    if (std::string(name) == "llama3-8b-h100.yaml") CHECK(pruned_any > 0);
  }
}

TEST_CASE("bound: off for the step_time and memory objectives", "[search][bound]") {
  for (Objective objective : {Objective::step_time, Objective::memory}) {
    Config cfg = test::example_config("llama3-8b-h100.yaml");
    cfg.search.objective = objective;
    SearchOptions o;
    o.bound_top = 1;
    const SearchResult r = search(cfg, o);
    CHECK(count(r, PruneReason::bound) == 0);
  }
}
