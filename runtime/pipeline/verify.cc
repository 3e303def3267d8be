// Pipeline parallelism verified on CPU; see verify.h.
#include "runtime/pipeline/verify.h"

#include <fmt/format.h>

#include <cmath>

#include "plans/util/error.h"
#include "runtime/executor.h"
#include "runtime/gather.h"

namespace tptune {
namespace {

void check_mpi(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw Error(fmt::format("pipeline: MPI {} failed (error code {})", what, rc));
}

// A ParamCheck from its owner to every rank of the pp group.
void broadcast(ParamCheck& c, int root, MPI_Comm pp) {
  double v[7] = {c.ref_max,          c.max_abs_err,       c.max_rel_err,           c.rel_l2_err,
                 c.pass ? 1.0 : 0.0, double(c.shard_dim), double(c.problem.size())};
  check_mpi(MPI_Bcast(v, 7, MPI_DOUBLE, root, pp), "Bcast");
  c.ref_max = v[0], c.max_abs_err = v[1], c.max_rel_err = v[2], c.rel_l2_err = v[3], c.pass = v[4] != 0;
  c.shard_dim = int(v[5]);
  c.problem.resize(size_t(v[6]));
  if (!c.problem.empty()) check_mpi(MPI_Bcast(c.problem.data(), int(c.problem.size()), MPI_CHAR, root, pp), "Bcast");
}

}  // namespace

VerifyReport verify_pipeline(const Program& microbatch, const Program& reference, Backend& backend,
                             Backend& reference_backend, const PipelineRun& run, uint64_t seed) {
  const int tp = backend.group_size(Group::tp);
  const int M = run.microbatches;
  int pp = 1;
  check_mpi(MPI_Comm_size(run.pp, &pp), "Comm_size");
  const int64_t mb = microbatch.training.local_batch_size, seq = microbatch.training.seq_len;
  if (M < 1 || reference.training.local_batch_size != mb * M || reference.training.seq_len != seq)
    throw Error(fmt::format("pipeline: {} microbatches of {} sequences do not make the reference batch of {}", M, mb,
                            reference.training.local_batch_size));

  ExecutorOptions opts;
  opts.run_optimizer = false;
  Executor ref(reference, reference_backend, opts);
  ref.init(seed);
  ref.step();
  PipelineExecution pipe(microbatch, backend, run, seed);
  const int S = int(run.stages.size());
  for (int m = 0; m < M; ++m) {
    // Microbatch m is rows [m mb, (m+1) mb) of the reference's batch (torch's schedules split the batch in order):
    // its tokens on the first stage, its targets on the last.
    for (bool tokens : {true, false}) {
      Executor* e = pipe.executor(tokens ? 0 : S - 1, m);
      if (!e) continue;
      const std::vector<float> all = ref.read(ref.flat_tensor(tokens ? reference.tokens : reference.targets));
      e->write(e->flat_tensor(tokens ? e->program().tokens : e->program().targets),
               std::vector<float>(all.begin() + m * mb * seq, all.begin() + (m + 1) * mb * seq));
    }
  }
  pipe.run_schedule();
  pipe.reduce_gradients();

  VerifyReport r;
  r.tp = tp;
  r.pp = pp;
  r.seed = seed;
  r.float8 = std::string(to_string(microbatch.plan.float8));
  const Storage storage = backend.storage_for(microbatch.training.dtype);
  {  // the loss: the mean of the microbatches', on the last stage's rank
    double loss = 0;
    const int last = run.stages.back().rank;
    if (last == run.pp_rank)
      for (int m = 0; m < M; ++m) loss += pipe.executor(S - 1, m)->loss() / M;
    check_mpi(MPI_Bcast(&loss, 1, MPI_DOUBLE, last, run.pp), "Bcast");
    r.loss = loss;
    r.reference_loss = ref.loss();
    r.loss_rel_err = std::abs(r.loss - r.reference_loss) / std::max(std::abs(r.reference_loss), 1e-30);
    r.loss_tolerance = {"rel", loss_tolerance(storage)};
    r.loss_pass = std::isfinite(r.loss) && r.loss_rel_err <= r.loss_tolerance.value;
  }
  // Every parameter of the model, compared on the rank of the stage that owns it (its microbatch 0 Executor holds the
  // mean gradient); a parameter the stage's Program lacks (a wrong boundary) has no gradient to compare.
  for (const Executor::Param& rp : ref.parameters()) {
    ParamCheck c;
    c.name = rp.name;
    c.tolerance = gradient_tolerance(storage);
    c.shape = ref.desc(rp.value).global_shape;
    const int stage = pipe.stage_of(rp.name);
    const int owner = run.stages[size_t(stage)].rank;
    if (owner == run.pp_rank) {
      Executor& e = *pipe.executor(stage, 0);
      // parameters() returns a vector by value: held here, so that `p` does not point into a destroyed temporary
      // (it did, and read a freed Param's gradient id at random under load).
      const std::vector<Executor::Param> params = e.parameters();
      const Executor::Param* p = nullptr;
      for (const Executor::Param& q : params)
        if (q.name == rp.name) p = &q;
      if (p) c.shard_dim = e.desc(p->value).param_shard_dim;
      if (!p || p->grad < 0 || rp.grad < 0)
        c.problem = fmt::format("no gradient to compare (stage {} computes none)", stage);
      else
        compare_gradient(c, gather_group(backend, Group::tp, e.read(p->grad), rp.name), 1, tp, ref.read(rp.grad));
    }
    broadcast(c, owner, run.pp);
    r.params.push_back(std::move(c));
  }
  sort_model_order(r.params);
  return r;
}

}  // namespace tptune
