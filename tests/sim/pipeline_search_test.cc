// The search's pipeline axes (search.pp_degrees, pp_schedules, pp_stages_per_rank, pp_microbatch_sizes): every
// pipeline candidate is evaluated as `tp-plan simulate` predicts it (simulate_pipeline() of its plan) unless a static
// rule prunes it, so the search equals a brute-force loop over the candidates, although the candidates that differ
// only in schedule, stages per rank and local batch share one microbatch Program; the pp 1 space is enumerated and
// ranked as before.
#include <catch2/catch.hpp>

#include "plans/util/error.h"
#include "sim/pipeline/step.h"
#include "sim/search/constraints.h"
#include "sim/search/search.h"
#include "tests/fixtures.h"
#include "tests/sim/moe_pp_space.h"
#include "tests/sim/search_brute_force.h"

using namespace tptune;
using Catch::Matchers::Contains;

namespace {

const char* kSpace =
    "\n  tp_degrees: [1, 2, 4]\n  pp_degrees: [1, 2, 4]\n  pp_schedules: [GPipe, 1F1B, Interleaved1F1B]\n"
    "  pp_microbatch_sizes: [1, 2]\n  presets: [sequence_parallel]\n  float8: [none]\n  async_tp: [false]\n"
    "  loss_parallel: [true]\n"
    "  activation_checkpointing: [none, full]\n  local_batch_sizes: [1, 2, 4]\n";

// The figures of a pipeline step the search ranks and reports, equal number for number.
void check_same_step(const StepReport& got, const StepReport& want) {
  CHECK(got.step_time_ms == want.step_time_ms);
  CHECK(got.tokens_per_second_per_gpu == want.tokens_per_second_per_gpu);
  CHECK(got.mfu == want.mfu);
  CHECK(got.compute_ms == want.compute_ms);
  CHECK(got.exposed_tp_comm_ms == want.exposed_tp_comm_ms);
  CHECK(got.exposed_dp_comm_ms == want.exposed_dp_comm_ms);
  CHECK(got.memory.peak == want.memory.peak);
  CHECK(got.parameters.per_rank == want.parameters.per_rank);
  CHECK(got.local_batch_size == want.local_batch_size);
  CHECK(got.gradient_accumulation_steps == want.gradient_accumulation_steps);
  const PipelineReport &g = got.pipeline, &w = want.pipeline;
  CHECK(g.schedule == w.schedule);
  CHECK(g.stages_per_rank == w.stages_per_rank);
  CHECK(g.microbatches == w.microbatches);
  CHECK(g.stage_layers == w.stage_layers);
  CHECK(g.schedule_ms == w.schedule_ms);
  CHECK(g.bubble_fraction == w.bubble_fraction);
  CHECK(g.fsdp_exposed_ms == w.fsdp_exposed_ms);
  CHECK(g.critical_rank == w.critical_rank);
  REQUIRE(g.ranks.size() == w.ranks.size());
  for (size_t k = 0; k < g.ranks.size(); ++k) {
    CHECK(g.ranks[k].end_ms == w.ranks[k].end_ms);
    CHECK(g.ranks[k].peak_memory == w.ranks[k].peak_memory);
  }
}

struct BruteForce {
  int feasible = 0;
  size_t simulated = 0;  // candidates that simulate_pipeline() accepted
};

// Brute force: each pipeline candidate of `r` (from `first`) pruned by its static verdict, else as simulate_pipeline()
// of its plan says, number for number. A candidate that the pipeline's static rules prune (stages per rank) is one
// that simulate_pipeline() refuses too.
BruteForce check_brute_force(const Config& cfg, const SearchResult& r, size_t first) {
  BruteForce b;
  for (size_t i = first; i < r.results.size(); ++i) {
    const CandidateResult& got = r.results[i];
    const Candidate& c = got.candidate;
    REQUIRE(c.pp_degree > 1);
    CHECK(c.index == static_cast<int>(i));
    const Plan plan = candidate_plan(r.space, c);
    auto simulate = [&] {
      return simulate_pipeline(cfg.model, candidate_training(cfg.training, c), plan, r.cluster, default_cost_params());
    };
    if (Verdict v = check_static(cfg, r.cluster, r.space, c); !v.ok()) {
      CHECK(got.pruned == v.reason);
      if (v.reason == PruneReason::pp_stages_schedule || v.reason == PruneReason::pp_stages_layers)
        CHECK_THROWS_AS(simulate(), Error);
      continue;
    }
    StepReport want;
    try {
      want = simulate();
    } catch (const Error& e) {
      CHECK(got.pruned == PruneReason::simulation);
      CHECK(got.detail == e.what());
      continue;
    }
    check_same_step(got.report, want);
    CHECK(got.feasible() == fits_with_headroom(want.memory, r.space.memory_headroom_gib));
    b.feasible += got.feasible();
    ++b.simulated;
  }
  return b;
}

}  // namespace

