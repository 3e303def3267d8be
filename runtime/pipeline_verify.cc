// Pipeline parallelism verified on CPU; see pipeline_verify.h.
#include "runtime/pipeline_verify.h"

#include <fmt/format.h>

#include <cmath>
#include <map>

#include "plans/error.h"
#include "runtime/executor.h"
#include "runtime/gather.h"

namespace tptune {
namespace {

void check_mpi(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw Error(fmt::format("pipeline: MPI {} failed (error code {})", what, rc));
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
  for (int m = 0; m < M; ++m) {
    Executor& e = pipe.microbatch(m);
    // Microbatch m is rows [m mb, (m+1) mb) of the reference's batch (torch's schedules split the batch in order).
    for (TensorId t : {microbatch.tokens, microbatch.targets}) {
      const std::vector<float> all =
          ref.read(ref.flat_tensor(t == microbatch.tokens ? reference.tokens : reference.targets));
      e.write(e.flat_tensor(t), std::vector<float>(all.begin() + m * mb * seq, all.begin() + (m + 1) * mb * seq));
    }
  }
  pipe.run_schedule();
  pipe.reduce_gradients();
  Executor& first = pipe.microbatch(0);

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
      for (int m = 0; m < M; ++m) loss += pipe.microbatch(m).loss() / M;
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
    const int owner = pipe.owner_of(p.name);
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
