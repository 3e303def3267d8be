// `tp-run profile` of a pipeline-parallel plan; see profile.h.
#include "runtime/pipeline/profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "plans/program/program_identity.h"
#include "plans/util/error.h"

namespace tptune {
namespace {

void check_mpi(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw Error(fmt::format("pipeline profile: MPI {} failed (error code {})", what, rc));
}

double median(std::vector<double> v) { return v.empty() ? 0.0 : summarize(std::move(v)).median; }

// Element-wise maximum of `v` over the tp group (the backend) and then over `pp` (MPI): every rank ends with it.
void max_over_mesh(std::vector<double>& v, Backend& backend, MPI_Comm pp) {
  if (v.empty()) return;
  std::vector<float> f(v.begin(), v.end());
  Buffer local = backend.alloc(int64_t(f.size()), Storage::f32), worst = backend.alloc(int64_t(f.size()), Storage::f32);
  backend.upload(local.f32(), f.data(), int64_t(f.size()));
  backend.all_reduce(Group::tp, ReduceOp::max, local.f32(), worst.f32(), int64_t(f.size()))->wait();
  backend.download(f.data(), worst.f32(), int64_t(f.size()));
  for (size_t i = 0; i < f.size(); ++i) v[i] = f[i];
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, v.data(), int(v.size()), MPI_DOUBLE, MPI_MAX, pp), "Allreduce");
}

// Every rank of the pp and tp groups has arrived (see profile.h).
void barrier(Backend& backend, MPI_Comm pp) {
  check_mpi(MPI_Barrier(pp), "Barrier");
  std::vector<double> one{0.0};
  max_over_mesh(one, backend, pp);
}

}  // namespace

