// search.max_local_batch_size: each plan at its largest local batch that fits memory, by bisection
// (CandidateEvaluator::evaluate_largest_fitting). Checks the two premises that make bisection exact on the example
// spaces (peak memory non-decreasing in the local batch; "fits" true up to some batch and false above), that the
// bisection's batch and numbers equal enumerating every size 1..N and taking the largest that fits, and the config
// errors of the key.
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <numeric>
#include <string>

#include "plans/util/error.h"
#include "sim/search/constraints.h"
#include "sim/search/search.h"
#include "tests/fixtures.h"
#include "tests/sanitizer_stride.h"
#include "tests/sim/search_reference.h"

using namespace tptune;
using Catch::Matchers::Contains;

namespace {

// The example's space cut to keep the enumeration of every batch size short: loss parallel on, float8 none or
// tensorwise (rowwise where that is all the GPU has is pruned the same way in both searches).
// The mixture of experts (Qwen3 30B-A3B, its default ep 1, 2, 4, 8) at tp 2, sequence parallel, full AC, float8 none
// or rowwise and imbalanced routing (1.1): its expert groups' rows round up, so the bisection's probes are lowered one
// by one (BatchProgram refuses them), and memory still decides the batch. On H200s (141 GB): on the example's
// 80 GB H100s, with the caching allocator's reserve (memory_fragmentation 0.1826), no plan of the cut fits more than
// one sequence of 4096, and the bisection would only test its lower end.
Config cut(const char* name) {
  Config cfg = test::example_config(name);
  cfg.search.loss_parallel = {true};
  cfg.search.float8 = {Float8Recipe::none, Float8Recipe::tensorwise};
  if (cfg.model.moe.experts > 0) {
    cfg.training.moe_imbalance = 1.1;
    cfg.cluster.gpu = "h200";
    cfg.search.tp_degrees = {2};
    cfg.search.presets = {"sequence_parallel"};
    cfg.search.async_tp = {false};
    cfg.search.activation_checkpointing = {ActivationCheckpointing::full};
    cfg.search.float8 = {Float8Recipe::none, Float8Recipe::rowwise};
  }
  return cfg;
}

}  // namespace

