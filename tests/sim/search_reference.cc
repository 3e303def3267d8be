#include "tests/sim/search_reference.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "sim/memory.h"
#include "sim/search/constraints.h"
#include "sim/search/eval.h"
#include "sim/search/parallel.h"
#include "sim/simulate.h"

namespace tptune::test {

namespace {

// What the search lowers for `c`: one microbatch (the evaluator applies the candidate's accumulation steps).
Plan microbatch_plan(const ResolvedSpace& s, Candidate c) {
  c.gradient_accumulation_steps = 1;
  return candidate_plan(s, c);
}

struct Reference {
  const Config& cfg;
  const ResolvedSpace& space;
  const ClusterSpec& cluster;
  const CostParams& cost;

  // `c` lowered with lower() and evaluated from that Program.
  CandidateResult evaluate(CandidateEvaluator& ev, const Candidate& c) const {
    CandidateResult r;
    r.candidate = c;
    if (Verdict v = check_static(cfg, cluster, space, c); !v.ok()) {
      r.pruned = v.reason;
      r.detail = std::move(v.detail);
      return r;
    }
    const Plan plan = microbatch_plan(space, c);
    Program prog;
    try {
      prog = lower(cfg.model, candidate_training(cfg.training, c), plan);
      ++ev.lowered;
    } catch (const Error& e) {
      r.pruned = error_reason(PruneReason::lowering, e.what(), plan.source);
      r.detail = e.what();
      return r;
    }
    return ev.evaluate_program(c, prog);
  }

  // The largest local batch in 1..limit at which `c` lowers and fits memory with the headroom (1 when none does), by
  // bisection with every probe lowered.
  int64_t largest_fitting_batch(CandidateEvaluator& ev, const Candidate& c, int64_t limit) const {
    auto fits = [&](int64_t b) {
      Candidate x = c;
      x.local_batch_size = b;
      if (!check_static(cfg, cluster, space, x).ok()) return false;
      try {
        const Program p = lower(cfg.model, candidate_training(cfg.training, x), microbatch_plan(space, x));
        ++ev.lowered;
        check_supported(p, cluster);
        return fits_with_headroom(memory_model(p, cluster.gpu, cost), space.memory_headroom_gib);
      } catch (const Error&) {
        return false;
      }
    };
    return largest_fitting(limit, fits);
  }
};

}  // namespace

SearchResult reference_search(const Config& cfg, int threads, const CostParams& cost) {
  const auto t0 = std::chrono::steady_clock::now();
  SearchResult r;
  r.space = resolve_space(cfg);
  r.cluster = resolve_cluster(cfg);
  if (!r.space.ac_layers.empty()) throw Error("reference_search: not for spaces with search.ac_layers");
  const std::vector<Candidate> cands = enumerate_candidates(r.space);
  r.evaluated = cands.size();
  std::vector<CandidateResult> results(cands.size());  // every one stored
  r.threads = std::max(1, std::min<int>(threads, static_cast<int>(std::max<size_t>(cands.size(), 1))));
  std::vector<std::unique_ptr<CandidateEvaluator>> workers;
  for (int w = 0; w < r.threads; ++w)
    workers.push_back(std::make_unique<CandidateEvaluator>(cfg, r.cluster, cost, r.space));
  const Reference ref{cfg, r.space, r.cluster, cost};
  parallel_for(cands.size(), r.threads, [&](size_t i, int w) {
    CandidateEvaluator& ev = *workers[static_cast<size_t>(w)];
    Candidate c = cands[i];
    if (r.space.max_local_batch_size > 0)
      c.local_batch_size = ref.largest_fitting_batch(ev, c, r.space.max_local_batch_size);
    results[i] = ref.evaluate(ev, c);
  });
  r.results = CandidateResults(std::move(results));
  for (const auto& w : workers) {
    r.lowered += w->lowered;
    r.phases += w->phases;
  }
  rank_results(r);
  r.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

bool pruned_by_larger_batch_shortcut(const CandidateResult& r) {
  return r.pruned == PruneReason::memory && !r.has_memory;
}

}  // namespace tptune::test
