// The search's constraints and the cost objective (search.global_batch_size, min_tokens_per_second_per_gpu,
// gpu_hour_price, objective: cost_per_token): one-line config errors, and each constraint equal to filtering the
// unconstrained search's feasible candidates by its definition, with the same numbers.
#include <fmt/format.h>

#include <catch2/catch.hpp>

#include "plans/util/error.h"
#include "sim/report/search_report.h"
#include "sim/search/constraints.h"
#include "sim/search/search.h"
#include "tests/fixtures.h"

using namespace tptune;
using Catch::Matchers::Contains;

namespace {

// The 8B example with extra search keys (its space: 864 candidates on 8 H100s).
Config with_search(const std::string& search) {
  return test::make_config(
      {.model = "{preset: llama3-8b}", .seq_len = 8192, .search = "\n" + search, .file = "goals.yaml"});
}

std::string error_of(const std::string& search) {
  try {
    with_search(search);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The feasible candidates of `r`, by index.
std::vector<int> feasible_sorted(const SearchResult& r) {
  std::vector<int> f = r.ranking;
  std::sort(f.begin(), f.end());
  return f;
}

}  // namespace

TEST_CASE("search constraints: config errors name the line and the range", "[search][constraints]") {
  CHECK_THAT(error_of("  global_batch_size: 0\n"),
             Contains("goals.yaml:5: search.global_batch_size: expected an integer in 1..68719476736"));
  CHECK_THAT(error_of("  min_tokens_per_second_per_gpu: -1\n"),
             Contains("goals.yaml:5: search.min_tokens_per_second_per_gpu"));
  CHECK_THAT(error_of("  gpu_hour_price: 0\n"), Contains("goals.yaml:5: search.gpu_hour_price"));
  CHECK_THAT(error_of("  objective: cost_per_token\n"),
             Contains("goals.yaml:5: search.objective: cost_per_token needs search.gpu_hour_price"));
  const Config ok = with_search("  objective: cost_per_token\n  gpu_hour_price: 2.5\n  global_batch_size: 16\n");
  CHECK(ok.search.objective == Objective::cost_per_token);
  CHECK(ok.search.gpu_hour_price == 2.5);
  CHECK(ok.search.global_batch_size == 16);
}

TEST_CASE("search.global_batch_size keeps exactly the candidates with local batch x dp = global batch",
          "[search][constraints]") {
  const SearchResult all = search(with_search("  tp_degrees: [1, 2, 4, 8]\n"), {});
  const SearchResult r = search(with_search("  tp_degrees: [1, 2, 4, 8]\n  global_batch_size: 8\n"), {});
  // 8 GPUs: tp 1 (dp 8) needs local batch 1, tp 2 (dp 4) batch 2, tp 4 (dp 2) batch 4; tp 8 (dp 1) batch 8 is not in
  // [1, 2, 4]. 216 candidates per tp degree (864 / 4): two thirds of tp 1, 2 and 4 and all of tp 8 are pruned,
  // 3 x 144 + 216 = 648, counted before the redundant-at-tp-1 rule.
  CHECK(r.pruned.at(PruneReason::global_batch) == 648);
  std::vector<int> expect;
  for (int i : feasible_sorted(all)) {
    const Candidate& c = all.results[static_cast<size_t>(i)].candidate;
    if (c.local_batch_size * c.dp_shard == 8) expect.push_back(i);
  }
  REQUIRE(!expect.empty());
  CHECK(feasible_sorted(r) == expect);
  for (int i : expect)
    CHECK(r.results[static_cast<size_t>(i)].report.step_time_ms ==
          all.results[static_cast<size_t>(i)].report.step_time_ms);
}

TEST_CASE("search.min_tokens_per_second_per_gpu prunes exactly the slower feasible plans", "[search][constraints]") {
  const SearchResult all = search(with_search("  local_batch_sizes: [1, 2]\n"), {});
  REQUIRE(all.ranking.size() > 10);
  // The threshold: the 10th best throughput, so exactly the top 10 (and ties with the 10th) remain.
  const double min_tps = all.results[static_cast<size_t>(all.ranking[9])].report.tokens_per_second_per_gpu;
  const SearchResult r = search(
      with_search(fmt::format("  local_batch_sizes: [1, 2]\n  min_tokens_per_second_per_gpu: {}\n", min_tps)), {});
  CHECK(r.space.min_tokens_per_second_per_gpu == Approx(min_tps).epsilon(1e-12));
  std::vector<int> expect;
  for (int i : feasible_sorted(all))
    if (all.results[static_cast<size_t>(i)].report.tokens_per_second_per_gpu >= r.space.min_tokens_per_second_per_gpu)
      expect.push_back(i);
  CHECK(feasible_sorted(r) == expect);
  CHECK(expect.size() >= 9);  // the 10th too unless the threshold read back a hair above it
  CHECK(r.pruned.at(PruneReason::min_throughput) == all.feasible - expect.size());
  CHECK(r.ranking == std::vector<int>(all.ranking.begin(), all.ranking.begin() + static_cast<long>(expect.size())));
}

TEST_CASE("objective cost_per_token ranks as tokens/s and reports USD per million tokens", "[search][constraints]") {
  const SearchResult tps = search(with_search("  local_batch_sizes: [1]\n"), {});
  const SearchResult cost =
      search(with_search("  local_batch_sizes: [1]\n  objective: cost_per_token\n  gpu_hour_price: 3.6\n"), {});
  CHECK(cost.ranking == tps.ranking);
  const StepReport& w = cost.winner()->report;
  // 3.6 USD per GPU-hour = 0.001 USD per GPU-second; at T tokens/s per GPU a million tokens cost 1000 / T USD.
  CHECK(cost_per_million_tokens(w, 3.6) == Approx(1000.0 / w.tokens_per_second_per_gpu).epsilon(1e-12));
  const nlohmann::json j = search_json(cost, {}, 3);
  CHECK(j["top"][0]["cost_per_million_tokens_usd"].get<double>() == cost_per_million_tokens(w, 3.6));
  CHECK_THAT(search_table(with_search("  gpu_hour_price: 3.6\n"), cost, 3), Contains("USD/1M tok"));
  CHECK_THAT(search_table(with_search("  gpu_hour_price: 3.6\n"), cost, 3), Contains("USD 3.6 per GPU-hour"));
}
