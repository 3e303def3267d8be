#include "sim/search/eval.h"

#include <fmt/format.h>

#include <algorithm>

#include "plans/lower/incremental.h"
#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "sim/memory.h"
#include "sim/search/constraints.h"
#include "sim/timeline/timeline.h"

namespace tptune {

namespace {

constexpr double kGiB = 1073741824.0;

// The plan the search lowers: one microbatch (gradient accumulation 1), so that the candidates of one structure,
// whose accumulation steps differ with the local batch, share Programs (BatchProgram, AC and async-TP lowerings);
// evaluate_into() applies the candidate's steps to the report.
Plan microbatch_plan(const ResolvedSpace& s, Candidate c) {
  c.gradient_accumulation_steps = 1;
  return candidate_plan(s, c);
}

}  // namespace

bool fits_with_headroom(const MemoryReport& m, double headroom_gib) {
  return m.peak + headroom_gib * kGiB <= m.capacity;
}

bool within_memory(CandidateResult& r, const SearchSpace& space) {
  if (fits_with_headroom(r.report.memory, space.memory_headroom_gib)) return true;
  r.pruned = PruneReason::memory;
  r.detail = fmt::format("peak {:.1f} GiB + headroom {:g} GiB > {:.1f} GiB", r.report.memory.peak / kGiB,
                         space.memory_headroom_gib, r.report.memory.capacity / kGiB);
  return false;
}

void check_throughput(CandidateResult& r, const SearchSpace& space, Incumbents* incumbents) {
  if (r.report.tokens_per_second_per_gpu < space.min_tokens_per_second_per_gpu) {
    r.pruned = PruneReason::min_throughput;
    r.detail = fmt::format("{:.0f} tokens/s per GPU < {:g}", r.report.tokens_per_second_per_gpu,
                           space.min_tokens_per_second_per_gpu);
  } else if (incumbents) {
    incumbents->add(r.report.tokens_per_second_per_gpu, r.report.memory.peak);
  }
}

CandidateEvaluator::CandidateEvaluator(const Config& cfg, const ClusterSpec& cluster, const CostParams& cost,
                                       const ResolvedSpace& space)
    : cfg_(cfg), cluster_(cluster), cost_(cost), space_(space), training_(cfg.training) {
  // A Program is copied, not moved, when its vector grows (std::deque's move may throw).
  spare_.reserve(kSparePrograms);
}

const Training& CandidateEvaluator::training(const Candidate& c) {
  training_.seq_len = c.seq_len;
  return training_;
}

bool CandidateEvaluator::refused(CandidateResult& r, const Candidate& c) {
  PhaseTimer t(phases, SearchPhase::constraints);
  Verdict v = check_static(cfg_, cluster_, space_, c, static_details);
  if (v.ok()) return false;
  r.pruned = v.reason;
  r.detail = std::move(v.detail);
  return true;
}

bool CandidateEvaluator::evaluate_from_batch(CandidateResult& r, const Candidate& c, const Plan& plan,
                                             BatchState& batch) {
  if (batch.first && !batch.program && batch.first->plan.local_batch_size == c.local_batch_size &&
      batch.first->plan.activation_checkpointing == c.activation_checkpointing) {
    // largest_fitting_batch()'s Program at this batch size (its only probe, or its last one with lower_each).
    evaluate_into(r, *batch.first, plan.source, c.gradient_accumulation_steps);
    return true;
  }
  if (batch.second && !batch.program && !batch.lower_each) {
    PhaseTimer t(phases, SearchPhase::patch);
    // `plan` differs from the first two candidates' only in the local batch size, which at() sets.
    batch.program =
        BatchProgram::make(cfg_.model, training(c), plan, std::move(*batch.first), *batch.second, &batch.why_not);
    batch.program_from = batch.program ? batch.first_from : 0;
    batch.first.reset();
    recycle(std::move(*batch.second), batch.second_from);
    batch.second.reset();
    batch.lower_each = !batch.program;
  }
  if (!batch.program) return false;
  const Program* prog = nullptr;
  try {
    PhaseTimer t(phases, SearchPhase::patch);
    prog = &batch.program->at(c.local_batch_size);
    ++patched;
  } catch (const Error& e) {  // what lower() throws at this batch size (check_local_batch)
    r.pruned = error_reason(PruneReason::lowering, e.what(), plan.source);
    r.detail = e.what();
    return true;
  }
  evaluate_into(r, *prog, plan.source, c.gradient_accumulation_steps);
  return true;
}

CandidateResult CandidateEvaluator::evaluate(const Candidate& c, StructureLowering& s) {
  CandidateResult r;
  r.candidate = c;
  if (refused(r, c)) return r;
  const Plan plan = microbatch_plan(space_, c);
  BatchState& batch = s.batch;
  if (evaluate_from_batch(r, c, plan, batch)) return r;
  Program prog;
  uint64_t from = 0;  // the unfinished Program `prog` is finished from by finish_lowering_into()
  try {
    auto it = unfinished_at(s.unfinished, c, plan);
    PhaseTimer t(phases, SearchPhase::finish);
    uint64_t had = 0;
    // The last policy finishes into the Program an earlier one finished from it when there is one (only what
    // finishing changes is copied: finish_lowering_into()), else moves it (no copy).
    const bool into_spare = s.last_policy && std::any_of(spare_.begin(), spare_.end(),
                                                         [&](const Spare& x) { return x.from == it->second.id; });
    if (s.last_policy && !into_spare) {
      prog = finish_lowering(std::move(it->second), c.activation_checkpointing);
      s.unfinished.erase(it);
    } else if (s.last_policy) {
      prepare_async_tp(it->second);
      prog = take_program(it->second.id, &had);
      finish_lowering_into(it->second, c.activation_checkpointing, prog, -1, had);
      recycle(std::move(it->second.prog));  // (its buffers, for the next lowering)
      s.unfinished.erase(it);
    } else {
      prepare_async_tp(it->second);  // finished again: its policy-free async TP rewrite once
      prog = take_program(it->second.id, &had);
      finish_lowering_into(it->second, c.activation_checkpointing, prog, -1, had);
      from = it->second.id;
    }
    ++finished;
  } catch (const Error& e) {
    r.pruned = error_reason(PruneReason::lowering, e.what(), plan.source);
    r.detail = e.what();
    return r;
  }
  evaluate_into(r, prog, plan.source, c.gradient_accumulation_steps);
  if (!batch.lower_each && !batch.second) {
    (batch.first ? batch.second_from : batch.first_from) = from;
    (batch.first ? batch.second : batch.first) = std::move(prog);
    return r;
  }
  recycle(std::move(prog), from);
  return r;
}

CandidateResult CandidateEvaluator::evaluate_largest_fitting(const Candidate& c, int64_t limit,
                                                             UnfinishedByBatch& unfinished) {
  BatchState probes;
  CandidateResult r;
  r.candidate = c;
  r.candidate.local_batch_size = largest_fitting_batch(c, limit, probes, unfinished);
  const Candidate& at = r.candidate;
  if (!refused(r, at)) {
    const Plan plan = microbatch_plan(space_, at);
    if (!evaluate_from_batch(r, at, plan, probes)) {  // no probe at the answer (limit 1, or lower_each)
      try {
        Program prog;
        {
          PhaseTimer t(phases, SearchPhase::lower);
          prog = lower(cfg_.model, training(at), plan);
          ++lowered;
        }
        evaluate_into(r, prog, plan.source, at.gradient_accumulation_steps);
        recycle(std::move(prog));
      } catch (const Error& e) {
        r.pruned = error_reason(PruneReason::lowering, e.what(), plan.source);
        r.detail = e.what();
      }
    }
  }
  recycle(probes);
  return r;
}

CandidateResult CandidateEvaluator::evaluate_program(const Candidate& c, const Program& prog) {
  CandidateResult r;
  r.candidate = c;
  evaluate_into(r, prog, microbatch_plan(space_, c).source, c.gradient_accumulation_steps);
  return r;
}

void CandidateEvaluator::sweep_ac_layers(const Candidate& c, UnfinishedByBatch& unfinished, std::vector<char>& oom,
                                         AcLayersSweep& out) {
  const std::vector<int64_t>& ks = space_.ac_layers;
  if (ks.empty() || c.activation_checkpointing == ActivationCheckpointing::none) return;
  oom.resize(ks.size(), 0);
  auto prune_all = [&](const PruneCause& reason) { out.pruned[reason] += ks.size(); };
  if (Verdict v = check_static(cfg_, cluster_, space_, c, false); !v.ok()) return prune_all(v.reason);
  const int64_t L = cfg_.model.n_layers;
  if (cfg_.model.dense_first_blocks() > 0 && cfg_.model.dense_first_blocks() < L)  // (ks are all below L)
    return prune_all(PruneReason::moe_dense_ac_layers);
  if (std::all_of(oom.begin(), oom.end(), [](char x) { return x != 0; })) return prune_all(PruneReason::memory);
  const Plan plan = microbatch_plan(space_, c);
  try {
    PhaseTimer t(phases, SearchPhase::finish);
    auto it = unfinished_at(unfinished, c, plan);
    prepare_async_tp(it->second);
    finish_lowering_into(it->second, c.activation_checkpointing, sweep_, ks[0]);
    ++finished;
  } catch (const Error& e) {
    return prune_all(error_reason(PruneReason::lowering, e.what(), plan.source));
  }
  const bool split = has_split_backward(sweep_);
  MemoryParts parts;
  SplitStreamSums sums;
  try {
    check_supported(sweep_, cluster_);
    PhaseTimer t(phases, SearchPhase::cost);
    cost_ops(sweep_, cluster_, cost_, sweep_costs_);
    if (split) {
      parts = memory_parts(sweep_, cost_);
      sums = split_stream_sums(sweep_, sweep_costs_);
    }
  } catch (const Error& e) {
    return prune_all(error_reason(PruneReason::simulation, e.what(), plan.source));
  }
  const bool bound = incumbents && c.gradient_accumulation_steps <= 1;  // as evaluate_into()
  MemoryReport m;
  for (size_t i = 0; i < ks.size(); ++i) {
    const int64_t k = ks[i];
    if (oom[i]) {
      ++out.pruned[PruneReason::memory];
      continue;
    }
    if (split) {
      PhaseTimer t(phases, SearchPhase::sweep);
      parts.blocks = static_cast<int>(L - k);
      parts.checkpointed_blocks = static_cast<int>(k);
      m = memory_from_parts(parts, cluster_.gpu, cost_);  // == memory_model() of the Program at k
      if (!fits_with_headroom(m, space_.memory_headroom_gib)) {
        oom[i] = 1;
        ++out.pruned[PruneReason::memory];
        continue;
      }
      if (bound &&
          incumbents->dominates(tokens_per_second_upper_bound(sweep_, step_time_lower_bound_us(sums, L, k)), m.peak)) {
        ++out.pruned[PruneReason::bound];
        continue;
      }
      set_ac_layers(sweep_, k);
    } else {  // no recompute op (nothing to checkpoint): the Program is the same at every k but for plan.ac_layers
      sweep_.plan.ac_layers = k;
    }
    CandidateResult r;
    r.candidate = c;
    r.candidate.ac_layers = k;
    evaluate_into(r, sweep_, plan.source, c.gradient_accumulation_steps, &sweep_costs_, split ? &m : nullptr);
    if (r.feasible()) {
      out.kept.push_back(std::move(r));
    } else {
      if (r.pruned == PruneReason::memory) oom[i] = 1;
      ++out.pruned[r.pruned];
    }
  }
}

Program CandidateEvaluator::take_program(uint64_t want, uint64_t* from) {
  if (from) *from = 0;
  if (spare_.empty()) return Program();
  auto it = spare_.end() - 1;
  if (want != 0)
    for (auto s = spare_.begin(); s != spare_.end(); ++s)
      if (s->from == want) it = s;
  if (from) *from = it->from == want ? want : 0;
  Program p = std::move(it->prog);
  spare_.erase(it);
  return p;
}

void CandidateEvaluator::recycle(Program&& p, uint64_t from) {
  if (spare_.size() < kSparePrograms) spare_.push_back({std::move(p), from});
}

void CandidateEvaluator::recycle(BatchState& b) {
  if (b.first) recycle(std::move(*b.first), b.first_from);
  if (b.second) recycle(std::move(*b.second), b.second_from);
  if (b.program) recycle(std::move(*b.program).release_at_first(), b.program_from);
  b = BatchState();
}

void CandidateEvaluator::recycle(UnfinishedByBatch& u) {
  for (auto& [batch, p] : u) recycle(std::move(p.prog));
  u.clear();
}

namespace {
bool same_structure_but_async(const Candidate& a, const Candidate& b) {
  return a.seq_len == b.seq_len && a.tp_degree == b.tp_degree && a.dp_shard == b.dp_shard &&
         a.dp_replicate == b.dp_replicate && a.cp_degree == b.cp_degree && a.ep_degree == b.ep_degree &&
         a.family == b.family && a.float8 == b.float8 && a.loss_parallel == b.loss_parallel;
}
}  // namespace

bool CandidateEvaluator::has_async_sibling(const Candidate& c) const {
  if (c.async_tp || c.tp_degree <= 1 ||
      std::find(space_.async_tp.begin(), space_.async_tp.end(), true) == space_.async_tp.end())
    return false;
  Candidate on = c;
  on.async_tp = true;
  return check_static(cfg_, cluster_, space_, on, false).ok();
}

void CandidateEvaluator::keep_for_async_sibling(const Candidate& c, UnfinishedByBatch&& u) {
  if (siblings_.size() == kKeptSiblings) {
    recycle(siblings_.front().second);
    siblings_.erase(siblings_.begin());
  }
  siblings_.emplace_back(c, std::move(u));
  u.clear();
}

UnfinishedByBatch CandidateEvaluator::take_async_sibling(const Candidate& c) {
  UnfinishedByBatch out;
  auto it = std::find_if(siblings_.begin(), siblings_.end(), [&](const auto& s) {
    return !s.first.async_tp && c.async_tp && same_structure_but_async(s.first, c);
  });
  if (it == siblings_.end()) return out;
  out = std::move(it->second);
  siblings_.erase(it);
  PhaseTimer t(phases, SearchPhase::lower);
  for (auto u = out.begin(); u != out.end();) {
    Candidate x = c;
    x.local_batch_size = u->first;
    try {
      u->second = unfinished_with_async_tp(std::move(u->second), cfg_.model, training(x), microbatch_plan(space_, x));
      ++u;
    } catch (const Error&) {
      u = out.erase(u);
    }
  }
  return out;
}

UnfinishedByBatch::iterator CandidateEvaluator::unfinished_at(UnfinishedByBatch& unfinished, const Candidate& c,
                                                              const Plan& plan) {
  auto it = unfinished.find(c.local_batch_size);
  if (it == unfinished.end()) {
    PhaseTimer t(phases, SearchPhase::lower);
    // Without names (lower_unfinished()): the search never shows a candidate's ops, and their names cost a large part
    // of lowering, finishing, copying and freeing a Program. An error is reported as lower() words it: lowered again
    // with names.
    UnfinishedProgram u;
    try {
      u = lower_unfinished(cfg_.model, training(c), plan, take_program(), /*names=*/false);
    } catch (const Error&) {
      u = lower_unfinished(cfg_.model, training(c), plan);  // throws lower()'s message
    }
    it = unfinished.emplace(c.local_batch_size, std::move(u)).first;
    ++lowered;
  }
  return it;
}

const Program& CandidateEvaluator::program_at(const Candidate& c, BatchState& batch, UnfinishedByBatch& unfinished) {
  if (batch.program) {
    PhaseTimer t(phases, SearchPhase::patch);
    ++patched;
    return batch.program->at(c.local_batch_size);  // throws what lower() throws at this batch size
  }
  const Plan plan = microbatch_plan(space_, c);
  Program p;
  uint64_t from = 0;  // the unfinished Program `p` is finished from
  {
    auto it = unfinished_at(unfinished, c, plan);
    PhaseTimer t(phases, SearchPhase::finish);
    prepare_async_tp(it->second);
    uint64_t had = 0;
    p = take_program(it->second.id, &had);
    finish_lowering_into(it->second, c.activation_checkpointing, p, -1, had);
    from = it->second.id;
    ++finished;
  }
  if (batch.lower_each || !batch.first) {  // with lower_each: the scratch Program of this probe
    batch.first = std::move(p);
    batch.first_from = from;
    return *batch.first;
  }
  PhaseTimer t(phases, SearchPhase::patch);
  batch.program = BatchProgram::make(cfg_.model, training(c), plan, std::move(*batch.first), p, &batch.why_not);
  batch.program_from = batch.program ? batch.first_from : 0;
  batch.first.reset();
  if (!batch.program) {
    batch.lower_each = true;
    batch.first = std::move(p);
    batch.first_from = from;
    return *batch.first;
  }
  recycle(std::move(p), from);
  ++patched;
  return batch.program->at(c.local_batch_size);
}

int64_t CandidateEvaluator::largest_fitting_batch(const Candidate& c, int64_t limit, BatchState& probes,
                                                  UnfinishedByBatch& unfinished) {
  auto fits = [&](int64_t b) {
    Candidate x = c;
    x.local_batch_size = b;
    if (!check_static(cfg_, cluster_, space_, x, false).ok()) return false;
    try {
      const Program& p = program_at(x, probes, unfinished);
      check_supported(p, cluster_);
      PhaseTimer t(phases, SearchPhase::memory);
      return fits_with_headroom(memory_model(p, cluster_.gpu, cost_), space_.memory_headroom_gib);
    } catch (const Error&) {
      return false;
    }
  };
  return largest_fitting(limit, fits);
}

void CandidateEvaluator::evaluate_into(CandidateResult& r, const Program& prog, const std::string& plan_source,
                                       int64_t gradient_accumulation_steps, const OpCosts* known_costs,
                                       const MemoryReport* known_memory) {
  try {
    check_supported(prog, cluster_);
    if (known_memory) {
      r.report.memory = *known_memory;
    } else {
      PhaseTimer t(phases, SearchPhase::memory);
      r.report.memory = memory_model(prog, cluster_.gpu, cost_);
    }
    r.has_memory = true;
    if (!within_memory(r, space_)) return;
    if (!known_costs) {
      PhaseTimer t(phases, SearchPhase::cost);
      cost_ops(prog, cluster_, cost_, costs_);
    }
    const OpCosts& costs = known_costs ? *known_costs : costs_;
    if (incumbents && gradient_accumulation_steps <= 1) {  // the bound is one microbatch's: not applied with ga > 1
      const double ub = tokens_per_second_upper_bound(prog, step_time_lower_bound_us(prog, costs));
      if (incumbents->dominates(ub, r.report.memory.peak)) {
        r.pruned = PruneReason::bound;
        r.detail =
            fmt::format("at most {:.0f} tokens/s per GPU (op-cost bound) < the {}th best found", ub, incumbents->k());
        return;
      }
    }
    Timeline tl;
    {
      PhaseTimer t(phases, SearchPhase::schedule);
      tl = schedule(prog, costs, cost_, schedule_cache_);
    }
    PhaseTimer t(phases, SearchPhase::report);
    r.report = make_report(prog, cluster_, costs, tl, r.report.memory, 0, gradient_accumulation_steps);
    r.has_step = true;
    check_throughput(r, space_, incumbents);
  } catch (const Error& e) {
    r.pruned = error_reason(PruneReason::simulation, e.what(), plan_source);
    r.detail = e.what();
  }
}

}  // namespace tptune
