#include "tests/sim/search_brute_force.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <vector>

#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "sim/search/constraints.h"
#include "tests/sanitizer_stride.h"

namespace tptune::test {
namespace {

// The config at the candidate's sequence length (search.seq_lens; training.seq_len by default).
Config at_seq(const Config& cfg, const Candidate& c) {
  Config at = cfg;
  at.training = candidate_training(cfg.training, c);
  return at;
}

}  // namespace

Brute brute(const Config& cfg, const ClusterSpec& cl, const Plan& plan, double headroom, const CostParams& cost) {
  Brute b;
  b.computed = true;
  try {
    b.report = simulate(lower(cfg.model, cfg.training, plan), cl, cost);
    b.ok = true;
    b.fits = fits_with_headroom(b.report.memory, headroom);
  } catch (const Error& e) {
    b.error = e.what();
  }
  return b;
}

void check_against_brute_force(const Config& cfg, const SearchResult& r, const CostParams& cost) {
  const std::vector<Candidate> cands = enumerate_candidates(r.space);
  REQUIRE(cands.size() == r.results.size());
  std::vector<Brute> bf(cands.size());
  for (size_t i = 0; i < cands.size(); ++i) {
    if (i % test::kSanitizerStride) continue;
    // There is no plan: dp = world / (tp x dp_replicate) is not whole.
    if (r.results[i].pruned == PruneReason::world || r.results[i].pruned == PruneReason::replicate_world) continue;
    bf[i] =
        brute(at_seq(cfg, cands[i]), r.cluster, candidate_plan(r.space, cands[i]), r.space.memory_headroom_gib, cost);
  }
  std::vector<int> bf_feasible;
  for (size_t i = 0; i < cands.size(); ++i) {
    const CandidateResult& s = r.results[i];
    INFO(describe(r.space, cands[i]) << " | search: " << s.pruned << " " << s.detail << " | brute: " << bf[i].error);
    if (!bf[i].computed) continue;
    // The global batch is the user's constraint, not something lower() or simulate() refuses.
    if (s.pruned == PruneReason::global_batch || s.pruned == PruneReason::global_batch_multiple) continue;
    if (s.pruned == PruneReason::redundant) {
      // The same Program as its representative: brute force gives the very same numbers.
      const Candidate rep = tp1_representative(r.space, cands[i]);
      auto it = std::find_if(cands.begin(), cands.end(), [&](const Candidate& c) {
        return c.tp_degree == 1 && c.seq_len == rep.seq_len && c.dp_replicate == rep.dp_replicate &&
               c.cp_degree == rep.cp_degree && c.ep_degree == rep.ep_degree && c.family == rep.family &&
               c.float8 == rep.float8 && c.async_tp == rep.async_tp && c.loss_parallel == rep.loss_parallel &&
               c.activation_checkpointing == rep.activation_checkpointing && c.local_batch_size == rep.local_batch_size;
      });
      REQUIRE(it != cands.end());
      const Brute& rep_bf = bf[static_cast<size_t>(it->index)];
      const Brute same = rep_bf.computed ? rep_bf
                                         : brute(at_seq(cfg, *it), r.cluster, candidate_plan(r.space, *it),
                                                 r.space.memory_headroom_gib, cost);
      CHECK(bf[i].ok == same.ok);
      if (bf[i].ok && same.ok) {
        CHECK(bf[i].report.step_time_ms == same.report.step_time_ms);
        CHECK(bf[i].report.memory.peak == same.report.memory.peak);
      }
      continue;
    }
    CHECK(s.feasible() == bf[i].feasible());
    if (s.feasible() && bf[i].feasible()) {
      CHECK(s.report.step_time_ms == bf[i].report.step_time_ms);
      CHECK(s.report.gradient_accumulation_steps == bf[i].report.gradient_accumulation_steps);
      CHECK(s.report.tokens_per_second_per_gpu == bf[i].report.tokens_per_second_per_gpu);
      CHECK(s.report.mfu == bf[i].report.mfu);
      CHECK(s.report.memory.peak == bf[i].report.memory.peak);
      CHECK(s.report.exposed_tp_comm_ms == bf[i].report.exposed_tp_comm_ms);
      CHECK(s.report.exposed_dp_comm_ms == bf[i].report.exposed_dp_comm_ms);
      bf_feasible.push_back(static_cast<int>(i));
    }
    if (s.pruned == PruneReason::memory) {
      CHECK(bf[i].ok);
      CHECK_FALSE(bf[i].fits);
      if (s.has_memory) CHECK(s.report.memory.peak == bf[i].report.memory.peak);
    }
    if (!s.feasible() && s.pruned != PruneReason::memory) CHECK_FALSE(bf[i].ok);  // refused by lowering or simulation
  }
  // The ranking is brute force's, sorted by the objective.
  std::vector<CandidateResult> as_results;
  for (int i : bf_feasible) {
    CandidateResult c;
    c.candidate = cands[static_cast<size_t>(i)];
    c.report = bf[static_cast<size_t>(i)].report;
    as_results.push_back(c);
  }
  std::sort(as_results.begin(), as_results.end(),
            [&](const CandidateResult& a, const CandidateResult& b) { return ranks_before(a, b, r.space.objective); });
  std::vector<int> ranked;  // the search's ranking of the candidates brute-forced
  for (int i : r.ranking)
    if (bf[static_cast<size_t>(i)].computed) ranked.push_back(i);
  REQUIRE(as_results.size() == ranked.size());
  for (size_t k = 0; k < as_results.size(); ++k) CHECK(as_results[k].candidate.index == ranked[k]);
}

}  // namespace tptune::test
