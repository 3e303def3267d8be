#include "sim/search/search.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <set>

#include "plans/util/error.h"
#include "plans/util/limits.h"
#include "sim/pipeline/step.h"
#include "sim/search/constraints.h"
#include "sim/search/parallel.h"
#include "sim/search/pareto.h"

namespace tptune {

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
  const CandidateResults& results = r.results;
  const std::vector<CandidateResult>& stored = results.stored();
  const std::vector<size_t>& positions = results.stored_positions();
  std::vector<std::pair<int, const CandidateResult*>> feasible;
  for (size_t k = 0; k < stored.size(); ++k) {
    if (stored[k].feasible())
      feasible.emplace_back(static_cast<int>(positions[k]), &stored[k]);
    else
      ++r.pruned[stored[k].pruned];
  }
  for (const auto& [reason, dropped] : results.dropped()) r.pruned[reason] += dropped.count;
  r.feasible = feasible.size();
  const Objective obj = r.space.objective;
  // A strict total order (ties end in enumeration order): the ranking does not depend on the order sorted from.
  std::sort(feasible.begin(), feasible.end(),
            [&](const auto& a, const auto& b) { return ranks_before(*a.second, *b.second, obj); });
  for (const auto& [position, result] : feasible) r.ranking.push_back(position);

  r.pareto = pareto_front(results, r.ranking);

  if (r.ranking.empty()) {
    // Nearest misses: lowered candidates by how far their peak is over the budget (capacity - headroom).
    std::vector<size_t> mem;  // into stored
    for (size_t k = 0; k < stored.size(); ++k)
      if (stored[k].has_memory) mem.push_back(k);
    std::sort(mem.begin(), mem.end(), [&](size_t a, size_t b) {
      const MemoryReport &x = stored[a].report.memory, &y = stored[b].report.memory;
      if (x.peak - x.capacity != y.peak - y.capacity) return x.peak - x.capacity < y.peak - y.capacity;
      return a < b;
    });
    // Then the first candidate (in enumeration order) of every other reason, so that the user sees why the rest
    // failed: among the stored ones without a memory, and the first of each reason dropped.
    std::set<PruneCause> seen;
    for (size_t k : mem) {
      r.closest.push_back(static_cast<int>(positions[k]));
      seen.insert(stored[k].pruned);
    }
    std::vector<std::pair<size_t, PruneCause>> firsts;
    for (size_t k = 0; k < stored.size(); ++k)
      if (!stored[k].has_memory) firsts.emplace_back(positions[k], stored[k].pruned);
    for (const auto& [reason, dropped] : results.dropped()) firsts.emplace_back(dropped.first, reason);
    std::sort(firsts.begin(), firsts.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [position, cause] : firsts)
      if (seen.insert(cause).second) r.closest.push_back(static_cast<int>(position));
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
                                            SharedPipelineProgram* shared, Incumbents* incumbents) {
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
    std::optional<PipelineProgramCosts> own;
    auto program = [&]() -> const PipelineProgramCosts& {
      if (!shared) return *(own = cost_pipeline_program(cfg.model, training, plan, cluster, cost));
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
    };
    double bound_tps = 0;
    std::function<bool(const PipelineBound&)> prune;
    if (incumbents && incumbents->holds_k())
      prune = [&](const PipelineBound& b) {
        bound_tps = b.tokens_per_second_per_gpu;
        return incumbents->dominates(b.tokens_per_second_per_gpu, b.peak_memory);
      };
    std::optional<StepReport> report = simulate_pipeline(cfg.model, training, plan, cluster, cost, program, prune);
    if (!report) {
      r.pruned = PruneReason::bound;
      r.detail = fmt::format("at most {:.0f} tokens/s per GPU (pipeline bound) < the {}th best found", bound_tps,
                             incumbents->k());
      return r;
    }
    r.report = std::move(*report);
  } catch (const Error& e) {
    r.pruned = error_reason(PruneReason::simulation, e.what(), plan.source);
    r.detail = e.what();
    return r;
  }
  r.has_memory = true;
  if (!within_memory(r, space)) return r;
  r.has_step = true;
  check_throughput(r, space, incumbents);
  return r;
}

