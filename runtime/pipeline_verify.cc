// Pipeline parallelism verified on CPU; see pipeline_verify.h.
#include "runtime/pipeline_verify.h"

#include <fmt/format.h>

#include <cmath>
#include <deque>
#include <map>
#include <memory>

#include "plans/error.h"
#include "runtime/executor.h"
#include "runtime/gather.h"

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

// The stage that holds a parameter or a module (full FQN): its block's, the embedding's (first) or the head's (last).
int stage_of_param(const std::string& name, const std::vector<PipelineStageSpan>& stages) {
  if (name.rfind("layers.", 0) == 0) {
    const int layer = std::atoi(name.c_str() + 7);
    for (size_t s = 0; s < stages.size(); ++s)
      if (layer >= stages[s].first_layer && layer < stages[s].first_layer + stages[s].layers) return int(s);
    throw Error(fmt::format("pipeline: no stage holds {}", name));
  }
  return name.rfind("tok_embeddings", 0) == 0 ? 0 : int(stages.size()) - 1;
}

// A ParamCheck from its owner to every rank of the pp group.
void broadcast(ParamCheck& c, int root, MPI_Comm pp) {
  double v[6] = {c.ref_max, c.max_abs_err, c.max_rel_err, c.rel_l2_err, c.pass ? 1.0 : 0.0, double(c.problem.size())};
  check_mpi(MPI_Bcast(v, 6, MPI_DOUBLE, root, pp), "Bcast");
  c.ref_max = v[0], c.max_abs_err = v[1], c.max_rel_err = v[2], c.rel_l2_err = v[3], c.pass = v[4] != 0;
  c.problem.resize(size_t(v[5]));
  if (!c.problem.empty()) check_mpi(MPI_Bcast(c.problem.data(), int(c.problem.size()), MPI_CHAR, root, pp), "Bcast");
}

}  // namespace