TEST_CASE("search: pipeline candidates equal simulate_pipeline, brute force", "[pp][search]") {
  Config cfg = test::small_config("pp.yaml", 1, 8, kSpace);
  cfg.model.n_layers = 4;
  const SearchResult r = search(cfg, {.threads = 2});
  const SearchResult plain = [&] {
    Config c = cfg;
    c.search.pp_degrees = {1};
    return search(c, {.threads = 1});
  }();
  // The pp 1 space: 3 tp x 2 AC x 3 batches = 18; each has 2 pp degrees > 1 x 3 schedules x 2 microbatch sizes.
  REQUIRE(plain.results.size() == 18);
  REQUIRE(r.results.size() == 18 + 18 * 12);
  CHECK(r.evaluated == r.results.size());
  // The pp 1 candidates are the plain search's, result for result.
  for (size_t i = 0; i < plain.results.size(); ++i) {
    CHECK(r.results[i].pruned == plain.results[i].pruned);
    CHECK(r.results[i].report.tokens_per_second_per_gpu == plain.results[i].report.tokens_per_second_per_gpu);
  }
  const BruteForce b = check_brute_force(cfg, r, plain.results.size());
  const int feasible_pp = b.feasible;
  const size_t simulated = b.simulated;
  CHECK(feasible_pp > 0);
  // The candidates share their microbatch Programs: per pp degree, tp, AC and microbatch size one Program serves the
  // 3 schedules x 3 local batches (those that pass the static rules and resolve; tp 1 with pp 4 leaves dp 2).
  CHECK(r.pipeline_programs > 0);
  CHECK(r.pipeline_programs * 3 <= simulated);
  // The ranking holds every feasible candidate, pp or not, in the objective's order.
  size_t feasible = 0;
  for (const CandidateResult& c : r.results) feasible += c.feasible();
  CHECK(r.ranking.size() == feasible);
  for (size_t k = 1; k < r.ranking.size(); ++k)
    CHECK_FALSE(ranks_before(r.results[static_cast<size_t>(r.ranking[k])],
                             r.results[static_cast<size_t>(r.ranking[k - 1])], r.space.objective));
  // 1F1B needs microbatches >= pp: local batch 2 in microbatches of 2 is one microbatch, refused on pp 2.
  bool refused = false;
  for (const CandidateResult& c : r.results)
    if (c.candidate.pp_degree == 2 && c.candidate.pp_schedule == PipelineScheduleKind::one_f_one_b &&
        c.candidate.local_batch_size == 2 && c.candidate.pp_microbatch_size == 2 && c.candidate.tp_degree == 2) {
      CHECK_THAT(c.detail, Contains("needs microbatches >= pp"));
      refused = true;
    }
  CHECK(refused);
}

TEST_CASE("search: stages per rank as an axis, brute force", "[pp][search]") {
  Config cfg = test::small_config("pp.yaml", 1, 8,
                                  "\n  tp_degrees: [2]\n  pp_degrees: [2, 4]\n"
                                  "  pp_schedules: [1F1B, Interleaved1F1B, LoopedBFS, ZBVZeroBubble]\n"
                                  "  pp_stages_per_rank: [0, 1, 2, 3]\n  presets: [sequence_parallel]\n"
                                  "  float8: [none]\n  async_tp: [false]\n  loss_parallel: [true]\n"
                                  "  activation_checkpointing: [full]\n  local_batch_sizes: [4, 8]\n");
  cfg.model.n_layers = 8;  // effective layers 8 + 1 + 1 = 10: pp 4 x 3 stages per rank = 12 stages is too many
  const SearchResult r = search(cfg, {.threads = 1});
  // No pp 1: the pp 1 space (tp 2 x 2 batches) each with 2 pp degrees x 4 schedules x 4 stages per rank (x 1
  // microbatch size), the stages per rank inside the schedule: index (batch, pp, schedule, stages).
  REQUIRE(r.results.size() == 2 * 2 * 4 * 4);
  const auto at = [&](int batch, int pp, int schedule, int stages) -> CandidateResult {  // a copy (results[i])
    return r.results[static_cast<size_t>(((batch * 2 + pp) * 4 + schedule) * 4 + stages)];
  };
  // 1F1B: 0 (its default, 1) and 1 run; 2 and 3 are pruned.
  CHECK(at(0, 0, 0, 0).candidate.pp_stages_per_rank == 0);
  CHECK(at(0, 0, 0, 0).pruned.reason != PruneReason::pp_stages_schedule);
  CHECK(at(0, 0, 0, 1).pruned.reason != PruneReason::pp_stages_schedule);
  CHECK(at(0, 0, 0, 2).pruned == PruneReason::pp_stages_schedule);
  CHECK(at(0, 0, 0, 2).detail == "1F1B with 2 stages per rank");
  // Interleaved1F1B and LoopedBFS take 2 or more: 1 is pruned; on pp 4, 3 stages per rank are 12 > 10 layers.
  CHECK(at(0, 0, 1, 1).pruned == PruneReason::pp_stages_schedule);
  CHECK(at(0, 0, 1, 3).feasible());
  CHECK(at(0, 0, 1, 3).report.pipeline.stages_per_rank == 3);
  CHECK(at(0, 1, 2, 3).pruned == PruneReason::pp_stages_layers);
  CHECK(at(0, 1, 2, 3).detail == "pp 4 x 3 stages per rank = 12 stages vs 10 effective layers");
  CHECK(at(1, 1, 2, 2).feasible());
  CHECK(at(1, 1, 2, 2).report.pipeline.stage_layers.size() == 8);
  // ZBVZeroBubble takes exactly 2 (its default).
  CHECK(at(0, 0, 3, 0).report.pipeline.stages_per_rank == 2);
  CHECK(at(0, 0, 3, 3).pruned == PruneReason::pp_stages_schedule);
  // Counted apart in the reasons.
  CHECK(r.pruned.at(PruneReason::pp_stages_schedule) > 0);
  CHECK(r.pruned.at(PruneReason::pp_stages_layers) > 0);
  const BruteForce b = check_brute_force(cfg, r, 0);
  CHECK(b.feasible > 0);
  // One microbatch Program per pp degree and microbatch size serves every schedule, stages per rank and batch.
  CHECK(r.pipeline_programs == 2);
}

