#include "sim/search/eval.h"

#include <fmt/format.h>

#include <algorithm>

#include "plans/error.h"
#include "plans/lower.h"
#include "sim/memory.h"
#include "sim/search/constraints.h"
#include "sim/shared_machine.h"
#include "sim/timeline.h"

namespace tptune {

namespace {

constexpr double kGiB = 1073741824.0;

int64_t dtype_of(const Program& p, const std::vector<TensorId>& ts) {
  return ts.empty() ? -1 : static_cast<int64_t>(p.tensor(ts[0]).dtype);
}

// The plan the search lowers: one microbatch (gradient accumulation 1), so that the candidates of one structure,
// whose accumulation steps differ with the local batch, share Programs (BatchProgram, AC and async-TP lowerings);
// evaluate_program() applies the candidate's steps to the report.
Plan microbatch_plan(const ResolvedSpace& s, Candidate c) {
  c.gradient_accumulation_steps = 1;
  return candidate_plan(s, c);
}

}  // namespace

size_t OpKeyHash::operator()(const OpKey& k) const {
  // 64-bit mix of every field (splitmix64 finalizer over a running combination).
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (int64_t x : k.v) {
    h ^= static_cast<uint64_t>(x) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
    h ^= h >> 31;
  }
  return static_cast<size_t>(h);
}

OpKey op_key(const Op& op, const Program& p) {
  OpKey k;
  auto& v = k.v;
  v[0] = static_cast<int64_t>(op.kind.index());
  v[1] = dtype_of(p, op.inputs);   // compute_cost reads the first input's dtype (attention, loss, casts)
  v[2] = dtype_of(p, op.outputs);  // ... and the first output's (embedding)
  // The fallback dtype when an op has no tensors, and the program-wide switches compute_cost reads: compile (fused
  // elementwise traffic, fused amax) and rowwise float8 (the rowwise GEMM factor).
  v[3] = static_cast<int64_t>(p.training.dtype) | (p.training.compiled(p.plan.async_tp) ? 1 << 8 : 0) |
         (is_rowwise(p.plan.float8) ? 1 << 9 : 0);
  v[4] = static_cast<int64_t>(op.chunk.pattern);
  v[5] = op.chunk.step;
  v[6] = op.chunk.count;
  std::visit(
      [&](const auto& o) {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, GemmOp>) {
          v[7] = o.m, v[8] = o.n, v[9] = o.k;
          v[10] = static_cast<int64_t>(o.a_dtype), v[11] = static_cast<int64_t>(o.b_dtype);
          v[12] = static_cast<int64_t>(o.c_dtype);
          v[13] = (o.trans_a ? 1 : 0) | (o.trans_b ? 2 : 0) | (o.accumulate ? 4 : 0);
        } else if constexpr (std::is_same_v<T, AttentionOp>) {
          v[7] = o.batch, v[8] = o.seq, v[9] = o.n_heads, v[10] = o.n_kv_heads, v[11] = o.head_dim;
          v[12] = (o.causal ? 1 : 0) | (o.backward ? 2 : 0);
        } else if constexpr (std::is_same_v<T, ElementwiseOp>) {
          v[7] = static_cast<int64_t>(o.fn), v[8] = o.bytes, v[9] = o.flops, v[10] = o.dim;
        } else if constexpr (std::is_same_v<T, EmbeddingOp>) {
          v[7] = o.tokens, v[8] = o.vocab_local, v[9] = o.dim_local;
          v[10] = (o.vocab_sharded ? 1 : 0) | (o.backward ? 2 : 0);
        } else if constexpr (std::is_same_v<T, CrossEntropyOp>) {
          v[7] = static_cast<int64_t>(o.stage), v[8] = o.tokens, v[9] = o.vocab_local, v[10] = o.vocab_sharded;
        } else if constexpr (std::is_same_v<T, CastFp8Op>) {
          v[7] = static_cast<int64_t>(o.stage), v[8] = static_cast<int64_t>(o.to), v[9] = o.elements;
          v[10] = o.rowwise;
        } else if constexpr (std::is_same_v<T, CollectiveOp>) {
          v[7] = static_cast<int64_t>(o.kind), v[8] = static_cast<int64_t>(o.group);
          v[9] = static_cast<int64_t>(o.reduce), v[10] = static_cast<int64_t>(o.dtype), v[11] = o.bytes;
          v[12] = o.gather_dim, v[13] = o.scatter_dim;
          // The group layout on the cluster: tp, dp_shard and (HSDP) dp_replicate, each at most 2^20.
          v[14] = p.tp | (static_cast<int64_t>(p.dp_replicate) << 32), v[15] = p.dp;
        }
      },
      op.kind);
  return k;
}

bool fits_with_headroom(const MemoryReport& m, double headroom_gib) {
  return m.peak + headroom_gib * kGiB <= m.capacity;
}

