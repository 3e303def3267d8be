#include "sim/search/search.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <set>
#include <unordered_map>

#include "plans/error.h"
#include "plans/limits.h"
#include "sim/pipeline_step.h"
#include "sim/search/constraints.h"
#include "sim/search/parallel.h"
#include "sim/search/pareto.h"

namespace tptune {

namespace {

// The pipeline candidates grouped by their microbatch Program (shares_pipeline_program()): each group's indices in
// enumeration order, the groups in the order of their first candidate. Candidates are bucketed by a hash of the
// fields the key holds, then compared exactly.
std::vector<std::vector<size_t>> pipeline_program_units(const std::vector<Candidate>& cands) {
  std::vector<std::vector<size_t>> units;
  std::unordered_map<size_t, std::vector<size_t>> buckets;  // hash -> units
  for (size_t i = 0; i < cands.size(); ++i) {
    const Candidate& c = cands[i];
    size_t h = std::hash<int64_t>{}(c.seq_len);
    for (int64_t v : {int64_t{c.family}, int64_t{c.tp_degree}, int64_t{c.pp_degree}, c.pp_microbatch_size,
                      int64_t{c.cp_degree}, int64_t{c.dp_replicate}, static_cast<int64_t>(c.float8),
                      int64_t{c.async_tp}, int64_t{c.loss_parallel}, static_cast<int64_t>(c.activation_checkpointing)})
      h = h * 1000003u ^ std::hash<int64_t>{}(v);
    std::vector<size_t>& bucket = buckets[h];
    auto same = std::find_if(bucket.begin(), bucket.end(),
                             [&](size_t u) { return shares_pipeline_program(cands[units[u].front()], c); });
    if (same != bucket.end()) {
      units[*same].push_back(i);
    } else {
      bucket.push_back(units.size());
      units.push_back({i});
    }
  }
  return units;
}

}  // namespace

bool ranks_before(const CandidateResult& a, const CandidateResult& b, Objective o) {
  const StepReport &x = a.report, &y = b.report;
  switch (o) {
    case Objective::tokens_per_second:
    case Objective::cost_per_token:  // price per GPU-hour / tokens per GPU-hour: the same order
      if (x.tokens_per_second_per_gpu != y.tokens_per_second_per_gpu)
        return x.tokens_per_second_per_gpu > y.tokens_per_second_per_gpu;
      if (x.memory.peak != y.memory.peak) return x.memory.peak < y.memory.peak;
      break;
    case Objective::step_time:
      if (x.step_time_ms != y.step_time_ms) return x.step_time_ms < y.step_time_ms;
      if (x.tokens_per_second_per_gpu != y.tokens_per_second_per_gpu)
        return x.tokens_per_second_per_gpu > y.tokens_per_second_per_gpu;
      break;
    case Objective::memory:
      if (x.memory.peak != y.memory.peak) return x.memory.peak < y.memory.peak;
      if (x.tokens_per_second_per_gpu != y.tokens_per_second_per_gpu)
        return x.tokens_per_second_per_gpu > y.tokens_per_second_per_gpu;
      break;
  }
  return enumerated_before(a.candidate, b.candidate);
}

bool enumerated_before(const Candidate& a, const Candidate& b) {
  if (a.index != b.index) return a.index < b.index;
  return a.ac_layers < b.ac_layers;  // the ac_layers sweep's candidates share their index
}

void rank_results(SearchResult& r) {
  for (size_t i = 0; i < r.results.size(); ++i) {
    const CandidateResult& c = r.results[i];
    if (c.feasible())
      r.ranking.push_back(static_cast<int>(i));
    else
      ++r.pruned[c.pruned];
  }
  r.feasible = r.ranking.size();
  const Objective obj = r.space.objective;
  std::sort(r.ranking.begin(), r.ranking.end(), [&](int a, int b) {
    return ranks_before(r.results[static_cast<size_t>(a)], r.results[static_cast<size_t>(b)], obj);
  });

  r.pareto = pareto_front(r.results, r.ranking);

  if (r.ranking.empty()) {
    // Nearest misses: lowered candidates by how far their peak is over the budget (capacity - headroom).
    std::vector<int> mem;
    for (size_t i = 0; i < r.results.size(); ++i)
      if (r.results[i].has_memory) mem.push_back(static_cast<int>(i));
    std::sort(mem.begin(), mem.end(), [&](int a, int b) {
      const MemoryReport &x = r.results[static_cast<size_t>(a)].report.memory,
                         &y = r.results[static_cast<size_t>(b)].report.memory;
      if (x.peak - x.capacity != y.peak - y.capacity) return x.peak - x.capacity < y.peak - y.capacity;
      return a < b;
    });
    r.closest = mem;
    // Then one example of every other reason, so that the user sees why the rest failed.
    std::set<PruneCause> seen;
    for (int i : mem) seen.insert(r.results[static_cast<size_t>(i)].pruned);
    for (size_t i = 0; i < r.results.size(); ++i)
      if (!r.results[i].has_memory && seen.insert(r.results[i].pruned).second) r.closest.push_back(static_cast<int>(i));
  }
}

bool shares_pipeline_program(const Candidate& a, const Candidate& b) {
  auto key = [](const Candidate& c) {
    Candidate k = c;
    k.index = 0;
    k.pp_schedule = PipelineScheduleKind::one_f_one_b;
    k.pp_stages_per_rank = 0;
    k.local_batch_size = 0;
    k.gradient_accumulation_steps = 0;
    return k;
  };
  const Candidate x = key(a), y = key(b);
  return x.family == y.family && static_cast<const PlanToggles&>(x) == static_cast<const PlanToggles&>(y);
}

CandidateResult evaluate_pipeline_candidate(const Config& cfg, const ClusterSpec& cluster, const CostParams& cost,
                                            const ResolvedSpace& space, const Candidate& c,
                                            SharedPipelineProgram* shared) {
  CandidateResult r;
  r.candidate = c;
  if (Verdict v = check_static(cfg, cluster, space, c); !v.ok()) {
    r.pruned = v.reason;
    r.detail = std::move(v.detail);
    return r;
  }
  const Plan plan = candidate_plan(space, c);
  try {
    const Training training = candidate_training(cfg.training, c);
    if (shared) {
      r.report = simulate_pipeline(cfg.model, training, plan, cluster, cost, [&]() -> const PipelineProgramCosts& {
        if (shared->error) throw Error(*shared->error);
        if (!shared->costs) {
          try {
            shared->costs = cost_pipeline_program(cfg.model, training, plan, cluster, cost);
          } catch (const Error& e) {
            shared->error = e.what();
            throw;
          }
        }
        return *shared->costs;
      });
    } else {
      r.report = simulate_pipeline(cfg.model, training, plan, cluster, cost);
    }
  } catch (const Error& e) {
    r.pruned = error_reason(PruneReason::simulation, e.what(), plan.source);
    r.detail = e.what();
    return r;
  }
  r.has_memory = true;
  constexpr double kGiB = 1073741824.0;
  if (!fits_with_headroom(r.report.memory, space.memory_headroom_gib)) {
    r.pruned = PruneReason::memory;
    r.detail = fmt::format("peak {:.1f} GiB + headroom {:g} GiB > {:.1f} GiB", r.report.memory.peak / kGiB,
                           space.memory_headroom_gib, r.report.memory.capacity / kGiB);
    return r;
  }
  r.has_step = true;
  if (r.report.tokens_per_second_per_gpu < space.min_tokens_per_second_per_gpu) {
    r.pruned = PruneReason::min_throughput;
    r.detail = fmt::format("{:.0f} tokens/s per GPU < {:g}", r.report.tokens_per_second_per_gpu,
                           space.min_tokens_per_second_per_gpu);
  }
  return r;
}

SearchResult search(const Config& cfg, const SearchOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  SearchResult r;
  r.space = resolve_space(cfg);
  r.cluster = resolve_cluster(cfg);
  r.trust = prediction_trust(r.cluster.gpu);
  const std::vector<Candidate> cands = enumerate_candidates(r.space);
  // search.pp_degrees without 1: only pipeline candidates (each enumerated candidate with a pp degree > 1).
  const bool plain = std::find(r.space.pp_degrees.begin(), r.space.pp_degrees.end(), 1) != r.space.pp_degrees.end();
  const int64_t total = plain ? r.space.candidates() : 0;  // with the ac_layers sweep's
  r.evaluated = static_cast<size_t>(total);
  r.results.resize(plain ? cands.size() : 0);
  r.threads = std::max(1, std::min<int>(o.threads > 0 ? o.threads : hardware_threads(),
                                        static_cast<int>(std::max<size_t>(cands.size(), 1))));

  // Branch-and-bound only where the tokens/s bound orders candidates as the objective does (sim/search/bound.h).
  const bool bound = o.bound_top > 0 && (r.space.objective == Objective::tokens_per_second ||
                                         r.space.objective == Objective::cost_per_token);
  if (!bound && total > limits::max_search_candidates)
    throw Error(
        fmt::format("{}: {} candidates with search.ac_layers: a full ranking keeps every feasible one (at most "
                    "{}); use branch-and-bound (--bound), which keeps the top K and the Pareto front exact",
                    cfg.path, total, limits::max_search_candidates));
  Incumbents incumbents(o.bound_top);
  std::vector<AcLayersSweep> sweeps(static_cast<size_t>(r.threads));
  std::vector<std::unique_ptr<CandidateEvaluator>> workers;
  for (int w = 0; w < r.threads; ++w) {
    workers.push_back(std::make_unique<CandidateEvaluator>(cfg, r.cluster, o.cost, r.space));
    if (bound) workers.back()->incumbents = &incumbents;
  }
  // Tasks: the candidates that differ only in activation checkpointing and local batch size (consecutive: the two
  // innermost loops), one policy after the other, each smallest batch first. Every tensor of a Program grows or stays
  // with the local batch and the op list does not change, so peak memory is non-decreasing in it: once a batch misses
  // the budget, the policy's larger ones are pruned without lowering them (the brute-force test checks this too).
  const size_t n_batch = std::max<size_t>(r.space.local_batch_sizes.size(), 1);
  const size_t per_task = n_batch * std::max<size_t>(r.space.activation_checkpointing.size(), 1);
  std::vector<size_t> order(n_batch);
  for (size_t j = 0; j < n_batch; ++j) order[j] = j;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return r.space.local_batch_sizes[a] < r.space.local_batch_sizes[b]; });
  std::atomic<size_t> done{0};
  const size_t tasks = plain ? cands.size() / per_task : 0;
  auto run_task = [&](size_t t, int w) {
    CandidateEvaluator& ev = *workers[static_cast<size_t>(w)];
    // The structure's unfinished Programs; with async TP on, its async-off sibling's when this worker kept them.
    const Candidate& head = cands[t * per_task];
    StructureLowering s;
    if (head.async_tp) s.unfinished = ev.take_async_sibling(head);
    const bool keep = ev.has_async_sibling(head);
    for (size_t first = t * per_task; first < (t + 1) * per_task; first += n_batch) {  // one policy
      const CandidateResult* smaller_oom = nullptr;
      std::vector<char> oom_k;  // the ac_layers sweep's block counts that missed memory at a smaller batch
      s.last_policy = first + n_batch == (t + 1) * per_task && !keep;
      for (size_t j : order) {
        const size_t i = first + j;
        if (!r.space.ac_layers.empty() && cands[i].activation_checkpointing != ActivationCheckpointing::none) {
          ev.sweep_ac_layers(cands[i], s.unfinished, oom_k, sweeps[static_cast<size_t>(w)]);
          done.fetch_add(r.space.ac_layers.size(), std::memory_order_relaxed);
        }
        if (r.space.max_local_batch_size > 0) {  // one candidate per policy (n_batch == 1): its largest fitting batch
          r.results[i] = ev.evaluate_largest_fitting(cands[i], r.space.max_local_batch_size, s.unfinished);
        } else if (smaller_oom) {
          // A static rule that depends on the batch (global_batch_size) names the reason first, as it would have
          // without the shortcut.
          CandidateResult& c = r.results[i];
          c.candidate = cands[i];
          if (Verdict v = check_static(cfg, r.cluster, r.space, cands[i]); !v.ok()) {
            c.pruned = v.reason;
            c.detail = std::move(v.detail);
          } else {
            c.pruned = PruneReason::memory;
            c.detail = fmt::format("local batch {} already misses the memory budget ({})",
                                   smaller_oom->candidate.local_batch_size, smaller_oom->detail);
          }
        } else {
          r.results[i] = ev.evaluate(cands[i], s);
          if (r.results[i].pruned == PruneReason::memory) smaller_oom = &r.results[i];
        }
        done.fetch_add(1, std::memory_order_relaxed);
      }
      ev.recycle(s.batch);
    }
    if (keep)
      ev.keep_for_async_sibling(head, std::move(s.unfinished));
    else
      ev.recycle(s.unfinished);
  };
  std::function<void(size_t, size_t)> progress;
  if (o.progress)
    progress = [&](size_t, size_t) { o.progress(done.load(std::memory_order_relaxed), static_cast<size_t>(total)); };
  // Work units: the tasks that share (seq_len, tp, dp_replicate, cp, family, float8), i.e. async TP off and on, with
  // and without loss parallel, in enumeration order on one worker, so that each async-off structure hands its lowering
  // to its async-on sibling (CandidateEvaluator::take_async_sibling()) whatever the thread count.
  std::vector<size_t> group_begin;
  for (size_t t = 0; t < tasks; ++t) {
    const Candidate &c = cands[t * per_task], *prev = t > 0 ? &cands[(t - 1) * per_task] : nullptr;
    if (!prev || prev->seq_len != c.seq_len || prev->tp_degree != c.tp_degree || prev->dp_replicate != c.dp_replicate ||
        prev->cp_degree != c.cp_degree || prev->family != c.family || prev->float8 != c.float8)
      group_begin.push_back(t);
  }
  group_begin.push_back(tasks);
  parallel_for(
      group_begin.size() - 1, r.threads,
      [&](size_t g, int w) {
        for (size_t t = group_begin[g]; t < group_begin[g + 1]; ++t) run_task(t, w);
      },
      progress);
  for (const auto& w : workers) {
    r.lowered += w->lowered;
    r.finished += w->finished;
    r.patched += w->patched;
    r.phases += w->phases;
  }
  // The pipeline candidates, after the others (their indices follow), each as `tp-plan simulate` predicts it
  // (simulate_pipeline(), sim/pipeline_step.h) unless a static rule prunes it; the candidates that share a microbatch
  // Program (shares_pipeline_program()) are one work unit, which costs it once (exact: the lowering reads none of
  // what they differ in). The bound's incumbents are the pp 1 candidates', so it prunes none that the pipeline ones
  // would keep in the top k or on the front.
  const std::vector<Candidate> pipeline =
      pipeline_candidates(r.space, cands, plain ? static_cast<int>(cands.size()) : 0);
  const size_t first_pipeline = r.results.size();
  r.results.resize(first_pipeline + pipeline.size());
  r.evaluated += pipeline.size();
  std::vector<std::vector<size_t>> units = pipeline_program_units(pipeline);
  std::atomic<size_t> pipeline_programs{0};
  if (!units.empty())  // no worker threads for a space without pipelines
    parallel_for(units.size(), r.threads, [&](size_t u, int) {
      SharedPipelineProgram shared;
      for (size_t i : units[u])
        r.results[first_pipeline + i] =
            evaluate_pipeline_candidate(cfg, r.cluster, o.cost, r.space, pipeline[i], &shared);
      if (shared.costs || shared.error) pipeline_programs.fetch_add(1, std::memory_order_relaxed);
    });
  r.pipeline_programs = pipeline_programs.load();
  // The ac_layers sweep's kept candidates after the enumerated ones, in (index, ac_layers) order whatever the
  // threads did; its pruned ones are counts only.
  std::vector<CandidateResult> kept;
  for (AcLayersSweep& s : sweeps) {
    for (auto& [reason, n] : s.pruned) r.pruned[reason] += n;
    for (CandidateResult& c : s.kept) kept.push_back(std::move(c));
  }
  std::sort(kept.begin(), kept.end(), [](const CandidateResult& a, const CandidateResult& b) {
    return enumerated_before(a.candidate, b.candidate);
  });
  for (CandidateResult& c : kept) r.results.push_back(std::move(c));

  rank_results(r);
  r.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace tptune
