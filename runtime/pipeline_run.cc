// One pp rank running its pipeline schedule; see pipeline_run.h.
#include "runtime/pipeline_run.h"

#include <fmt/format.h>

#include <cstdlib>
#include <deque>

#include "plans/error.h"

namespace tptune {
namespace {

void check_mpi(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw Error(fmt::format("pipeline: MPI {} failed (error code {})", what, rc));
}

const LayerChain& chain(const Program& p, bool reverse) {
  for (const LayerChain& c : p.chains)
    if (c.reverse == reverse) return c;
  throw Error(fmt::format("pipeline: the Program has no {} layer chain", reverse ? "backward" : "forward"));
}

}  // namespace

const char* to_letter(PipelineStep::Kind k) {
  switch (k) {
    case PipelineStep::Kind::forward:
      return "F";
    case PipelineStep::Kind::backward:
      return "B";
    case PipelineStep::Kind::input_grad:
      return "I";
    case PipelineStep::Kind::weight_grad:
      return "W";
  }
  return "?";
}

PipelineExecution::PipelineExecution(const Program& microbatch, Backend& backend, const PipelineRun& run, uint64_t seed)
    : run_(run), layers_(int(microbatch.model.n_layers)) {
  const int S = int(run.stages.size());
  for (int s = 0, next = 0; s < S; ++s) {
    if (run.stages[size_t(s)].first_layer != next || run.stages[size_t(s)].layers < 0)
      throw Error(fmt::format("pipeline: stage {} starts at block {}, expected {} (stages hold consecutive blocks)", s,
                              run.stages[size_t(s)].first_layer, next));
    next += run.stages[size_t(s)].layers;
    if (s == S - 1 && next != layers_)
      throw Error(fmt::format("pipeline: the stages hold {} blocks, the model has {}", next, layers_));
  }
  if (S == 0 || run.microbatches < 1)
    throw Error(fmt::format("pipeline: expected stages and microbatches, got {} stages and {} microbatches", S,
                            run.microbatches));
  for (const PipelineStep& a : run.actions)
    if (a.stage < 0 || a.stage >= S || a.microbatch < 0 || a.microbatch >= run.microbatches ||
        run.stages[size_t(a.stage)].rank != run.pp_rank)
      throw Error(
          fmt::format("pipeline: action on stage {} microbatch {} is not this rank's ({} stages, {} "
                      "microbatches, pp rank {})",
                      a.stage, a.microbatch, S, run.microbatches, run.pp_rank));
  ExecutorOptions opts;
  opts.run_optimizer = false;
  for (int m = 0; m < run.microbatches; ++m) {
    executors_.push_back(std::make_unique<Executor>(microbatch, backend, opts));
    executors_.back()->init(seed);
  }
  const Executor& first = *executors_.front();
  kind_.resize(first.flat().ops.size());
  for (size_t i = 0; i < kind_.size(); ++i) kind_[i] = first.segment_of(int(i));
  fwd_ = &chain(first.program(), false);
  bwd_ = &chain(first.program(), true);
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

// The activation entering block l (l = layers: the head's input) and the gradient of it.
int PipelineExecution::act_into(Executor& e, int l) const {
  return l == 0 ? e.flat_tensor(fwd_->source) : e.flat_tensor(fwd_->out, l - 1);
}
int PipelineExecution::grad_of_act(Executor& e, int l) const {
  return l == layers_ ? e.flat_tensor(bwd_->source) : e.flat_tensor(bwd_->out, l);
}

PipelineStageSpan PipelineExecution::span(int s) const {
  PipelineStageSpan sp = run_.stages[size_t(s)];
  if (run_.fault == PipelineFault::shifted_boundary && s > 0 && sp.layers > 0) ++sp.first_layer, --sp.layers;
  return sp;
}

std::function<bool(int)> PipelineExecution::stage_ops(int s, bool forward) const {
  const PipelineStageSpan sp = span(s);
  const int last = int(run_.stages.size()) - 1;
  const FlatProgram& flat = executors_.front()->flat();
  return [this, &flat, s, sp, forward, last](int i) {
    const FlatOp& f = flat.ops[size_t(i)];
    switch (kind_[size_t(i)]) {
      case SegmentKind::embed_fwd:
        return forward && s == 0;
      case SegmentKind::embed_bwd:
        return !forward && s == 0;
      case SegmentKind::block_fwd:
      case SegmentKind::block_bwd:
        return (kind_[size_t(i)] == SegmentKind::block_fwd) == forward && f.layer >= sp.first_layer &&
               f.layer < sp.first_layer + sp.layers;
      case SegmentKind::head:
        return s == last && (f.op->phase == Phase::backward) != forward;
      default:
        return false;
    }
  };
}

void PipelineExecution::run_schedule(const ActionFn& on_action, const Executor::OpTimeFn& on_op) {
  const int S = int(run_.stages.size()), M = run_.microbatches;
  std::deque<std::vector<float>> sent;  // kept until their sends complete
  std::vector<MPI_Request> requests;
  auto tag = [&](int s, int m, bool backward) { return (s * M + m) * 2 + (backward ? 1 : 0); };
  auto receive = [&](Executor& e, int t, int from_stage, int s, int m, bool backward) {
    std::vector<float> v(size_t(numel(e.desc(t).local_shape)));
    check_mpi(MPI_Recv(v.data(), int(v.size()), MPI_FLOAT, run_.stages[size_t(from_stage)].rank, tag(s, m, backward),
                       run_.pp, MPI_STATUS_IGNORE),
              "Recv");
    e.write(t, v);
  };
  auto send = [&](Executor& e, int t, int to_stage, int s, int m, bool backward) {
    sent.push_back(e.read(t));
    check_mpi(MPI_Isend(sent.back().data(), int(sent.back().size()), MPI_FLOAT, run_.stages[size_t(to_stage)].rank,
                        tag(s, m, backward), run_.pp, &requests.emplace_back()),
              "Isend");
  };
  for (size_t k = 0; k < run_.actions.size(); ++k) {
    const PipelineStep& a = run_.actions[k];
    if (run_.fault == PipelineFault::dropped_microbatch && a.microbatch == M - 1) continue;
    Executor& e = *executors_[size_t(a.microbatch)];
    const int s = a.stage, m = a.microbatch;
    const PipelineStageSpan sp = span(s);
    const bool remote_prev = s > 0 && run_.stages[size_t(s - 1)].rank != run_.pp_rank;
    const bool remote_next = s < S - 1 && run_.stages[size_t(s + 1)].rank != run_.pp_rank;
    ActionTime t;
    t.start = MPI_Wtime();
    switch (a.kind) {
      case PipelineStep::Kind::forward:
        if (remote_prev) receive(e, act_into(e, sp.first_layer), s - 1, s, m, false);
        t.compute = MPI_Wtime();
        e.run_ops(stage_ops(s, true), on_op);
        if (remote_next) send(e, act_into(e, sp.first_layer + sp.layers), s + 1, s + 1, m, false);
        break;
      case PipelineStep::Kind::backward:
      case PipelineStep::Kind::input_grad:
        if (remote_next) receive(e, grad_of_act(e, sp.first_layer + sp.layers), s + 1, s, m, true);
        t.compute = MPI_Wtime();
        e.run_ops(stage_ops(s, false), on_op);
        if (remote_prev) send(e, grad_of_act(e, sp.first_layer), s - 1, s - 1, m, true);
        break;
      case PipelineStep::Kind::weight_grad:
        t.compute = t.start;
        break;  // computed with the input gradient
    }
    t.end = MPI_Wtime();
    if (on_action) on_action(k, t);
  }
  if (!requests.empty()) check_mpi(MPI_Waitall(int(requests.size()), requests.data(), MPI_STATUSES_IGNORE), "Waitall");
}

void PipelineExecution::reduce_gradients() {
  Executor& first = *executors_.front();
  auto owned = [&](const std::string& name) { return owner_of(name) == run_.pp_rank; };
  for (auto& e : executors_)
    e->run_ops([&](int i) {
      const FlatOp& f = first.flat().ops[size_t(i)];
      if (f.op->phase != Phase::optimizer || !f.op->is_collective()) return false;
      return owned(f.module);  // "layers.N.<module>", or the embedding's or the head's module
    });
  const int M = microbatches();
  for (const Executor::Param& p : first.parameters()) {
    if (p.grad < 0 || !owned(p.name)) continue;
    std::vector<float> sum = first.read(p.grad);
    for (int m = 1; m < M; ++m) {
      const std::vector<float> g = executors_[size_t(m)]->read(p.grad);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += g[i];
    }
    for (float& v : sum) v /= float(M);
    first.write(p.grad, sum);
  }
}

}  // namespace tptune