CandidateEvaluator::CandidateEvaluator(const Config& cfg, const ClusterSpec& cluster, const CostParams& cost,
                                       const ResolvedSpace& space)
    : cfg_(cfg),
      cluster_(cluster),
      cost_(cost),
      space_(space),
      training_(cfg.training),
      priced_(at_shared_rates(cluster, cost)),
      compute_slowdown_(oversubscription_slowdown(cluster, cost)) {}

const Training& CandidateEvaluator::training(const Candidate& c) {
  training_.seq_len = c.seq_len;
  return training_;
}

OpCosts CandidateEvaluator::cost_ops(const Program& p) {
  if (!use_memo) return tptune::cost_ops(p, cluster_, cost_);
  OpCosts out;
  out.duration_us.reserve(p.segments.size());
  for (const Segment& s : p.segments) {
    std::vector<double> d;
    d.reserve(s.ops.size());
    for (const Op& op : s.ops) {
      OpKey k = op_key(op, p);
      auto [it, inserted] = memo_.try_emplace(k, 0.0);
      if (inserted) {
        it->second = priced_op_duration_us(op, p, priced_, compute_slowdown_, cost_);  // as tptune::cost_ops()
        ++misses_;
      } else {
        ++hits_;
      }
      d.push_back(it->second);
    }
    out.duration_us.push_back(std::move(d));
  }
  return out;
}

CandidateResult CandidateEvaluator::evaluate(const Candidate& c, BatchState* batch, UnfinishedByBatch* unfinished,
                                             bool last_use) {
  CandidateResult r;
  r.candidate = c;
  {
    PhaseTimer t(phases, SearchPhase::constraints);
    if (Verdict v = check_static(cfg_, cluster_, space_, c); !v.ok()) {
      r.pruned = v.reason;
      r.detail = std::move(v.detail);
      return r;
    }
  }
  const Plan plan = microbatch_plan(space_, c);
  if (batch && batch->first && !batch->program && batch->first->plan.local_batch_size == c.local_batch_size &&
      batch->first->plan.activation_checkpointing == c.activation_checkpointing) {
    // largest_fitting_batch()'s Program at this batch size (its only probe, or one lowered with lower_each).
    evaluate_program(r, *batch->first, plan.source, c.gradient_accumulation_steps);
    return r;
  }
  if (batch && batch->second && !batch->program && !batch->lower_each) {
    PhaseTimer t(phases, SearchPhase::patch);
    // `plan` differs from the first two candidates' only in the local batch size, which at() sets.
    batch->program =
        BatchProgram::make(cfg_.model, training(c), plan, std::move(*batch->first), *batch->second, &batch->why_not);
    batch->first.reset();
    recycle(std::move(*batch->second));
    batch->second.reset();
    batch->lower_each = !batch->program;
  }
  if (batch && batch->program) {
    const Program* prog = nullptr;
    try {
      PhaseTimer t(phases, SearchPhase::patch);
      prog = &batch->program->at(c.local_batch_size);
      ++patched;
    } catch (const Error& e) {  // what lower() throws at this batch size (check_local_batch)
      r.pruned = error_reason("lowering", e.what(), plan.source);
      r.detail = e.what();
      return r;
    }
    evaluate_program(r, *prog, plan.source, c.gradient_accumulation_steps);
    return r;
  }
  Program prog;
  try {
    if (unfinished) {
      auto it = unfinished_at(*unfinished, c, plan);
      PhaseTimer t(phases, SearchPhase::finish);
      if (!last_use) prepare_async_tp(it->second);  // finished again: its policy-free async TP rewrite once
      if (last_use) {
        prog = finish_lowering(std::move(it->second), c.activation_checkpointing);
        unfinished->erase(it);
      } else {
        prog = take_program();
        finish_lowering_into(it->second, c.activation_checkpointing, prog);
      }
      ++finished;
    } else {
      PhaseTimer t(phases, SearchPhase::lower);
      prog = lower(cfg_.model, training(c), plan);
      ++lowered;
    }
  } catch (const Error& e) {
    r.pruned = error_reason("lowering", e.what(), plan.source);
    r.detail = e.what();
    return r;
  }
  evaluate_program(r, prog, plan.source, c.gradient_accumulation_steps);
  if (batch && !batch->lower_each && !batch->second) {
    (batch->first ? batch->second : batch->first) = std::move(prog);
    return r;
  }
  recycle(std::move(prog));
  return r;
}

