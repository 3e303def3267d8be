// One pp rank running its pipeline schedule; see run.h.
#include "runtime/pipeline/run.h"

#include <fmt/format.h>

#include <cstdlib>
#include <iterator>
#include <map>
#include <tuple>

#include "plans/util/enum_names.h"
#include "plans/util/error.h"

namespace tptune {
namespace {

// The segment each flat op of `p` belongs to (FlatOp::op points into p's segments).
std::vector<SegmentKind> segment_kinds(const Program& p, const FlatProgram& flat) {
  std::vector<SegmentKind> kinds;
  kinds.reserve(flat.ops.size());
  for (const FlatOp& f : flat.ops) {
    const Segment* seg = nullptr;
    for (const Segment& s : p.segments)
      if (!s.ops.empty() && f.op >= s.ops.data() && f.op < s.ops.data() + s.ops.size()) seg = &s;
    if (!seg) throw Error(fmt::format("pipeline: flat op {} belongs to no segment", f.name));
    kinds.push_back(seg->kind);
  }
  return kinds;
}

// An op's identity across the stage's Program and the microbatch Program: its segment, layer, name and how many ops
// of that segment instance share the name before it.
using OpKey = std::tuple<SegmentKind, int, std::string, int>;
std::vector<OpKey> op_keys(const FlatProgram& flat, const std::vector<SegmentKind>& kinds) {
  std::map<std::tuple<SegmentKind, int, std::string>, int> seen;
  std::vector<OpKey> keys;
  for (size_t i = 0; i < flat.ops.size(); ++i) {
    const FlatOp& f = flat.ops[i];
    keys.emplace_back(kinds[i], f.layer, f.name, seen[{kinds[i], f.layer, f.name}]++);
  }
  return keys;
}

}  // namespace

// PipelineStep::Kind's letters, in declaration order (torch's _ComputationType values).
constexpr std::string_view kStepLetters[] = {"F", "B", "I", "W"};
static_assert(std::size(kStepLetters) == enum_count(PipelineStep::Kind::weight_grad));

std::string_view to_letter(PipelineStep::Kind k) { return name_of(kStepLetters, k); }

PipelineExecution::PipelineExecution(const Program& microbatch, Backend& backend, const PipelineRun& run, uint64_t seed)
    : run_(run), microbatch_(microbatch) {
  const int S = int(run.stages.size());
  if (S == 0 || run.microbatches < 1)
    throw Error(fmt::format("pipeline: expected stages and microbatches, got {} stages and {} microbatches", S,
                            run.microbatches));
  int pp = 1;
  if (run.pp != MPI_COMM_NULL) MPI_Comm_size(run.pp, &pp);
  if (backend.group_size(Group::pp) != pp)
    throw Error(fmt::format("pipeline: the backend's pipeline group has {} ranks, the pp group {}",
                            backend.group_size(Group::pp), pp));
  for (const PipelineStageSpan& sp : run.stages)
    if (sp.rank < 0 || sp.rank >= pp)
      throw Error(fmt::format("pipeline: a stage on pp rank {} of a pp group of {}", sp.rank, pp));
  for (const PipelineStep& a : run.actions)
    if (a.stage < 0 || a.stage >= S || a.microbatch < 0 || a.microbatch >= run.microbatches ||
        run.stages[size_t(a.stage)].rank != run.pp_rank)
      throw Error(
          fmt::format("pipeline: action on stage {} microbatch {} is not this rank's ({} stages, {} "
                      "microbatches, pp rank {})",
                      a.stage, a.microbatch, S, run.microbatches, run.pp_rank));
  // The stages as lowered: the layout checked whole, then (a planted fault) shifted.
  lower_pipeline_stage(microbatch, run.stages, 0);  // checks that the stages cover the model in order
  std::vector<PipelineStageSpan> spans = run.stages;
  if (run.fault == PipelineFault::shifted_boundary)
    for (size_t s = 1; s < spans.size(); ++s)
      if (spans[s].layers > 0) ++spans[s].first_layer, --spans[s].layers;

  microbatch_flat_ = expand(microbatch_);
  const std::vector<SegmentKind> mb_kinds = segment_kinds(microbatch_, microbatch_flat_);
  std::map<OpKey, int> mb_index;
  {
    const std::vector<OpKey> keys = op_keys(microbatch_flat_, mb_kinds);
    for (size_t i = 0; i < keys.size(); ++i) mb_index[keys[i]] = int(i);
  }
  for (int s = 0; s < S; ++s) {
    if (run.stages[size_t(s)].rank != run.pp_rank) continue;
    local_stages_.push_back(s);
    LocalStage ls;
    ls.stage = s;
    const Program stage = lower_pipeline_stage(microbatch, spans, s, false);
    for (int m = 0; m < run.microbatches; ++m) {
      ExecutorOptions opts;
      opts.run_optimizer = false;
      opts.pp_microbatch = m;
      ls.executors.push_back(std::make_unique<Executor>(stage, backend, opts));
      ls.executors.back()->init(seed);
    }
    const Executor& e = *ls.executors.front();
    ls.kind = segment_kinds(e.program(), e.flat());
    for (const OpKey& k : op_keys(e.flat(), ls.kind)) {
      auto it = is_pipeline_transfer(std::get<0>(k)) ? mb_index.end() : mb_index.find(k);
      ls.microbatch_op.push_back(it == mb_index.end() ? -1 : it->second);
    }
    locals_.push_back(std::move(ls));
  }
}

PipelineExecution::LocalStage& PipelineExecution::local(int stage) {
  for (LocalStage& ls : locals_)
    if (ls.stage == stage) return ls;
  throw Error(fmt::format("pipeline: stage {} is not pp rank {}'s", stage, run_.pp_rank));
}

Executor* PipelineExecution::executor(int stage, int m) {
  for (LocalStage& ls : locals_)
    if (ls.stage == stage) return ls.executors.at(size_t(m)).get();
  return nullptr;
}

int PipelineExecution::stage_of(const std::string& name) const {
  const auto& stages = run_.stages;
  if (name.rfind("layers.", 0) == 0) {
    const int layer = std::atoi(name.c_str() + 7);
    for (size_t s = 0; s < stages.size(); ++s)
      if (layer >= stages[s].first_layer && layer < stages[s].first_layer + stages[s].layers) return int(s);
    throw Error(fmt::format("pipeline: no stage holds {}", name));
  }
  return name.rfind("tok_embeddings", 0) == 0 ? 0 : int(stages.size()) - 1;
}

// The ops of a forward or backward action: its receive alone, or the rest of its segments (the head's ops by phase).
std::function<bool(int)> PipelineExecution::ops_of(const LocalStage& ls, bool forward, bool receive) const {
  const FlatProgram& flat = ls.executors.front()->flat();
  return [&ls, &flat, forward, receive](int i) {
    switch (ls.kind[size_t(i)]) {
      case SegmentKind::pp_recv_fwd:
        return receive && forward;
      case SegmentKind::pp_recv_bwd:
        return receive && !forward;
      case SegmentKind::embed_fwd:
      case SegmentKind::block_fwd:
      case SegmentKind::pp_send_fwd:
        return !receive && forward;
      case SegmentKind::block_bwd:
      case SegmentKind::pp_send_bwd:
      case SegmentKind::embed_bwd:
        return !receive && !forward;
      case SegmentKind::head:
        return !receive && (flat.ops[size_t(i)].op->phase == Phase::backward) != forward;
      case SegmentKind::grad_norm:
      case SegmentKind::block_optimizer:
      case SegmentKind::optimizer:
        return false;
    }
    return false;
  };
}

void PipelineExecution::run_schedule(const ActionFn& on_action, const Executor::OpTimeFn& on_op) {
  const int M = run_.microbatches;
  for (size_t k = 0; k < run_.actions.size(); ++k) {
    const PipelineStep& a = run_.actions[k];
    if (run_.fault == PipelineFault::dropped_microbatch && a.microbatch == M - 1) continue;
    LocalStage& ls = local(a.stage);
    Executor& e = *ls.executors.at(size_t(a.microbatch));
    Executor::OpTimeFn timed;
    if (on_op)
      timed = [&](int op, double us) {
        if (const int mb_op = ls.microbatch_op[size_t(op)]; mb_op >= 0) on_op(mb_op, us);
      };
    ActionTime t;
    t.start = MPI_Wtime();
    if (a.kind == PipelineStep::Kind::weight_grad) {
      t.compute = t.start;  // computed with the input gradient
    } else {
      const bool forward = a.kind == PipelineStep::Kind::forward;
      e.run_ops(ops_of(ls, forward, true));
      t.compute = MPI_Wtime();
      e.run_ops(ops_of(ls, forward, false), timed);
    }
    t.end = MPI_Wtime();
    if (on_action) on_action(k, t);
  }
  for (LocalStage& ls : locals_)
    for (auto& e : ls.executors) e->wait_transfers();
}

void PipelineExecution::reduce_gradients() {
  const int M = run_.microbatches;
  for (LocalStage& ls : locals_) {
    for (auto& e : ls.executors)
      e->run_ops([&](int i) {
        const SegmentKind k = ls.kind[size_t(i)];
        const Op& op = *ls.executors.front()->flat().ops[size_t(i)].op;
        return op.phase == Phase::optimizer && op.is_collective() && k != SegmentKind::grad_norm;
      });
    Executor& first = *ls.executors.front();
    for (const Executor::Param& p : first.parameters()) {
      if (p.grad < 0) continue;
      std::vector<float> sum = first.read(p.grad);
      for (int m = 1; m < M; ++m) {
        const std::vector<float> g = ls.executors[size_t(m)]->read(p.grad);
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += g[i];
      }
      for (float& v : sum) v /= float(M);
      first.write(p.grad, sum);
    }
  }
}

}  // namespace tptune
