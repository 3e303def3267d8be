// search.ac_layers: the sweep of activation checkpointing on the first k blocks equals brute force (lower() of the
// plan with ac_layers k + simulate()) for every candidate and every k, number for number; branch-and-bound keeps the
// top k and the Pareto front; the config's errors; the space's count.
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <map>
#include <tuple>

#include "plans/lower/incremental.h"
#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "sim/search/constraints.h"
#include "sim/search/search.h"
#include "sim/simulate.h"
#include "tests/fixtures.h"

using namespace tptune;
using Catch::Matchers::Contains;

namespace {

// Llama 3 8B (32 layers) on 8 H100s: memory binds at local batch 2-4, so every k has a say.
Config config(const std::string& search) {
  return test::make_config({.model = "{preset: llama3-8b}", .seq_len = 8192, .search = search, .file = "acl.yaml"});
}
const char* kSpace =
    "{tp_degrees: [2, 4], presets: [vanilla, sequence_parallel], float8: [none, tensorwise], async_tp: [false, true], "
    "loss_parallel: [true], activation_checkpointing: [none, selective, full], local_batch_sizes: [1, 2, 4], "
    "ac_layers: [1, 8, 16, 31]}";

using Key = std::tuple<int, int64_t>;  // (enumerated index, ac_layers)

}  // namespace

TEST_CASE("ac_layers sweep: every candidate and block count equals lower() + simulate()", "[search][ac_layers]") {
  const Config cfg = config(kSpace);
  for (int threads : {1, 2}) {
    INFO("threads " << threads);
    SearchOptions o;
    o.threads = threads;
    const SearchResult r = search(cfg, o);
    const std::vector<Candidate> cands = enumerate_candidates(r.space);
    // 2 tp x 2 presets x 2 float8 x 2 async x 1 loss x 3 AC x 3 batches = 144 enumerated; the 96 with a policy other
    // than none stand for 4 block counts each: 144 + 96 x 4 = 528.
    REQUIRE(cands.size() == 144);
    CHECK(r.evaluated == 528);
    size_t pruned = 0;
    for (const auto& [reason, n] : r.pruned) pruned += n;
    CHECK(r.feasible + pruned == r.evaluated);
    std::map<Key, const CandidateResult*> kept;
    for (const CandidateResult& c : r.results)
      if (c.candidate.ac_layers > 0) kept[{c.candidate.index, c.candidate.ac_layers}] = &c;
    size_t brute_feasible = 0;
    for (const Candidate& base : cands) {
      if (base.activation_checkpointing == ActivationCheckpointing::none) continue;
      const bool static_ok = check_static(cfg, r.cluster, r.space, base).ok();
      for (int64_t k : r.space.ac_layers) {
        Candidate c = base;
        c.ac_layers = k;
        INFO(describe(r.space, c));
        bool feasible = false;
        StepReport want;
        if (static_ok) {
          try {
            want =
                simulate(lower(cfg.model, cfg.training, candidate_plan(r.space, c)), r.cluster, default_cost_params());
            feasible = fits_with_headroom(want.memory, r.space.memory_headroom_gib);
          } catch (const Error&) {
          }
        }
        auto it = kept.find({base.index, k});
        CHECK((it != kept.end()) == feasible);
        if (it == kept.end() || !feasible) continue;
        ++brute_feasible;
        const StepReport& got = it->second->report;
        CHECK(got.step_time_ms == want.step_time_ms);
        CHECK(got.tokens_per_second_per_gpu == want.tokens_per_second_per_gpu);
        CHECK(got.mfu == want.mfu);
        CHECK(got.memory.peak == want.memory.peak);
        CHECK(got.memory.activations == want.memory.activations);
        CHECK(got.exposed_tp_comm_ms == want.exposed_tp_comm_ms);
        CHECK(got.exposed_dp_comm_ms == want.exposed_dp_comm_ms);
      }
    }
    CHECK(kept.size() == brute_feasible);
    CHECK(brute_feasible > 50);  // the sweep has work: most block counts fit at batch 1 and 2
    CHECK(r.pruned.at(PruneReason::memory) > 0);
  }
}