TEST_CASE("bisect: peak memory is non-decreasing in the local batch, and bisection equals enumeration",
          "[search][bisect]") {
  constexpr int64_t kMax = 12;  // not a power of two: the bisection's upper end is not a probe of its own
  for (const char* name : {"llama3-8b-h100.yaml", "llama3-70b-h100.yaml", "llama3-405b-h100.yaml", "gpt-a100.yaml",
                           "tiny-llama.yaml", "llama3-405b-hsdp.yaml", "qwen3-30b-a3b-h100.yaml"}) {
    INFO(name);
    if (test::kSanitized && std::string(name).find("405b") != std::string::npos) continue;  // 190 s under ASan
    if (test::kSanitized && std::string(name).find("qwen3") != std::string::npos) continue;
    Config every = cut(name);
    every.search.local_batch_sizes.resize(kMax);
    std::iota(every.search.local_batch_sizes.begin(), every.search.local_batch_sizes.end(), int64_t{1});
    // Every size lowered (the reference, tests/sim/search_reference.h): the premises are checked, not assumed.
    const SearchResult e = test::reference_search(every);

    Config bisect = cut(name);
    bisect.search.max_local_batch_size = kMax;
    bisect.search.local_batch_sizes = {kMax};
    const SearchResult b = search(bisect, {});
    REQUIRE(e.results.size() == b.results.size() * kMax);  // batch is the innermost loop of the enumeration
    // The probes are BatchProgram::at() of the first two (finished from the structure's shared unfinished
    // Programs): the same answers and numbers as lowering every probe (the reference).
    const SearchResult slow = test::reference_search(bisect);
    REQUIRE(slow.results.size() == b.results.size());
    CHECK(slow.patched == 0);
    // Dense Programs' probes are patched, so the bisection lowers fewer; the mixture of experts' are all lowered.
    if (slow.lowered > 0 && every.model.moe.experts == 0) CHECK(b.lowered < slow.lowered);
    CHECK(b.lowered <= slow.lowered);
    for (size_t g = 0; g < b.results.size(); ++g) {
      const CandidateResult &x = b.results[g], &y = slow.results[g];
      INFO(describe(b.space, x.candidate) << ": " << x.pruned << " " << x.detail);
      CHECK(x.candidate.local_batch_size == y.candidate.local_batch_size);
      CHECK(x.pruned == y.pruned);
      CHECK(x.detail == y.detail);
      CHECK(x.has_memory == y.has_memory);
      CHECK(x.has_step == y.has_step);
      CHECK(x.report.memory.peak == y.report.memory.peak);
      CHECK(x.report.step_time_ms == y.report.step_time_ms);
      CHECK(x.report.tokens_per_second_per_gpu == y.report.tokens_per_second_per_gpu);
    }

    size_t groups_with_memory = 0, bigger_than_one = 0, not_max = 0;
    for (size_t g = 0; g < b.results.size(); ++g) {
      const CandidateResult& got = b.results[g];
      INFO(describe(b.space, got.candidate) << ": " << got.pruned << " " << got.detail);
      int64_t largest = 0;  // the largest enumerated batch that fits (0: none)
      bool lowered_any = false;
      double prev_peak = 0;
      bool prev_fits = true;
      for (int64_t k = 0; k < kMax; ++k) {
        const CandidateResult& x = e.results[g * kMax + static_cast<size_t>(k)];
        REQUIRE(x.candidate.local_batch_size == k + 1);
        // A candidate fits when it was lowered and not refused for memory (min-throughput comes after the fit).
        const bool fits = x.has_memory && x.pruned != PruneReason::memory;
        if (x.has_memory) {
          CHECK(x.report.memory.peak >= prev_peak);  // premise 1
          prev_peak = x.report.memory.peak;
          lowered_any = true;
        }
        if (fits) {
          CHECK(prev_fits);  // premise 2: no fitting batch above one that does not fit
          largest = k + 1;
        }
        prev_fits = fits;
      }
      if (lowered_any) ++groups_with_memory;
      if (largest == 0) {
        // Nothing fits: the bisection answers 1, and its verdict is the enumeration's at 1.
        CHECK(got.candidate.local_batch_size == 1);
        CHECK(got.pruned == e.results[g * kMax].pruned);
        continue;
      }
      CHECK(got.candidate.local_batch_size == largest);
      if (largest > 1) ++bigger_than_one;
      if (largest < kMax) ++not_max;
      const CandidateResult& want = e.results[g * kMax + static_cast<size_t>(largest - 1)];
      CHECK(got.pruned == want.pruned);
      CHECK(got.report.memory.peak == want.report.memory.peak);
      CHECK(got.report.step_time_ms == want.report.step_time_ms);
    }
    CHECK(groups_with_memory > 0);
    // The examples exercise the bisection, not only its ends.
    if (std::string(name) == "llama3-8b-h100.yaml" || std::string(name) == "qwen3-30b-a3b-h100.yaml") {
      CHECK(bigger_than_one > 0);
      CHECK(not_max > 0);
    }
  }
}

TEST_CASE("bisect: max_local_batch_size reads from YAML, within limits, and excludes local_batch_sizes",
          "[search][bisect]") {
  auto cfg = [](const std::string& search) {
    return load_config_string(fmt::format("model: {{dim: 512, n_layers: 2, n_heads: 8, n_kv_heads: 8, ffn_dim: 1536, "
                                          "vocab_size: 1024}}\ntraining: {{seq_len: 1024, local_batch_size: 1}}\n"
                                          "cluster: {{gpu: h100-sxm, nodes: 1, gpus_per_node: 8}}\nsearch: {}\n",
                                          search),
                              "b.yaml");
  };
  const Config ok = cfg("{max_local_batch_size: 16}");
  CHECK(ok.search.max_local_batch_size == 16);
  CHECK(ok.search.local_batch_sizes == std::vector<int64_t>{16});
  CHECK(cfg("{}").search.max_local_batch_size == 0);
  CHECK_THROWS_WITH(cfg("{max_local_batch_size: 0}"), Contains("b.yaml:4") && Contains("1..65536"));
  CHECK_THROWS_WITH(cfg("{max_local_batch_size: 70000}"), Contains("1..65536"));
  CHECK_THROWS_WITH(cfg("{local_batch_sizes: [1, 2], max_local_batch_size: 4}"),
                    Contains("b.yaml:4") && Contains("not both"));
  CHECK_THROWS_WITH(cfg("{max_local_batch_size: 4, global_batch_size: 64}"),
                    Contains("b.yaml:4") && Contains("use local_batch_sizes"));
}
