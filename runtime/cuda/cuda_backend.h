#pragma once
// The CUDA backend: the Backend of runtime/backend.h on one NVIDIA GPU per process, in real bf16 / float8 storage.
//
// - Storage (storage_for): bf16 -> bf16, fp8_e4m3 / fp8_e5m2 -> one byte per element, fp32 -> fp32 (fp16 is not
//   run: an error naming the tensor). Statistics are fp32 (the Program says so). Kernels dispatch on the storage to
//   the launchers of kernels/cuda/ (T = float or __nv_bfloat16).
// - Memory: a caching allocator (device_allocator.h), no cudaMalloc per op. Host transfers convert through an fp32
//   device buffer with kernels/cuda's convert (bit-identical to the CPU emulation of bf16 / float8 rounding).
// - Streams: compute on one stream; collectives on a communication stream, async-TP ring steps (send_recv) on a
//   stream of their own (and a communicator of their own), so that a slot travels while the previous one is
//   multiplied. A collective first waits
//   (cudaStreamWaitEvent) for the compute issued before it, and its Request's `wait` makes the compute stream wait
//   for its completion event: the Program's dependencies are events, the host does not block, and compute that does
//   not depend on a collective overlaps it.
// - GEMMs: cuBLASLt (cublaslt_gemm.h). Collectives: NCCL (nccl_comm.h), one communicator per Group.
// - Watchdog (set_timeout, tp-run --timeout): `synchronize` and a Request's `test` poll the completion events of
//   the collectives in flight; one that has not completed `seconds` after it was issued aborts the communicators
//   (ncclCommAbort) and throws tptune::Error naming it ("all_reduce (tp, 4096 x bf16) did not complete within 3 s").
// - Timers: CUDA events on the compute stream.
// One process per GPU: `device` is the local rank (tools/tp_run/session.h finds it whatever the launcher).

#include <cuda_runtime.h>
#include <mpi.h>

#include <chrono>
#include <deque>
#include <memory>
#include <string>

#include "kernels/cuda/device/scratch.h"
#include "runtime/backend.h"

namespace tptune::cuda {
class AttentionPlanCache;
}

namespace tptune::cudabe {
class DeviceAllocator;
class CublasLtGemm;
class NcclComm;
struct InFlight;
}  // namespace tptune::cudabe

namespace tptune {

// Number of visible CUDA devices; 0 when none is visible or the driver is missing (never throws).
int cuda_device_count();
// A one-line reason why no device is usable, empty when one is: "no GPU visible" (none, or CUDA_VISIBLE_DEVICES hides
// them), "no GPU visible: no NVIDIA driver is loaded" (a machine without a GPU), the driver older than the runtime,
// or "no usable GPU: cudaGetDeviceCount: <CUDA's text>".
std::string cuda_unavailable_reason();

class CudaBackend final : public Backend {
 public:
  CudaBackend(MPI_Comm tp, MPI_Comm dp, int device);
  ~CudaBackend() override;

  BackendEnvironment environment() const override;
  int group_size(Group g) const override;
  int group_rank(Group g) const override;

  Storage storage_for(DType t) const override;
  // alloc .. recv: the overrides every backend declares. Here ring attention (attention_block_fwd,
  // attention_block_bwd, attention_merge: context parallelism) has no CUDA kernels, and send and recv are not built
  // (the CUDA backend has no pipeline group: tp-run runs pipeline-parallel plans on the CPU backend): they throw
  // tptune::Error saying so. ce_loss's mean_over must equal tokens (the kernels divide by their own token count):
  // tptune::Error otherwise.
#include "runtime/backend_overrides.h"
  // The compiled Program's fused kernels (kernels/cuda/norms.h, rope.h): one pass, one launch where the packed paths
  // apply.
  void add_rmsnorm_fwd(int64_t rows, int64_t dim, double eps, DevPtr a, DevPtr b, DevPtr w, DevPtr h, DevPtr y,
                       float* rstd) override;
  void rmsnorm_bwd_add(int64_t rows, int64_t dim, DevPtr x, DevPtr w, const float* rstd, DevPtr dy, DevPtr dres,
                       DevPtr dx, DevPtr dw) override;
  void rope_qk_fwd(const RopeShape& qs, const RopeShape& ks, DevPtr q, DevPtr k, DevPtr qo, DevPtr ko) override;
  void rope_qk_bwd(const RopeShape& qs, const RopeShape& ks, DevPtr dq, DevPtr dk, DevPtr dqo, DevPtr dko) override;
  // One multi-tensor launch per gradient storage (kernels/cuda/adamw.h), not one per parameter.
  void adamw_multi(const std::vector<AdamWTensorRef>& tensors, const AdamWParams& h) override;
  int max_p2p_tag() const override { return 0; }

  std::unique_ptr<Timer> make_timer() override;
  void synchronize() override;

  void set_timeout(double seconds) { timeout_s_ = seconds; }
  int device() const { return device_; }
  // cudaMalloc calls so far (tests: the caching allocator is hit after the first step).
  size_t device_mallocs() const;
  size_t cached_gemm_plans() const;

 private:
  cudabe::NcclComm& comm(Group g) const;
  // Orders `stream` after the compute issued so far, runs `issue(stream)`, records completion: the Request.
  template <class Issue>
  RequestPtr on_stream(cudaStream_t stream, std::string what, Issue&& issue);
  // The collective `what` of n elements per rank from `in` to `out` on `c`, on `stream`: on a one-rank group a copy
  // of `in` to `out` (none in place); else `call(comm, nccl_type, stream)` issues the NCCL calls. `reduces`: the
  // collective adds (float8 refused).
  template <class Call>
  RequestPtr nccl_collective(cudabe::NcclComm& c, cudaStream_t stream, DevPtr in, DevPtr out, int64_t n, bool reduces,
                             const std::string& what, Call&& call);
  // nccl_collective() of group g on the communication stream, `what` naming the collective `name`, the group, the
  // size and the storage (its errors say it); `call(comm, nccl_type, stream, what)` issues the NCCL calls.
  template <class Call>
  RequestPtr group_collective(const char* name, Group g, DevPtr in, DevPtr out, int64_t n, bool reduces, Call&& call);
  void poll_in_flight(bool block);
  // The fp32 staging buffer of a host transfer or a float8 fill.
  std::shared_ptr<void> staging(int64_t n);

  int device_ = 0;
  cudaStream_t compute_ = nullptr, comm_stream_ = nullptr, p2p_stream_ = nullptr;
  std::shared_ptr<cudabe::DeviceAllocator> allocator_;
  cuda::ScratchAllocator scratch_;  // kernel scratch from allocator_
  std::unique_ptr<cudabe::CublasLtGemm> gemm_;
  std::unique_ptr<cuda::AttentionPlanCache> attention_;
  std::unique_ptr<cudabe::NcclComm> tp_, dp_;
  // The ring steps' own communicator over the TP group: each communicator is used on one stream only, so that NCCL
  // runs its operations in issue order on every rank (one communicator on two streams has no order between them
  // unless NCCL_LAUNCH_ORDER_IMPLICIT is set, and two ranks could then run them in different orders and hang).
  std::unique_ptr<cudabe::NcclComm> tp_p2p_;
  std::deque<std::shared_ptr<cudabe::InFlight>> in_flight_;
  double timeout_s_ = 0;
};

}  // namespace tptune
