#pragma once
// The CPU backend: Eigen GEMMs, the reference kernels of kernels/cpu/, MPI collectives, std::chrono timers.
//
// One MPI process per rank. The backend is given the communicators of its groups (TP; DP, FSDP's shard group; CP,
// the context-parallel ring; PP, the pipeline; EP and EFSDP, the experts' groups, set_expert_groups); MPI_COMM_NULL
// stands for a group of this process alone (size 1), so a CpuBackend() without MPI runs the tp 1 reference and unit
// tests. HSDP's replicate group is not one of them (size 1). Everything is stored and computed in fp32 (storage_for is
// f32 for every dtype; see runtime/backend.h); Eigen runs single-threaded (one rank per core). Collectives are MPI-3
// non-blocking calls (MPI_Iallreduce, MPI_Iallgather, MPI_Ireduce_scatter_block, MPI_Ialltoall, MPI_Isend/MPI_Irecv);
// with Open MPI they progress inside MPI calls, which `Request::test` makes. Ring steps use one tag per send_recv call
// in issue order, so that two steps in flight cannot be confused; a pipeline's one-way send and recv (MPI_Isend /
// MPI_Irecv) use the caller's tag, in a range of their own above them.

#include <mpi.h>

#include <array>

#include "plans/util/enum_names.h"
#include "runtime/backend.h"

namespace tptune {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(MPI_Comm tp = MPI_COMM_NULL, MPI_Comm dp = MPI_COMM_NULL, MPI_Comm cp = MPI_COMM_NULL,
                      MPI_Comm pp = MPI_COMM_NULL);

  BackendEnvironment environment() const override;
  int group_size(Group g) const override;
  int group_rank(Group g) const override;

  // Every floating-point dtype is stored and computed in fp32 (float8 values exactly representable, see
  // runtime/backend.h); the calls below reject any other storage naming the call.
  Storage storage_for(DType) const override { return Storage::f32; }
  // alloc .. recv: the overrides every backend declares.
#include "runtime/backend_overrides.h"
  // The one-pass CPU kernels of the compiled Program's fused norms (kernels/cpu/norms.h).
  void add_rmsnorm_fwd(int64_t rows, int64_t dim, double eps, DevPtr a, DevPtr b, DevPtr w, DevPtr h, DevPtr y,
                       float* rstd) override;
  void rmsnorm_bwd_add(int64_t rows, int64_t dim, DevPtr x, DevPtr w, const float* rstd, DevPtr dy, DevPtr dres,
                       DevPtr dx, DevPtr dw) override;
  int max_p2p_tag() const override;

  std::unique_ptr<Timer> make_timer() override;
  void synchronize() override {}

  // Watchdog: a collective's `wait` that has not completed after `seconds` throws tptune::Error ("all_reduce did
  // not complete within 3 s ..."); 0 waits forever (the default).
  void set_timeout(double seconds) { timeout_s_ = seconds; }
  // Expert parallelism (Group::ep, Group::efsdp of plans/program/program.h): the ep group's communicator (consecutive
  // ranks) and the experts' FSDP group (stride ep); MPI_COMM_NULL: this process alone. tp-run builds them inside the
  // TP group (tools/tp_run/backend.h MeshComms).
  void set_expert_groups(MPI_Comm ep, MPI_Comm efsdp) { slot(Group::ep) = ep, slot(Group::efsdp) = efsdp; }

 private:
  MPI_Comm comm(Group g) const { return comms_[static_cast<size_t>(g)]; }
  MPI_Comm& slot(Group g) { return comms_[static_cast<size_t>(g)]; }
  RequestPtr one_way(bool send, Group g, DevPtr data, int peer, int64_t n, int tag);
  // Each group's communicator, by Group's value: MPI_COMM_NULL for a group of this process alone (the replicate
  // group always).
  std::array<MPI_Comm, enum_count(Group::efsdp)> comms_;
  int tag_ = 0;  // next send_recv tag
  double timeout_s_ = 0;
};

}  // namespace tptune
