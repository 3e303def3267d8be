// The search over a mixture of experts with dense first blocks (model.moe.dense_layers, DeepSeek-V3's
// first_k_dense_replace; plans/program/program.h "Structure"): equal to brute force over tp x ep x AC x batch, the
// ac_layers sweep pruned by a reason of its own, and the search's shortcuts (batch-parametric Programs, the two-step
// and recycled lowering) giving lower()'s Program field for field.
#include <catch2/catch.hpp>
#include <set>

#include "plans/lower/incremental.h"
#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "sim/search/batch_program.h"
#include "sim/search/constraints.h"
#include "sim/search/prune_reason.h"
#include "sim/search/search.h"
#include "tests/fixtures.h"
#include "tests/sim/search_brute_force.h"

using namespace tptune;

namespace {

// tiny_moe_search_config()'s model with 3 blocks, the first dense, on one node of 8 H100s: tp 1, 2, 4 x ep (every
// degree the sparse mesh allows: 1, 2, 4, 8) x AC none, full x local batch 1, 2 at seq 32.
Config dense_first_config() {
  Config cfg = test::tiny_moe_search_config();
  cfg.model.name = "tiny-dense-first-moe";
  cfg.model.n_layers = 3;
  cfg.model.moe.dense_layers = 1;
  SearchSpace& s = cfg.search;
  s.dp_replicate = {1};
  s.cp_degrees = {1};
  s.float8 = {Float8Recipe::none};
  s.async_tp = {false};
  s.local_batch_sizes = {1, 2};
  return cfg;
}

}  // namespace

TEST_CASE("search equals brute force: a mixture of experts with a dense first block over tp x ep x AC x batch",
          "[search][brute][moe][dense_first]") {
  const Config cfg = dense_first_config();
  SearchOptions two;
  two.threads = 2;
  const SearchResult r = search(cfg, two);
  CHECK(r.space.ep_degrees == std::vector<int>{1, 2, 4, 8});
  CHECK(r.evaluated == 3 * 4 * 2 * 2);  // tp x ep x AC x batch
  CHECK(r.feasible > 0);
  for (int i : r.ranking) CHECK(r.results[static_cast<size_t>(i)].report.memory.dense_blocks == 1);
  test::check_against_brute_force(cfg, r);
}

TEST_CASE("search: ac_layers of a model with dense first blocks is a counted prune reason, not a lowering error",
          "[search][moe][dense_first]") {
  Config cfg = dense_first_config();
  cfg.search.tp_degrees = {2};
  cfg.search.ep_degrees = {2};
  cfg.search.activation_checkpointing = {ActivationCheckpointing::full};
  cfg.search.local_batch_sizes = {1};
  cfg.search.ac_layers = {1, 2};
  const SearchResult r = search(cfg, {});
  CHECK(r.pruned.count(PruneCause(PruneReason::moe_dense_ac_layers)) == 1);
  CHECK(r.pruned.at(PruneCause(PruneReason::moe_dense_ac_layers)) == 2);  // k = 1, 2 of the one candidate
  CHECK(r.pruned.count(PruneCause(PruneReason::lowering)) == 0);
  CHECK(r.feasible == 1);  // the candidate with AC on every block
  CHECK(is_static(PruneReason::moe_dense_ac_layers));
}

TEST_CASE("search shortcuts on dense first blocks: at(b), two-step and recycled lowering are lower() field for field",
          "[search][batch][moe][dense_first]") {
  const Config cfg = dense_first_config();
  const ResolvedSpace space = resolve_space(cfg);
  const ClusterSpec cluster = resolve_cluster(cfg);
  Config all_moe_cfg = cfg;  // another layout to recycle from: every block MoE
  all_moe_cfg.model.moe.dense_layers = 0;
  std::set<std::string> seen;
  size_t compared = 0;
  Program previous;  // the Program of the structure before (a recycled one)
  for (const Candidate& c : enumerate_candidates(space)) {
    if (!check_static(cfg, cluster, space, c).ok()) continue;
    Candidate key = c;
    key.local_batch_size = 0;
    if (!seen.insert(describe(space, key)).second) continue;  // one per structure
    INFO(describe(space, c));
    Plan plan = candidate_plan(space, c);
    auto at = [&](int64_t b) {
      Plan p = plan;
      p.local_batch_size = b;
      return p;
    };
    Program p1, p2;
    try {
      p1 = lower(cfg.model, cfg.training, at(1));
      p2 = lower(cfg.model, cfg.training, at(2));
    } catch (const Error&) {
      continue;
    }
    REQUIRE(p1.segments.size() > 2);
    CHECK(p1.segments[2].kind == SegmentKind::block_fwd);  // two templates
    std::string why;
    auto bp = BatchProgram::make(cfg.model, cfg.training, at(2), p1, p2, &why);
    REQUIRE(why.empty());
    REQUIRE(bp);
    for (int64_t b : {1, 3}) CHECK(program_difference(bp->at(b), lower(cfg.model, cfg.training, at(b))).empty());
    // Two steps, one unfinished Program finished under every policy (told where `chained` comes from), and lowered
    // into the previous structure's Program and into an all-MoE model's.
    UnfinishedProgram u = lower_unfinished(cfg.model, cfg.training, plan, std::move(previous));
    const UnfinishedProgram fresh = lower_unfinished(cfg.model, cfg.training, plan);
    CHECK(program_difference(u.prog, fresh.prog).empty());
    const UnfinishedProgram from_other =
        lower_unfinished(cfg.model, cfg.training, plan, lower(all_moe_cfg.model, all_moe_cfg.training, plan));
    CHECK(program_difference(from_other.prog, fresh.prog).empty());
    prepare_async_tp(u);
    Program chained;
    uint64_t from = 0;
    for (ActivationCheckpointing ac :
         {ActivationCheckpointing::selective, ActivationCheckpointing::none, ActivationCheckpointing::full}) {
      Plan with = plan;
      with.activation_checkpointing = ac;
      finish_lowering_into(u, ac, chained, -1, from);
      from = u.id;
      CHECK(program_difference(chained, lower(cfg.model, cfg.training, with)).empty());
    }
    // An ac_layers block count (the search's sweep passes it to finishing): refused in one line.
    CHECK_THROWS_WITH(finish_lowering_into(u, ActivationCheckpointing::full, chained, 1),
                      Catch::Contains("ac_layers 1: not lowered for a model with model.moe.dense_layers 1"));
    previous = std::move(u.prog);
    ++compared;
  }
  CHECK(compared == 3 * 4 * 2);  // every tp x ep x AC structure
}