void CandidateEvaluator::sweep_ac_layers(const Candidate& c, UnfinishedByBatch* unfinished, std::vector<char>& oom,
                                         AcLayersSweep& out) {
  const std::vector<int64_t>& ks = space_.ac_layers;
  if (ks.empty() || c.activation_checkpointing == ActivationCheckpointing::none) return;
  oom.resize(ks.size(), 0);
  auto prune_all = [&](const std::string& reason) { out.pruned[reason] += ks.size(); };
  if (Verdict v = check_static(cfg_, cluster_, space_, c); !v.ok()) return prune_all(v.reason);
  if (std::all_of(oom.begin(), oom.end(), [](char x) { return x != 0; })) return prune_all(prune::kMemory);
  const Plan plan = microbatch_plan(space_, c);
  const int64_t L = cfg_.model.n_layers;
  UnfinishedByBatch local;
  try {
    PhaseTimer t(phases, SearchPhase::finish);
    auto it = unfinished_at(unfinished ? *unfinished : local, c, plan);
    prepare_async_tp(it->second);
    finish_lowering_into(it->second, c.activation_checkpointing, sweep_, ks[0]);
    ++finished;
  } catch (const Error& e) {
    recycle(local);
    return prune_all(error_reason("lowering", e.what(), plan.source));
  }
  recycle(local);
  const bool split = has_split_backward(sweep_);
  MemoryParts parts;
  SplitStreamSums sums;
  try {
    check_supported(sweep_, cluster_);
    PhaseTimer t(phases, SearchPhase::cost);
    sweep_costs_ = cost_ops(sweep_);
    if (split) {
      parts = memory_parts(sweep_, cost_);
      sums = split_stream_sums(sweep_, sweep_costs_);
    }
  } catch (const Error& e) {
    return prune_all(error_reason("simulation", e.what(), plan.source));
  }
  const bool bound = incumbents && c.gradient_accumulation_steps <= 1;  // as evaluate_program()
  MemoryReport m;
  for (size_t i = 0; i < ks.size(); ++i) {
    const int64_t k = ks[i];
    if (oom[i]) {
      ++out.pruned[prune::kMemory];
      continue;
    }
    if (split) {
      PhaseTimer t(phases, SearchPhase::sweep);
      parts.blocks = static_cast<int>(L - k);
      parts.checkpointed_blocks = static_cast<int>(k);
      m = memory_from_parts(parts, cluster_.gpu, cost_);  // == memory_model() of the Program at k
      if (!fits_with_headroom(m, space_.memory_headroom_gib)) {
        oom[i] = 1;
        ++out.pruned[prune::kMemory];
        continue;
      }
      if (bound &&
          incumbents->dominates(tokens_per_second_upper_bound(sweep_, step_time_lower_bound_us(sums, L, k)), m.peak)) {
        ++out.pruned[prune::kBound];
        continue;
      }
      set_ac_layers(sweep_, k);
    } else {  // no recompute op (nothing to checkpoint): the Program is the same at every k but for plan.ac_layers
      sweep_.plan.ac_layers = k;
    }
    CandidateResult r;
    r.candidate = c;
    r.candidate.ac_layers = k;
    evaluate_program(r, sweep_, plan.source, c.gradient_accumulation_steps, &sweep_costs_, split ? &m : nullptr);
    if (r.feasible()) {
      out.kept.push_back(std::move(r));
    } else {
      if (r.pruned == prune::kMemory) oom[i] = 1;
      ++out.pruned[r.pruned];
    }
  }
}

Program CandidateEvaluator::take_program() {
  if (spare_.empty()) return Program();
  Program p = std::move(spare_.back());
  spare_.pop_back();
  return p;
}

void CandidateEvaluator::recycle(Program&& p) {
  if (spare_.size() < kSparePrograms) spare_.push_back(std::move(p));
}

void CandidateEvaluator::recycle(BatchState& b) {
  if (b.first) recycle(std::move(*b.first));
  if (b.second) recycle(std::move(*b.second));
  if (b.program) recycle(std::move(*b.program).release());
  b = BatchState();
}

void CandidateEvaluator::recycle(UnfinishedByBatch& u) {
  for (auto& [batch, p] : u) recycle(std::move(p.prog));
  u.clear();
}

namespace {
bool same_structure_but_async(const Candidate& a, const Candidate& b) {
  return a.seq_len == b.seq_len && a.tp_degree == b.tp_degree && a.dp_shard == b.dp_shard &&
         a.dp_replicate == b.dp_replicate && a.family == b.family && a.float8 == b.float8 &&
         a.loss_parallel == b.loss_parallel;
}
}  // namespace