TEST_CASE("search: the pipeline axis's errors", "[pp][search][errors]") {
  CHECK_THROWS_WITH(test::small_config("pp.yaml", 1, 8, "\n  pp_schedules: [1F1B, 2F2B]\n"),
                    Contains("pp.yaml:5: search.pp_schedules[1]: expected one of GPipe"));
  CHECK_THROWS_WITH(test::small_config("pp.yaml", 1, 8, "\n  pp_stages_per_rank: [0, -1]\n"),
                    Contains("pp.yaml:5: search.pp_stages_per_rank[1]: expected an integer in 0..10000"));
  CHECK_THROWS_WITH(test::small_config("pp.yaml", 1, 8, "\n  pp_stages_per_rank: [2, 2]\n"),
                    Contains("search.pp_stages_per_rank"));
  Config cfg = test::small_config("pp.yaml", 1, 8, "\n  pp_degrees: [1, 2]\n  ac_layers: [1]\n");
  CHECK_THROWS_WITH(search(cfg), Contains("search.pp_degrees with search.ac_layers: not searched together yet"));
}

TEST_CASE("search: pp_degrees without 1 searches pipelines only", "[pp][search]") {
  Config cfg = test::small_config("pp.yaml", 1, 8, kSpace);
  cfg.model.n_layers = 4;
  cfg.search.pp_degrees = {2};
  const SearchResult r = search(cfg, {.threads = 1});
  // 18 enumerated candidates x 3 schedules x 2 microbatch sizes, indexed from 0.
  REQUIRE(r.results.size() == 18 * 6);
  CHECK(r.evaluated == r.results.size());
  for (size_t i = 0; i < r.results.size(); ++i) {
    CHECK(r.results[i].candidate.pp_degree == 2);
    CHECK(r.results[i].candidate.index == static_cast<int>(i));
  }
  REQUIRE(r.winner() != nullptr);
  CHECK(r.winner()->candidate.pp_degree == 2);
}

TEST_CASE("search: a dense-first mixture of experts' pipeline candidates equal simulate_pipeline, brute force",
          "[pp][search][moe]") {
  // The tiny MoE with 4 blocks, the first dense (model.moe.dense_layers 1), tp 1, 2 x ep 1, 2, 4 x pp 1, 2 x 1F1B and
  // Interleaved1F1B x AC none and full x local batch 2, 4 (tests/sim/moe_pp_space.h). Interleaved1F1B on pp 2 splits
  // 4 + 2 effective layers into 4 stages: block 0 (dense), blocks 1..2 (MoE), block 3, the head alone. The pp 1
  // candidates are the plain search's and brute force's; every pipeline candidate's report is simulate_pipeline()'s
  // (check_brute_force()), and some are feasible: the refusal of MoE pipelines is lifted.
  const Config cfg = test::tiny_moe_pp_search_config(
      4, 1, {1, 2}, {PipelineScheduleKind::one_f_one_b, PipelineScheduleKind::interleaved_1f1b}, {2, 4});
  const SearchResult r = search(cfg, {.threads = 2});
  Config one = cfg;
  one.search.pp_degrees = {1};
  const SearchResult plain = search(one, {.threads = 1});
  test::check_against_brute_force(one, plain);
  REQUIRE(r.results.size() > plain.results.size());
  for (size_t i = 0; i < plain.results.size(); ++i) {
    CHECK(r.results[i].pruned == plain.results[i].pruned);
    CHECK(r.results[i].report.tokens_per_second_per_gpu == plain.results[i].report.tokens_per_second_per_gpu);
  }
  const BruteForce b = check_brute_force(cfg, r, plain.results.size());
  CHECK(b.feasible > 0);
  size_t expert_parallel = 0;
  for (size_t i = plain.results.size(); i < r.results.size(); ++i)
    expert_parallel += r.results[i].feasible() && r.results[i].candidate.ep_degree > 1;
  CHECK(expert_parallel > 0);
}