SearchResult search(const Config& cfg, const SearchOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  SearchResult r;
  r.space = resolve_space(cfg);
  r.cluster = resolve_cluster(cfg);
  r.trust = prediction_trust(r.cluster.gpu);
  const ResolvedSpace& space = r.space;
  // The pp 1 space, decoded candidate by candidate (ResolvedSpace::candidate_at()): no list of the candidates.
  const size_t n_base = space.size();
  // search.pp_degrees without 1: only pipeline candidates (each enumerated candidate with a pp degree > 1).
  const bool plain = std::find(space.pp_degrees.begin(), space.pp_degrees.end(), 1) != space.pp_degrees.end();
  const size_t n_plain = plain ? n_base : 0;             // positions of the pp 1 candidates
  const int64_t total = plain ? space.candidates() : 0;  // with the ac_layers sweep's
  r.evaluated = static_cast<size_t>(total);
  r.threads = std::max(
      1, std::min<int>(o.threads > 0 ? o.threads : hardware_threads(), static_cast<int>(std::max<size_t>(n_base, 1))));

  // Branch-and-bound only where the tokens/s bound orders candidates as the objective does (sim/search/bound.h).
  const bool bound = o.bound_top > 0 &&
                     (space.objective == Objective::tokens_per_second || space.objective == Objective::cost_per_token);
  if (!bound && total > limits::max_search_candidates)
    throw Error(
        fmt::format("{}: {} candidates with search.ac_layers: a full ranking keeps every feasible one (at most "
                    "{}); use branch-and-bound (--bound), which keeps the top K and the Pareto front exact",
                    cfg.path, total, limits::max_search_candidates));
  Incumbents incumbents(o.bound_top);
  std::vector<AcLayersSweep> sweeps(static_cast<size_t>(r.threads));
  // Each worker's results: the statically pruned candidates counted, the others kept (sim/search/candidate_results.h).
  std::vector<CandidateResults::Part> parts(static_cast<size_t>(r.threads));
  std::vector<std::unique_ptr<CandidateEvaluator>> workers;
  for (int w = 0; w < r.threads; ++w) {
    workers.push_back(std::make_unique<CandidateEvaluator>(cfg, r.cluster, o.cost, space));
    workers.back()->static_details = false;  // dropped; rebuilt with their detail when read
    if (bound) workers.back()->incumbents = &incumbents;
  }
  // Tasks: the candidates that differ only in activation checkpointing and local batch size (consecutive: the two
  // innermost loops), one policy after the other, each smallest batch first. Every tensor of a Program grows or stays
  // with the local batch and the op list does not change, so peak memory is non-decreasing in it: once a batch misses
  // the budget, the policy's larger ones are pruned without lowering them (the brute-force test checks this too).
  const size_t n_batch = std::max<size_t>(space.local_batch_sizes.size(), 1);
  const size_t per_task = n_batch * std::max<size_t>(space.activation_checkpointing.size(), 1);
  std::vector<size_t> order(n_batch);
  for (size_t j = 0; j < n_batch; ++j) order[j] = j;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return space.local_batch_sizes[a] < space.local_batch_sizes[b]; });
  std::atomic<size_t> done{0};
  auto run_task = [&](size_t t, int w) {
    CandidateEvaluator& ev = *workers[static_cast<size_t>(w)];
    CandidateResults::Part& part = parts[static_cast<size_t>(w)];
    // The structure's unfinished Programs; with async TP on, its async-off sibling's when this worker kept them.
    const Candidate head = space.candidate_at(t * per_task);
    StructureLowering s;
    if (head.async_tp) s.unfinished = ev.take_async_sibling(head);
    const bool keep = ev.has_async_sibling(head);
    for (size_t first = t * per_task; first < (t + 1) * per_task; first += n_batch) {  // one policy
      std::optional<size_t> smaller_oom;  // into part.results: this policy's batch that missed the memory budget
      std::vector<char> oom_k;            // the ac_layers sweep's block counts that missed memory at a smaller batch
      s.last_policy = first + n_batch == (t + 1) * per_task && !keep;
      for (size_t j : order) {
        const size_t i = first + j;
        const Candidate c = space.candidate_at(i, head);
        if (!space.ac_layers.empty() && c.activation_checkpointing != ActivationCheckpointing::none) {
          ev.sweep_ac_layers(c, s.unfinished, oom_k, sweeps[static_cast<size_t>(w)]);
          done.fetch_add(space.ac_layers.size(), std::memory_order_relaxed);
        }
        if (space.max_local_batch_size > 0) {  // one candidate per policy (n_batch == 1): its largest fitting batch
          part.add(i, ev.evaluate_largest_fitting(c, space.max_local_batch_size, s.unfinished));
        } else if (smaller_oom) {
          // A static rule that depends on the batch (global_batch_size) names the reason first, as it would have
          // without the shortcut.
          if (Verdict v = check_static(cfg, r.cluster, space, c, false); !v.ok()) {
            part.drop(i, v.reason);
          } else {
            CandidateResult x;
            x.candidate = c;
            x.pruned = PruneReason::memory;
            const CandidateResult& smaller = part.results[*smaller_oom];
            x.detail = fmt::format("local batch {} already misses the memory budget ({})",
                                   smaller.candidate.local_batch_size, smaller.detail);
            part.add(i, std::move(x));
          }
        } else {
          CandidateResult x = ev.evaluate(c, s);
          const bool missed = x.pruned == PruneReason::memory;
          part.add(i, std::move(x));
          if (missed) smaller_oom = part.results.size() - 1;
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
  // Work units: the tasks that share (seq_len, tp, dp_replicate, cp, ep, family, float8), i.e. async TP off and on,
  // with and without loss parallel, in enumeration order on one worker, so that each async-off structure hands its
  // lowering to its async-on sibling (CandidateEvaluator::take_async_sibling()) whatever the thread count. Family f's
  // units hold async_tp x (its loss-parallel values) tasks each, float8 after float8; the families' units follow each
  // other within each (seq_len, tp, dp_replicate, cp, ep).
  const size_t n_f8 = space.float8.size(), n_async = space.async_tp.size();
  std::vector<size_t> family_tasks;  // tasks of one unit of each family
  for (const PlanFamily& f : space.families)
    family_tasks.push_back(n_async * (f.preset ? space.loss_parallel.size() : 1));
  std::vector<size_t> family_first(family_tasks.size() + 1, 0);  // first task of each family within an outer block
  for (size_t f = 0; f < family_tasks.size(); ++f) family_first[f + 1] = family_first[f] + n_f8 * family_tasks[f];
  const size_t outer_tasks = family_first.back();
  const size_t units_per_outer = space.families.size() * n_f8;
  const size_t tasks = plain ? n_base / per_task : 0;
  parallel_for(
      tasks / outer_tasks * units_per_outer, r.threads,
      [&](size_t u, int w) {
        const size_t f = u % units_per_outer / n_f8, f8 = u % n_f8;
        const size_t begin = u / units_per_outer * outer_tasks + family_first[f] + f8 * family_tasks[f];
        for (size_t t = begin; t < begin + family_tasks[f]; ++t) run_task(t, w);
      },
      progress);
  for (const auto& w : workers) {
    r.lowered += w->lowered;
    r.finished += w->finished;
    r.patched += w->patched;
    r.phases += w->phases;
  }
  // The pipeline candidates, after the others (their indices follow), each as `tp-plan simulate` predicts it
  // (simulate_pipeline(), sim/pipeline/step.h) unless a static rule prunes it. The candidates that share a microbatch
  // Program (shares_pipeline_program(): the same pp 1 candidate but for its local batch, pp degree and microbatch
  // size; the lists have no repeats) are one work unit, which costs it once (exact: the lowering reads none of what
  // they differ in); the units in the order of their first candidate, after every pp 1 candidate, so that the
  // incumbents hold the pp 1 space's best (and its front) before the first pipeline candidate is bounded
  // (PipelineBound, sim/pipeline/step.h); the feasible pipeline candidates join them.
  const size_t n_pipeline = space.pipeline_size();
  const int first_pipeline = static_cast<int>(n_plain);  // at most limits::max_search_candidates (resolve_space())
  r.evaluated += n_pipeline;
  std::atomic<size_t> pipeline_programs{0};
  if (n_pipeline > 0) {  // no worker threads for a space without pipelines
    const size_t n_pp = static_cast<size_t>(
        std::count_if(space.pp_degrees.begin(), space.pp_degrees.end(), [](int pp) { return pp > 1; }));
    const size_t n_kind = space.pp_schedules.size(), n_spr = space.pp_stages_per_rank.size(),
                 n_mbs = space.pp_microbatch_sizes.size();
    parallel_for(n_base / n_batch * n_pp * n_mbs, r.threads, [&](size_t u, int w) {
      CandidateResults::Part& part = parts[static_cast<size_t>(w)];
      const size_t mbs = u % n_mbs, pp = u / n_mbs % n_pp, block = u / (n_mbs * n_pp);
      SharedPipelineProgram shared;
      for (size_t b = block * n_batch; b < (block + 1) * n_batch; ++b)
        for (size_t kind = 0; kind < n_kind; ++kind)
          for (size_t spr = 0; spr < n_spr; ++spr) {
            const size_t k = (((b * n_pp + pp) * n_kind + kind) * n_spr + spr) * n_mbs + mbs;
            const Candidate c = space.pipeline_candidate_at(k, first_pipeline);
            if (Verdict v = check_static(cfg, r.cluster, space, c, false); !v.ok())
              part.drop(n_plain + k, v.reason);
            else
              part.add(n_plain + k, evaluate_pipeline_candidate(cfg, r.cluster, o.cost, space, c, &shared,
                                                                bound ? &incumbents : nullptr));
          }
      if (shared.costs || shared.error) pipeline_programs.fetch_add(1, std::memory_order_relaxed);
    });
  }
  r.pipeline_programs = pipeline_programs.load();
  // The results by position; a dropped one is rebuilt from its index and check_static() with its detail (its copies
  // of the config, cluster and space: the result may outlive `cfg`). With search.max_local_batch_size, a candidate a
  // static rule prunes was refused at batch 1: the bisection's answer passes the static rules unless it is 1
  // (evaluate_largest_fitting()).
  r.results = CandidateResults::merge(
      n_plain + n_pipeline, parts,
      [config = std::make_shared<const Config>(cfg), rebuild_space = std::make_shared<const ResolvedSpace>(space),
       cluster = std::make_shared<const ClusterSpec>(r.cluster), n_plain, first_pipeline](size_t position) {
        const ResolvedSpace& s = *rebuild_space;
        Candidate c =
            position < n_plain ? s.candidate_at(position) : s.pipeline_candidate_at(position - n_plain, first_pipeline);
        if (s.max_local_batch_size > 0) c.local_batch_size = 1;
        CandidateResult x;
        x.candidate = c;
        Verdict v = check_static(*config, *cluster, s, c);
        x.pruned = v.reason;
        x.detail = std::move(v.detail);
        return x;
      });
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