Profile profile_pipeline(const Program& microbatch, Backend& backend, const PipelineRun& run,
                         const ProfileOptions& options) {
  if (options.iters < 1) throw Error(fmt::format("--iters: expected at least 1, got {}", options.iters));
  if (options.warmup < 0) throw Error(fmt::format("--warmup: expected 0 or more, got {}", options.warmup));
  PipelineExecution pipe(microbatch, backend, run, options.seed);
  const int total = options.warmup + 2 * options.iters;
  int done = 0;
  auto step_done = [&] {
    if (options.on_step) options.on_step(++done, total);
  };
  for (int i = 0; i < options.warmup; ++i) {
    pipe.run_schedule();
    pipe.reduce_gradients();
    step_done();
  }
  const FlatProgram& flat = pipe.microbatch_flat();
  const size_t n_ops = flat.ops.size();

  // Op times: serialized steps.
  std::vector<std::vector<double>> samples(n_ops);
  std::vector<bool> ran(n_ops, false);
  for (int it = 0; it < options.iters; ++it) {
    std::vector<double> sum(n_ops, 0.0);
    std::vector<int> count(n_ops, 0);
    pipe.run_schedule(nullptr, [&](int op, double us) { sum[size_t(op)] += us, ++count[size_t(op)]; });
    pipe.reduce_gradients();
    std::vector<double> times(n_ops, 0.0), runs(n_ops, 0.0);
    for (size_t i = 0; i < n_ops; ++i)
      if (count[i] > 0) times[i] = sum[i] / count[i], runs[i] = 1;
    max_over_mesh(times, backend, run.pp);
    max_over_mesh(runs, backend, run.pp);
    for (size_t i = 0; i < n_ops; ++i) {
      samples[i].push_back(times[i]);
      ran[i] = runs[i] > 0;
    }
    step_done();
  }

  // The schedule: overlapped steps, all ranks starting together.
  const size_t n_actions = run.actions.size();
  std::vector<std::vector<double>> starts(n_actions), waits(n_actions), ends(n_actions);
  std::vector<double> walls;
  for (int it = 0; it < options.iters; ++it) {
    barrier(backend, run.pp);
    const double t0 = MPI_Wtime();
    pipe.run_schedule([&](size_t k, const PipelineExecution::ActionTime& t) {
      starts[k].push_back((t.start - t0) * 1e6);
      waits[k].push_back((t.compute - t.start) * 1e6);
      ends[k].push_back((t.end - t0) * 1e6);
    });
    pipe.reduce_gradients();
    std::vector<double> wall{(MPI_Wtime() - t0) * 1e6};
    max_over_mesh(wall, backend, run.pp);
    walls.push_back(wall[0]);
    step_done();
  }

  // P2P between neighbouring pp ranks (in stage order: stage s's rank sends to stage s+1's).
  int pp = 1;
  check_mpi(MPI_Comm_size(run.pp, &pp), "Comm_size");
  const int64_t act_elements = numel(pipeline_boundary_tensor(microbatch).local_shape);
  std::vector<ProfileP2P> p2p;
  for (int from = 0; from + 1 < pp; ++from) {
    const int to = from + 1;
    for (int64_t n : {std::max<int64_t>(1, act_elements / 4), std::max<int64_t>(1, act_elements / 2), act_elements}) {
      std::vector<float> buf(size_t(n), 1.0f);
      std::vector<double> one_way;
      barrier(backend, run.pp);
      for (int k = 0; k <= options.iters; ++k) {
        double us = 0;
        if (run.pp_rank == from) {
          const double t = MPI_Wtime();
          check_mpi(MPI_Send(buf.data(), int(n), MPI_FLOAT, to, 7, run.pp), "Send");
          check_mpi(MPI_Recv(buf.data(), int(n), MPI_FLOAT, to, 8, run.pp, MPI_STATUS_IGNORE), "Recv");
          us = (MPI_Wtime() - t) * 1e6 / 2;
        } else if (run.pp_rank == to) {
          check_mpi(MPI_Recv(buf.data(), int(n), MPI_FLOAT, from, 7, run.pp, MPI_STATUS_IGNORE), "Recv");
          check_mpi(MPI_Send(buf.data(), int(n), MPI_FLOAT, from, 8, run.pp), "Send");
        }
        std::vector<double> v{us};
        max_over_mesh(v, backend, run.pp);
        if (k > 0) one_way.push_back(v[0]);  // the first round trip is untimed
      }
      const OpTiming t = summarize(one_way);
      p2p.push_back({from, to, n * bytes_per_element(microbatch.training.dtype), time_summary(t), t.samples});
    }
  }

  // The loss: the mean of the microbatches', on the last stage's rank.
  double loss = 0;
  const int last = run.stages.back().rank;
  if (last == run.pp_rank)
    for (int m = 0; m < pipe.microbatches(); ++m)
      loss += pipe.executor(int(run.stages.size()) - 1, m)->loss() / pipe.microbatches();
  check_mpi(MPI_Bcast(&loss, 1, MPI_DOUBLE, last, run.pp), "Bcast");

  // Each rank's actions (stage, microbatch, kind, start, wait, end) to pp rank 0, then to every rank.
  std::vector<double> mine;
  for (size_t k = 0; k < n_actions; ++k) {
    const PipelineStep& a = run.actions[k];
    mine.insert(mine.end(), {double(a.stage), double(a.microbatch), double(int(a.kind)), median(starts[k]),
                             median(waits[k]), median(ends[k])});
  }
  int n_mine = int(mine.size());
  std::vector<int> counts(static_cast<size_t>(pp)), offsets(static_cast<size_t>(pp));
  check_mpi(MPI_Allgather(&n_mine, 1, MPI_INT, counts.data(), 1, MPI_INT, run.pp), "Allgather");
  int all_n = 0;
  for (int r = 0; r < pp; ++r) offsets[size_t(r)] = all_n, all_n += counts[size_t(r)];
  std::vector<double> all(static_cast<size_t>(all_n));
  check_mpi(
      MPI_Allgatherv(mine.data(), n_mine, MPI_DOUBLE, all.data(), counts.data(), offsets.data(), MPI_DOUBLE, run.pp),
      "Allgatherv");

  Profile prof;
  prof.environment = environment_json(backend);
  prof.environment["ranks"] = backend.group_size(Group::tp) * pp;
  prof.program = program_identity(microbatch);
  if (std::isfinite(loss)) prof.final_loss = loss;
  prof.timing = ProfileTiming{options.warmup, options.iters};
  {
    OpTiming w = summarize(walls);
    prof.step_wall = WallTimes{time_summary(w), w.samples};
  }
  ProfilePipeline pl;
  pl.pp = pp;
  pl.microbatches = run.microbatches;
  for (const PipelineStageSpan& s : run.stages) pl.stages.push_back({s.first_layer, s.layers, s.rank});
  for (int r = 0; r < pp; ++r) {
    ProfilePipelineRank pr;
    pr.pp_rank = r;
    for (int i = offsets[size_t(r)]; i < offsets[size_t(r)] + counts[size_t(r)]; i += 6) {
      const double* v = &all[size_t(i)];
      ProfilePipelineAction a;
      a.stage = int64_t(v[0]), a.microbatch = int64_t(v[1]);
      a.kind = to_letter(PipelineStep::Kind(int(v[2])));
      a.start_us = v[3], a.wait_us = v[4], a.end_us = v[5];
      pr.end_us = std::max(pr.end_us, a.end_us);
      pr.busy_us += std::max(0.0, a.end_us - a.start_us - a.wait_us);
      pr.actions.push_back(std::move(a));
    }
    pl.ranks.push_back(std::move(pr));
  }
  pl.p2p = std::move(p2p);
  pl.not_timed =
      "the optimizer phase: its compute (AdamW) is not run under the pipeline (each microbatch's Executor holds "
      "its own weights), and its collectives run inside the gradient reduction, which the step wall includes; the "
      "stages' transfers: a receive is the action's wait, a send is issued and completes at the step's end";
  prof.pipeline = std::move(pl);

  prof.ops.reserve(n_ops);
  for (size_t i = 0; i < n_ops; ++i) {
    prof.ops.push_back(
        profile_op_record(pipe.microbatch_program(), flat, i, backend, 0, ran[i] ? &samples[i] : nullptr));
  }
  return prof;
}

}  // namespace tptune