TEST_CASE("ac_layers sweep: branch-and-bound keeps the top k and the Pareto front, over threads",
          "[search][ac_layers][bound]") {
  const Config cfg = config(kSpace);
  SearchOptions full;
  full.threads = 1;
  const SearchResult ref = search(cfg, full);
  auto key = [](const SearchResult& r, int i) {
    const Candidate& c = r.results[static_cast<size_t>(i)].candidate;
    return Key{c.index, c.ac_layers};
  };
  size_t bound_pruned = 0;
  for (size_t k : {size_t{1}, size_t{5}}) {
    for (int threads : {1, 2}) {
      INFO("top " << k << " threads " << threads);
      SearchOptions o;
      o.threads = threads;
      o.bound_top = k;
      const SearchResult r = search(cfg, o);
      CHECK(r.evaluated == ref.evaluated);
      REQUIRE(r.ranking.size() >= k);
      for (size_t i = 0; i < k; ++i) {
        CHECK(key(r, r.ranking[i]) == key(ref, ref.ranking[i]));
        CHECK(r.results[static_cast<size_t>(r.ranking[i])].report.step_time_ms ==
              ref.results[static_cast<size_t>(ref.ranking[i])].report.step_time_ms);
      }
      REQUIRE(r.pareto.size() == ref.pareto.size());
      for (size_t i = 0; i < r.pareto.size(); ++i) CHECK(key(r, r.pareto[i]) == key(ref, ref.pareto[i]));
      size_t pruned = 0;
      for (const auto& [reason, n] : r.pruned) pruned += n;
      CHECK(r.feasible + pruned == r.evaluated);
      bound_pruned += r.pruned.count(PruneReason::bound) ? r.pruned.at(PruneReason::bound) : 0;
    }
  }
  CHECK(bound_pruned > 0);
}

TEST_CASE("ac_layers: the config's errors name the file, line and key", "[search][ac_layers][config]") {
  auto error_of = [](const std::string& search) {
    try {
      config(search);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error_of("{ac_layers: [0]}"),
             Contains("acl.yaml:4") && Contains("search.ac_layers[0]") && Contains("1..32"));
  CHECK_THAT(error_of("{ac_layers: [5, 33]}"), Contains("search.ac_layers[1]") && Contains("33"));
  CHECK_THAT(error_of("{ac_layers: [5, 5]}"), Contains("listed twice"));
  CHECK_THAT(error_of("{ac_layers: some}"), Contains("acl.yaml:4") && Contains("`all` or a list"));
  // n_layers itself is every block, always searched: dropped from the list.
  CHECK(config("{ac_layers: [32, 4]}").search.ac_layers == std::vector<int64_t>{4});
  CHECK(config("{ac_layers: all}").search.ac_layers.size() == 31);  // 1..31
  try {
    resolve_space(config("{ac_layers: [4], max_local_batch_size: 8}"));
    FAIL("no error");
  } catch (const Error& e) {
    CHECK_THAT(std::string(e.what()), Contains("search.ac_layers with search.max_local_batch_size"));
  }
}

TEST_CASE("set_ac_layers() gives the Program that finishing at that block count gives", "[search][ac_layers]") {
  const Config cfg = config("{}");
  Plan base;
  base.tp_degree = 2;
  base.dp_shard = 4;
  base.async_tp = true;
  base.loss_parallel = true;
  base.activation_checkpointing = ActivationCheckpointing::full;
  base.ac_layers = 3;
  Plan plan = preset_plan("sequence_parallel", base);
  Program p = lower(cfg.model, cfg.training, plan);
  REQUIRE(p.segments[3].kind == SegmentKind::block_bwd);
  REQUIRE(p.segments[4].kind == SegmentKind::block_bwd);
  set_ac_layers(p, 20);
  plan.ac_layers = 20;
  const Program want = lower(cfg.model, cfg.training, plan);
  CHECK(p.plan == want.plan);
  REQUIRE(p.segments.size() == want.segments.size());
  for (size_t s = 0; s < p.segments.size(); ++s) {
    CHECK(p.segments[s].repeat == want.segments[s].repeat);
    CHECK(p.segments[s].first_layer == want.segments[s].first_layer);
    CHECK(p.segments[s].layer_count == want.segments[s].layer_count);
  }
  const StepReport a = simulate(p, resolve_cluster(cfg), default_cost_params());
  const StepReport b = simulate(want, resolve_cluster(cfg), default_cost_params());
  CHECK(a.step_time_ms == b.step_time_ms);
  CHECK(a.memory.peak == b.memory.peak);
  CHECK_THROWS_WITH(set_ac_layers(p, 32), Contains("set_ac_layers(32)"));
}
