// The search over a mixture of experts with dense first blocks (model.moe.dense_layers, DeepSeek-V3's
// first_k_dense_replace; plans/program/program.h "Structure"): equal to brute force over tp x ep x AC x batch, the
// ac_layers sweep pruned by a reason of its own, and the layout a schedule structure of its own.
#include <catch2/catch.hpp>

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