bool CandidateEvaluator::has_async_sibling(const Candidate& c) const {
  if (c.async_tp || c.tp_degree <= 1 ||
      std::find(space_.async_tp.begin(), space_.async_tp.end(), true) == space_.async_tp.end())
    return false;
  Candidate on = c;
  on.async_tp = true;
  return check_static(cfg_, cluster_, space_, on).ok();
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

const Program& CandidateEvaluator::program_at(const Candidate& c, BatchState& batch, UnfinishedByBatch* unfinished) {
  if (batch.program) {
    PhaseTimer t(phases, SearchPhase::patch);
    ++patched;
    return batch.program->at(c.local_batch_size);  // throws what lower() throws at this batch size
  }
  const Plan plan = microbatch_plan(space_, c);
  Program p = take_program();
  if (unfinished) {
    auto it = unfinished_at(*unfinished, c, plan);
    PhaseTimer t(phases, SearchPhase::finish);
    prepare_async_tp(it->second);
    finish_lowering_into(it->second, c.activation_checkpointing, p);
    ++finished;
  } else {
    PhaseTimer t(phases, SearchPhase::lower);
    p = lower(cfg_.model, training(c), plan);
    ++lowered;
  }
  if (batch.lower_each) {
    batch.first = std::move(p);  // the scratch Program of this probe
    return *batch.first;
  }
  if (!batch.first) {
    batch.first = std::move(p);
    return *batch.first;
  }
  PhaseTimer t(phases, SearchPhase::patch);
  batch.program = BatchProgram::make(cfg_.model, training(c), plan, std::move(*batch.first), p, &batch.why_not);
  batch.first.reset();
  if (!batch.program) {
    batch.lower_each = true;
    batch.first = std::move(p);
    return *batch.first;
  }
  recycle(std::move(p));
  ++patched;
  return batch.program->at(c.local_batch_size);
}

int64_t CandidateEvaluator::largest_fitting_batch(const Candidate& c, int64_t limit, BatchState* batch,
                                                  UnfinishedByBatch* unfinished) {
  BatchState lower_each;  // without `batch`: every probe lowered (the reference the tests compare against)
  lower_each.lower_each = true;
  BatchState& bs = batch ? *batch : lower_each;
  auto fits = [&](int64_t b) {
    Candidate x = c;
    x.local_batch_size = b;
    if (!check_static(cfg_, cluster_, space_, x).ok()) return false;
    try {
      const Program& p = program_at(x, bs, unfinished);
      check_supported(p, cluster_);
      PhaseTimer t(phases, SearchPhase::memory);
      return fits_with_headroom(memory_model(p, cluster_.gpu, cost_), space_.memory_headroom_gib);
    } catch (const Error&) {
      return false;
    }
  };
  int64_t lo = 1;
  if (limit > 1 && fits(1)) {
    int64_t hi = limit + 1;  // fits(lo); hi == limit + 1 or !fits(hi)
    while (hi - lo > 1) {
      const int64_t mid = lo + (hi - lo) / 2;
      (fits(mid) ? lo : hi) = mid;
    }
  }
  if (!batch) recycle(lower_each);
  return lo;
}

void CandidateEvaluator::evaluate_program(CandidateResult& r, const Program& prog, const std::string& plan_source,
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
    if (!fits_with_headroom(r.report.memory, space_.memory_headroom_gib)) {
      r.pruned = prune::kMemory;
      r.detail = fmt::format("peak {:.1f} GiB + headroom {:g} GiB > {:.1f} GiB", r.report.memory.peak / kGiB,
                             space_.memory_headroom_gib, r.report.memory.capacity / kGiB);
      return;
    }
    OpCosts own;
    if (!known_costs) {
      PhaseTimer t(phases, SearchPhase::cost);
      own = cost_ops(prog);
    }
    const OpCosts& costs = known_costs ? *known_costs : own;
    if (incumbents && gradient_accumulation_steps <= 1) {  // the bound is one microbatch's: not applied with ga > 1
      const double ub = tokens_per_second_upper_bound(prog, step_time_lower_bound_us(prog, costs));
      if (incumbents->dominates(ub, r.report.memory.peak)) {
        r.pruned = prune::kBound;
        r.detail =
            fmt::format("at most {:.0f} tokens/s per GPU (op-cost bound) < the {}th best found", ub, incumbents->k());
        return;
      }
    }
    Timeline tl;
    {
      PhaseTimer t(phases, SearchPhase::schedule);
      tl = schedule(prog, costs, cost_);
    }
    PhaseTimer t(phases, SearchPhase::report);
    r.report = make_report(prog, cluster_, costs, tl, r.report.memory, 0, gradient_accumulation_steps);
    r.has_step = true;
    if (r.report.tokens_per_second_per_gpu < space_.min_tokens_per_second_per_gpu) {
      r.pruned = prune::kMinThroughput;
      r.detail = fmt::format("{:.0f} tokens/s per GPU < {:g}", r.report.tokens_per_second_per_gpu,
                             space_.min_tokens_per_second_per_gpu);
    } else if (incumbents) {
      incumbents->add(r.report.tokens_per_second_per_gpu, r.report.memory.peak);
    }
  } catch (const Error& e) {
    r.pruned = error_reason("simulation", e.what(), plan_source);
    r.detail = e.what();
  }
}

}  // namespace tptune