VerifyReport verify_pipeline(const Program& microbatch, const Program& reference, Backend& backend,
                             Backend& reference_backend, const PipelineRun& run, uint64_t seed) {
  const int tp = backend.group_size(Group::tp);
  const int S = int(run.stages.size()), M = run.microbatches;
  const int L = int(microbatch.model.n_layers);
  int pp = 1;
  check_mpi(MPI_Comm_size(run.pp, &pp), "Comm_size");
  for (int s = 0, next = 0; s < S; ++s) {
    if (run.stages[size_t(s)].first_layer != next || run.stages[size_t(s)].layers < 0)
      throw Error(fmt::format("pipeline: stage {} starts at block {}, expected {} (stages hold consecutive blocks)", s,
                              run.stages[size_t(s)].first_layer, next));
    next += run.stages[size_t(s)].layers;
    if (s == S - 1 && next != L)
      throw Error(fmt::format("pipeline: the stages hold {} blocks, the model has {}", next, L));
  }
  const int64_t mb = microbatch.training.local_batch_size, seq = microbatch.training.seq_len;
  if (S == 0 || M < 1 || reference.training.local_batch_size != mb * M || reference.training.seq_len != seq)
    throw Error(fmt::format("pipeline: {} microbatches of {} sequences do not make the reference batch of {}", M, mb,
                            reference.training.local_batch_size));

  ExecutorOptions opts;
  opts.run_optimizer = false;
  Executor ref(reference, reference_backend, opts);
  ref.init(seed);
  ref.step();
  std::vector<std::unique_ptr<Executor>> ex;
  for (int m = 0; m < M; ++m) {
    ex.push_back(std::make_unique<Executor>(microbatch, backend, opts));
    Executor& e = *ex.back();
    e.init(seed);
    // Microbatch m is rows [m mb, (m+1) mb) of the reference's batch (torch's schedules split the batch in order).
    for (TensorId t : {microbatch.tokens, microbatch.targets}) {
      const std::vector<float> all =
          ref.read(ref.flat_tensor(t == microbatch.tokens ? reference.tokens : reference.targets));
      e.write(e.flat_tensor(t), std::vector<float>(all.begin() + m * mb * seq, all.begin() + (m + 1) * mb * seq));
    }
  }
  Executor& first = *ex.front();
  const size_t n_ops = first.flat().ops.size();
  std::vector<SegmentKind> kind(n_ops);
  for (size_t i = 0; i < n_ops; ++i) kind[i] = first.segment_of(int(i));

  const LayerChain& fwd = chain(microbatch, false);
  const LayerChain& bwd = chain(microbatch, true);
  // The activation entering block l (l = L: the head's input) and the gradient of it.
  auto act_into = [&](Executor& e, int l) {
    return l == 0 ? e.flat_tensor(fwd.source) : e.flat_tensor(fwd.out, l - 1);
  };
  auto grad_of_act = [&](Executor& e, int l) { return l == L ? e.flat_tensor(bwd.source) : e.flat_tensor(bwd.out, l); };
  auto span = [&](int s) {
    PipelineStageSpan sp = run.stages[size_t(s)];
    if (run.fault == PipelineFault::shifted_boundary && s > 0 && sp.layers > 0) ++sp.first_layer, --sp.layers;
    return sp;
  };
  auto stage_ops = [&](int s, bool forward) {
    const PipelineStageSpan sp = span(s);
    return [&, s, sp, forward](int i) {
      const FlatOp& f = first.flat().ops[size_t(i)];
      switch (kind[size_t(i)]) {
        case SegmentKind::embed_fwd:
          return forward && s == 0;
        case SegmentKind::embed_bwd:
          return !forward && s == 0;
        case SegmentKind::block_fwd:
        case SegmentKind::block_bwd:
          return (kind[size_t(i)] == SegmentKind::block_fwd) == forward && f.layer >= sp.first_layer &&
                 f.layer < sp.first_layer + sp.layers;
        case SegmentKind::head:
          return s == S - 1 && (f.op->phase == Phase::backward) != forward;
        default:
          return false;
      }
    };
  };

  std::deque<std::vector<float>> sent;  // kept until their sends complete
  std::vector<MPI_Request> requests;
  auto tag = [&](int s, int m, bool backward) { return (s * M + m) * 2 + (backward ? 1 : 0); };
  auto receive = [&](Executor& e, int t, int from_stage, int s, int m, bool backward) {
    std::vector<float> v(size_t(numel(e.desc(t).local_shape)));
    check_mpi(MPI_Recv(v.data(), int(v.size()), MPI_FLOAT, run.stages[size_t(from_stage)].rank, tag(s, m, backward),
                       run.pp, MPI_STATUS_IGNORE),
              "Recv");
    e.write(t, v);
  };
  auto send = [&](Executor& e, int t, int to_stage, int s, int m, bool backward) {
    sent.push_back(e.read(t));
    check_mpi(MPI_Isend(sent.back().data(), int(sent.back().size()), MPI_FLOAT, run.stages[size_t(to_stage)].rank,
                        tag(s, m, backward), run.pp, &requests.emplace_back()),
              "Isend");
  };
  for (const PipelineStep& a : run.actions) {
    if (a.stage < 0 || a.stage >= S || a.microbatch < 0 || a.microbatch >= M ||
        run.stages[size_t(a.stage)].rank != run.pp_rank)
      throw Error(
          fmt::format("pipeline: action on stage {} microbatch {} is not this rank's ({} stages, {} "
                      "microbatches, pp rank {})",
                      a.stage, a.microbatch, S, M, run.pp_rank));
    Executor& e = *ex[size_t(a.microbatch)];
    const int s = a.stage, m = a.microbatch;
    const PipelineStageSpan sp = span(s);
    const bool remote_prev = s > 0 && run.stages[size_t(s - 1)].rank != run.pp_rank;
    const bool remote_next = s < S - 1 && run.stages[size_t(s + 1)].rank != run.pp_rank;
    switch (a.kind) {
      case PipelineStep::Kind::forward:
        if (remote_prev) receive(e, act_into(e, sp.first_layer), s - 1, s, m, false);
        e.run_ops(stage_ops(s, true));
        if (remote_next) send(e, act_into(e, sp.first_layer + sp.layers), s + 1, s + 1, m, false);
        break;
      case PipelineStep::Kind::backward:
      case PipelineStep::Kind::input_grad:
        if (remote_next) receive(e, grad_of_act(e, sp.first_layer + sp.layers), s + 1, s, m, true);
        e.run_ops(stage_ops(s, false));
        if (remote_prev) send(e, grad_of_act(e, sp.first_layer), s - 1, s - 1, m, true);
        break;
      case PipelineStep::Kind::weight_grad:
        break;  // computed with the input gradient
    }
  }
  if (!requests.empty()) check_mpi(MPI_Waitall(int(requests.size()), requests.data(), MPI_STATUSES_IGNORE), "Waitall");

  // The optimizer phase's collectives of this rank's parameters (the tp all-reduce of Partial gradients), per
  // microbatch, then the microbatches' gradients summed into the first executor and divided by their number.
  auto owned = [&](const std::string& name) {
    return run.stages[size_t(stage_of_param(name, run.stages))].rank == run.pp_rank;
  };
  for (auto& e : ex)
    e->run_ops([&](int i) {
      const FlatOp& f = first.flat().ops[size_t(i)];
      if (f.op->phase != Phase::optimizer || !f.op->is_collective()) return false;
      return owned(f.module);  // "layers.N.<module>", or the embedding's or the head's module
    });
  for (const Executor::Param& p : first.parameters()) {
    if (p.grad < 0 || !owned(p.name)) continue;
    std::vector<float> sum = first.read(p.grad);
    for (int m = 1; m < M; ++m) {
      const std::vector<float> g = ex[size_t(m)]->read(p.grad);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += g[i];
    }
    for (float& v : sum) v /= float(M);
    first.write(p.grad, sum);
  }

  VerifyReport r;
  r.tp = tp;
  r.pp = pp;
  r.seed = seed;
  r.float8 = std::string(to_string(microbatch.plan.float8));
  const Storage storage = backend.storage_for(microbatch.training.dtype);
  {  // the loss: the mean of the microbatches', on the last stage's rank
    double loss = 0;
    const int last = run.stages[size_t(S - 1)].rank;
    if (last == run.pp_rank)
      for (const auto& e : ex) loss += e->loss() / M;
    check_mpi(MPI_Bcast(&loss, 1, MPI_DOUBLE, last, run.pp), "Bcast");
    r.loss = loss;
    r.reference_loss = ref.loss();
    r.loss_rel_err = std::abs(r.loss - r.reference_loss) / std::max(std::abs(r.reference_loss), 1e-30);
    r.loss_tolerance = {"rel", loss_tolerance(storage)};
    r.loss_pass = std::isfinite(r.loss) && r.loss_rel_err <= r.loss_tolerance.value;
  }
  std::map<std::string, Executor::Param> ref_params;
  for (const auto& p : ref.parameters()) ref_params[p.name] = p;
  for (const Executor::Param& p : first.parameters()) {
    ParamCheck c;
    c.name = p.name;
    c.tolerance = gradient_tolerance(storage);
    const TensorDesc& d = first.desc(p.value);
    c.shape = d.global_shape;
    c.shard_dim = d.param_shard_dim;
    const int owner = run.stages[size_t(stage_of_param(p.name, run.stages))].rank;
    if (owner == run.pp_rank) {
      auto it = ref_params.find(p.name);
      if (p.grad < 0 || it == ref_params.end() || it->second.grad < 0)
        c.problem = "no gradient to compare";
      else
        compare_gradient(c, gather_group(backend, Group::tp, first.read(p.grad), p.name), 1, tp,
                         ref.read(it->second.grad));
    }
    broadcast(c, owner, run.pp);
    r.params.push_back(std::move(c));
  }
  sort_model_order(r.params);
  return r;
}

}  // namespace tptune
