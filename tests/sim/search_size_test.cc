// Hostile search spaces (issue 37, classes 3 and 4). The cap on the space's size counts every list, the pipeline ones
// too, and its refusal gives the full count and the lists that make it (before, the pipeline lists were left out: a
// search over them ended in std::bad_alloc or was killed). The search keeps no result for a candidate a static rule
// prunes, so its memory does not grow with them (bench/bench_search.cc's SearchPruned measures the peak), while every
// position still reads as the search decided it: the candidates are decoded from their index, not listed.
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <string>

#include "plans/util/error.h"
#include "sim/search/search.h"
#include "tests/fixtures.h"
#include "tests/sim/search_reference.h"

using namespace tptune;

namespace {

// "[lo, lo + 1, ..., hi]"
std::string range_list(int lo, int hi) {
  std::string s = "[";
  for (int v = lo; v <= hi; ++v) s += fmt::format("{}{}", v > lo ? ", " : "", v);
  return s + "]";
}

// The error resolve_space() throws for a config with this search section ("big.yaml", whose block starts on line 5).
std::string refusal(const std::string& search) {
  try {
    resolve_space(test::small_config("big.yaml", 1, 8, search));
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// One value of every toggle: the lists the test names make the space.
const char* kOneOfEach =
    "  presets: [sequence_parallel]\n  float8: [none]\n  async_tp: [false]\n  loss_parallel: [true]\n"
    "  activation_checkpointing: [none]\n";

void check_same_candidate(const Candidate& got, const Candidate& want) {
  CHECK(got.index == want.index);
  CHECK(got.family == want.family);
  CHECK(static_cast<const PlanToggles&>(got) == static_cast<const PlanToggles&>(want));
}

}  // namespace

TEST_CASE("search space cap: the pipeline lists count, and the refusal names the lists", "[search][pp][limits]") {
  // Issue 37's space: tp, cp and pp 1..32, local batch 1..16, every other list at its default (two presets x
  // loss_parallel false/true = 4, float8 none/tensorwise/rowwise, async_tp off/on, AC none/selective/full):
  //   pp 1:       32 x 32 x 4 x 3 x 2 x 3 x 16 = 1,179,648
  //   pipelines:  that x 31 pp degrees above 1 (x 1 schedule x 1 stages per rank x 1 microbatch size) = 36,569,088
  //   together    37,748,736 > 2^24 = 16,777,216
  CHECK(refusal(fmt::format("\n  tp_degrees: {0}\n  cp_degrees: {0}\n  pp_degrees: {0}\n  local_batch_sizes: {1}\n",
                            range_list(1, 32), range_list(1, 16))) ==
        "big.yaml:5: search space size (the product of the search lists' lengths): 37748736 candidates (tp_degrees 32 "
        "x cp_degrees 32 x presets and plans x loss_parallel 4 x float8 3 x async_tp 2 x activation_checkpointing 3 x "
        "local_batch_sizes 16 = 1179648 at pp 1, and 1179648 x pp_degrees (above 1) 31 = 36569088 with a pipeline); "
        "expected at "
        "most 16777216: shorten search.tp_degrees (line 5), search.cp_degrees (line 6), search.pp_degrees (line 7)");
  // Stages per rank 0..10000 x microbatch sizes 1..2000 at pp 2 alone (no pp 1): 1 x 10001 x 2000 = 20,002,000.
  CHECK(refusal(fmt::format("\n  tp_degrees: [1]\n  pp_degrees: [2]\n  pp_stages_per_rank: {}\n"
                            "  pp_microbatch_sizes: {}\n  local_batch_sizes: [1]\n{}",
                            range_list(0, 10000), range_list(1, 2000), kOneOfEach)) ==
        "big.yaml:7: search space size (the product of the search lists' lengths): 20002000 candidates "
        "(pp_stages_per_rank 10001 x pp_microbatch_sizes 2000 = 20002000 with a pipeline); expected at most 16777216: "
        "shorten search.pp_stages_per_rank (line 7), search.pp_microbatch_sizes (line 8)");
  // The largest space allowed: 2^12 tp degrees x 2^12 local batches = 2^24 (resolved, not searched).
  CHECK(resolve_space(test::small_config("big.yaml", 1, 8,
                                         fmt::format("\n  tp_degrees: {}\n  local_batch_sizes: {}\n{}",
                                                     range_list(1, 4096), range_list(1, 4096), kOneOfEach)))
            .size() == size_t{1} << 24);
  // A product past 64 bits saturates and is refused alike (pp 1: seq x tp x dp_replicate x cp x local batch = 2^50;
  // pipelines: that x 1023 pp degrees x 2^10 microbatch sizes, over 2^69).
  const std::string past =
      refusal(fmt::format("\n  tp_degrees: {0}\n  local_batch_sizes: {0}\n  pp_degrees: {0}\n  seq_lens: {0}\n"
                          "  dp_replicate: {0}\n  pp_microbatch_sizes: {0}\n  cp_degrees: {0}\n{1}",
                          range_list(1, 1024), kOneOfEach));
  CHECK(past.find("search space size (the product of the search lists' lengths): at least 9223372036854775807 "
                  "candidates") != std::string::npos);
}

TEST_CASE("search space: candidate_at decodes enumerate_candidates' order", "[search][pp]") {
  // The 8B example (two presets and a plan file, whose loss_parallel is its own), the 405B pipeline example, and the
  // 70B one with gradient accumulation (its steps follow from the local batch).
  for (const char* example : {"llama3-8b-h100.yaml", "llama3-405b-pp.yaml", "llama3-70b-ga.yaml"}) {
    INFO(example);
    const ResolvedSpace s = resolve_space(test::example_config(example));
    const std::vector<Candidate> all = enumerate_candidates(s);
    REQUIRE(all.size() == s.size());
    const size_t structure = s.activation_checkpointing.size() * s.local_batch_sizes.size();
    for (size_t i = 0; i < all.size(); ++i) {
      check_same_candidate(s.candidate_at(i), all[i]);
      // From the first candidate of its structure (the search's tasks), and from the last.
      check_same_candidate(s.candidate_at(i, all[i / structure * structure]), all[i]);
      check_same_candidate(s.candidate_at(i, all[i / structure * structure + structure - 1]), all[i]);
    }
    const std::vector<Candidate> pipes = pipeline_candidates(s, all, 7);
    REQUIRE(pipes.size() == s.pipeline_size());
    for (size_t k = 0; k < pipes.size(); ++k) check_same_candidate(s.pipeline_candidate_at(k, 7), pipes[k]);
  }
}

TEST_CASE("search: a statically pruned candidate is counted, not stored, and reads as the reference's",
          "[search][limits]") {
  // 8 GPUs, tp 1..64, local batch 1 and 2, one value of every toggle: 128 candidates. tp 1, 2, 4 and 8 divide the
  // world (and the model: 8 heads and kv heads, ffn 1536, vocab 1024, seq 1024), the other 60 do not: 60 x 2 = 120
  // are pruned by the first rule and not stored, 4 x 2 = 8 are lowered and stored. Then with a headroom of 1e6 GiB,
  // where nothing fits and the closest candidates are listed, at local batch 1 only (the search prunes a larger batch
  // of a plan whose smaller one missed memory without lowering it; the reference lowers it): 64, 60 and 4.
  Config cfg = test::small_config(
      "pruned.yaml", 1, 8,
      fmt::format("\n  tp_degrees: {}\n  local_batch_sizes: [1, 2]\n{}", range_list(1, 64), kOneOfEach));
  for (const size_t batches : {2, 1}) {
    if (batches == 1) {
      cfg.search.local_batch_sizes = {1};
      cfg.search.memory_headroom_gib = 1e6;
    }
    INFO(batches << " local batch sizes, headroom " << cfg.search.memory_headroom_gib);
    const SearchResult r = search(cfg, {.threads = 2});
    const SearchResult ref = test::reference_search(cfg);
    REQUIRE(r.results.size() == 64 * batches);
    CHECK(r.results.stored().size() == 4 * batches);
    REQUIRE(r.results.dropped().size() == 1);
    CHECK(r.results.dropped().at(PruneReason::world).count == 60 * batches);
    const size_t tp3 = 2 * batches;  // the first dropped: tp 3 at local batch 1
    CHECK(r.results.dropped().at(PruneReason::world).first == tp3);
    CHECK(r.pruned.at(PruneReason::world) == 60 * batches);
    // A dropped position is rebuilt: its candidate, reason and detail.
    const CandidateResult x3 = r.results[tp3];
    CHECK(x3.candidate.index == static_cast<int>(tp3));
    CHECK(x3.candidate.tp_degree == 3);
    CHECK(x3.candidate.local_batch_size == 1);
    CHECK(x3.pruned == PruneReason::world);
    CHECK(x3.detail == "tp 3 vs 8 GPUs");
    CHECK_FALSE(x3.has_memory);
    CHECK(r.results.find(tp3) == nullptr);
    // Every position as the reference search (which stores every result) has it.
    REQUIRE(ref.results.size() == r.results.size());
    for (size_t i = 0; i < r.results.size(); ++i) {
      const CandidateResult &x = r.results[i], &y = ref.results[i];
      INFO(describe(r.space, y.candidate));
      check_same_candidate(x.candidate, y.candidate);
      CHECK(x.pruned == y.pruned);
      CHECK(x.detail == y.detail);
      CHECK(x.has_memory == y.has_memory);
      CHECK(x.report.memory.peak == y.report.memory.peak);
      CHECK(x.report.step_time_ms == y.report.step_time_ms);
    }
    CHECK(r.ranking == ref.ranking);
    CHECK(r.pareto == ref.pareto);
    CHECK(r.closest == ref.closest);
    CHECK(r.pruned == ref.pruned);
    CHECK(r.feasible == (batches == 2 ? 8u : 0u));
    // Nothing fits: the four lowered by how far they miss, then the first of the one reason without a memory.
    if (batches == 1) CHECK(r.closest.size() == 5);
    if (batches == 1) CHECK(r.closest.back() == static_cast<int>(tp3));
  }
}

TEST_CASE("search.ep_degrees: the default per model, a dense model's refusal, a MoE model's list as given",
          "[search][moe]") {
  // A dense model: [1] (the space as before the key), by default and stated.
  CHECK(resolve_space(test::small_config("ep.yaml", 1, 8, "\n  ep_degrees: [1]\n")).ep_degrees == std::vector<int>{1});
  CHECK(resolve_space(test::small_config("ep.yaml", 1, 8, "{}")).ep_degrees == std::vector<int>{1});
  // ... which has no experts to split (the key's line: `search:` is line 4, the key line 5).
  CHECK(refusal("\n  ep_degrees: [1, 2]\n") ==
        "big.yaml:5: search.ep_degrees [1, 2]: the model has no routed experts (model.moe); expected [1]");
  // A mixture of experts: the list as stated, or by default every degree of its sparse mesh: the divisors of the
  // world (8 GPUs) that divide the experts (8: 1, 2, 4, 8; 6: 1, 2; 16 on 4 x 8 GPUs: 1, 2, 4, 8, 16).
  Config moe = test::small_config("moe.yaml", 1, 8, "\n  ep_degrees: [2, 4]\n");
  moe.model.moe.experts = 8;
  moe.model.moe.top_k = 2;
  moe.model.moe.expert_ffn_dim = 32;
  CHECK(resolve_space(moe).ep_degrees == std::vector<int>{2, 4});
  moe.search.ep_degrees.clear();
  CHECK(resolve_space(moe).ep_degrees == std::vector<int>{1, 2, 4, 8});
  moe.model.moe.experts = 6;
  CHECK(resolve_space(moe).ep_degrees == std::vector<int>{1, 2});
  moe.model.moe.experts = 16;
  CHECK(default_ep_degrees(moe.model, 32) == std::vector<int>{1, 2, 4, 8, 16});
  CHECK(default_ep_degrees(test::tiny_llama_model(), 32) == std::vector<int>{1});
  // The axis counts in the space's size: 4 ep degrees x the 8-GPU default space.
  moe.model.moe.experts = 8;
  const size_t with_ep = resolve_space(moe).size();
  moe.search.ep_degrees = {2};
  CHECK(with_ep == 4 * resolve_space(moe).size());
  // [1] without the key stated is the config's default, which a MoE model replaces; stated (the file, --ep), it stays.
  moe.search.ep_degrees = {1};
  moe.search.stated_at.erase("ep_degrees");
  CHECK(resolve_space(moe).ep_degrees == std::vector<int>{1, 2, 4, 8});
  moe.search.stated_at["ep_degrees"] = "option --ep";
  CHECK(resolve_space(moe).ep_degrees == std::vector<int>{1});
}
