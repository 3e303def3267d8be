// The search's Pareto front (sim/search/pareto.h): a hand-made example, and the definition checked over a real
// search (every front member undominated, every other feasible candidate dominated by a member), and the report.
#include "sim/search/pareto.h"

#include <catch2/catch.hpp>

#include "sim/report/search_report.h"
#include "sim/search/search.h"

using namespace tptune;
using Catch::Matchers::Contains;

namespace {

CandidateResult point(int index, double tps, double mem) {
  CandidateResult c;
  c.candidate.index = index;
  c.report.tokens_per_second_per_gpu = tps;
  c.report.memory.peak = mem;
  return c;
}

// a dominates b: at least as good on both, strictly better on one.
bool dominates(const CandidateResult& a, const CandidateResult& b) {
  const double ta = a.report.tokens_per_second_per_gpu, tb = b.report.tokens_per_second_per_gpu;
  const double ma = a.report.memory.peak, mb = b.report.memory.peak;
  return ta >= tb && ma <= mb && (ta > tb || ma < mb);
}

}  // namespace

TEST_CASE("pareto front: by hand", "[search][pareto]") {
  // (tokens/s, GiB):  0 (100, 10)  1 (150, 20)  2 (120, 25): beaten by 1  3 (150, 20): same as 1, later
  //                   4 (90, 10): beaten by 0 (same memory)  5 (200, 40)  6 (80, 5)
  // Front by memory: 6 (80, 5), 0 (100, 10), 1 (150, 20), 5 (200, 40).
  std::vector<CandidateResult> rs = {point(0, 100, 10), point(1, 150, 20), point(2, 120, 25), point(3, 150, 20),
                                     point(4, 90, 10),  point(5, 200, 40), point(6, 80, 5)};
  CHECK(pareto_front(rs, {0, 1, 2, 3, 4, 5, 6}) == std::vector<int>{6, 0, 1, 5});
  // Only feasible candidates count: without 1 and 3, candidate 2 is on the front.
  CHECK(pareto_front(rs, {0, 2, 4, 5, 6}) == std::vector<int>{6, 0, 2, 5});
  CHECK(pareto_front(rs, {}).empty());
}

TEST_CASE("pareto front of a search: the definition, and the text and JSON report", "[search][pareto]") {
  Config cfg = load_config(std::string(TPTUNE_SOURCE_DIR) + "/examples/llama3-8b-h100.yaml");
  const SearchResult r = search(cfg, {});
  REQUIRE(r.pareto.size() >= 2);
  std::vector<bool> on(r.results.size(), false);
  for (int i : r.pareto) {
    on[static_cast<size_t>(i)] = true;
    CHECK(r.results[static_cast<size_t>(i)].feasible());
  }
  for (int i : r.ranking) {
    const CandidateResult& c = r.results[static_cast<size_t>(i)];
    bool dominated = false, by_member = false;
    for (int j : r.ranking) dominated |= dominates(r.results[static_cast<size_t>(j)], c);
    for (int j : r.pareto) by_member |= dominates(r.results[static_cast<size_t>(j)], c);
    if (on[static_cast<size_t>(i)]) CHECK_FALSE(dominated);
    if (!on[static_cast<size_t>(i)]) {
      // Off the front: dominated by a member, or equal on both to one.
      bool equal = false;
      for (int j : r.pareto)
        equal |=
            r.results[static_cast<size_t>(j)].report.tokens_per_second_per_gpu == c.report.tokens_per_second_per_gpu &&
            r.results[static_cast<size_t>(j)].report.memory.peak == c.report.memory.peak;
      CHECK((by_member || equal));
    }
  }
  // The objective's winner (tokens/s) is the front's last (largest memory, fastest).
  CHECK(r.results[static_cast<size_t>(r.pareto.back())].report.tokens_per_second_per_gpu ==
        r.winner()->report.tokens_per_second_per_gpu);
  const std::string text = pareto_text(r);
  CHECK_THAT(text, Contains("Pareto front"));
  CHECK(static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) == r.pareto.size() + 3);
  const nlohmann::json j = search_json(r, {}, 5);
  CHECK(j["pareto"].size() == r.pareto.size());
  CHECK(j["lowering"]["lowered"].get<size_t>() == r.lowered);
  CHECK(j["phases_ms"]["lower"].get<double>() > 0);
}
