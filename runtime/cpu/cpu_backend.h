#pragma once
// The CPU backend: Eigen GEMMs, the reference kernels of kernels/cpu/, MPI collectives, std::chrono timers.
//
// One MPI process per TP rank. The backend is given the communicators of its groups; MPI_COMM_NULL stands for a
// group of this process alone (size 1), so a CpuBackend() without MPI runs the tp 1 reference and unit tests.
// Everything is computed in fp32 (see runtime/backend.h); Eigen runs single-threaded (one rank per core).
// Collectives are MPI-3 non-blocking calls (MPI_Iallreduce, MPI_Iallgather, MPI_Ireduce_scatter_block,
// MPI_Ialltoall, MPI_Isend/MPI_Irecv); with Open MPI they progress inside MPI calls, which `Request::test` makes.
// Ring steps use one tag per send_recv call in issue order, so that two steps in flight cannot be confused.

#include <mpi.h>

#include "runtime/backend.h"

namespace tptune {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(MPI_Comm tp = MPI_COMM_NULL, MPI_Comm dp = MPI_COMM_NULL);

  BackendEnvironment environment() const override;
  int group_size(Group g) const override;
  int group_rank(Group g) const override;

  Buffer alloc(int64_t numel, Storage storage) override;
  void upload(float* dst, const float* host, int64_t n) override;
  void upload(int32_t* dst, const int32_t* host, int64_t n) override;
  void download(float* host, const float* src, int64_t n) override;
  void download(int32_t* host, const int32_t* src, int64_t n) override;
  void fill(float* dst, int64_t n, float value) override;
  void copy2d(float* dst, int64_t dst_ld, const float* src, int64_t src_ld, int64_t rows, int64_t cols) override;

  void gemm(const GemmArgs& g) override;
  void attention_fwd(const AttentionShape& s, const float* q, const float* k, const float* v, float* o,
                     float* lse) override;
  void attention_bwd(const AttentionShape& s, const float* q, const float* k, const float* v, const float* o,
                     const float* lse, const float* d_o, float* dq, float* dk, float* dv) override;
  void rmsnorm_fwd(int64_t rows, int64_t dim, double eps, const float* x, const float* w, float* y,
                   float* rstd) override;
  void rmsnorm_bwd(int64_t rows, int64_t dim, const float* x, const float* w, const float* rstd, const float* dy,
                   float* dx, float* dw) override;
  void layernorm_fwd(int64_t rows, int64_t dim, double eps, const float* x, const float* w, const float* b, float* y,
                     float* mean, float* rstd) override;
  void layernorm_bwd(int64_t rows, int64_t dim, const float* x, const float* w, const float* mean, const float* rstd,
                     const float* dy, float* dx, float* dw, float* db) override;
  void rope_fwd(const RopeShape& s, const float* x, float* y) override;
  void rope_bwd(const RopeShape& s, const float* dy, float* dx) override;
  void swiglu_fwd(int64_t n, const float* a, const float* b, float* y) override;
  void swiglu_bwd(int64_t n, const float* a, const float* b, const float* dy, float* da, float* db) override;
  void gelu_fwd(int64_t n, const float* a, float* y) override;
  void gelu_bwd(int64_t n, const float* a, const float* dy, float* da) override;
  void add(int64_t n, const float* a, const float* b, float* y) override;
  void accumulate(int64_t n, const float* a, float* y) override;
  void adamw(int64_t n, const AdamWParams& h, float* p, const float* g, float* m, float* v) override;
  void embedding_fwd(int64_t tokens, int64_t vocab_local, int64_t dim, int64_t vocab_offset, bool vocab_sharded,
                     const int32_t* ids, const float* weight, float* out) override;
  void embedding_bwd(int64_t tokens, int64_t vocab_local, int64_t dim, int64_t vocab_offset, bool vocab_sharded,
                     const int32_t* ids, const float* d_out, float* d_weight) override;
  void ce_row_max(int64_t tokens, int64_t vocab_local, const float* logits, float* max) override;
  void ce_sum_exp(int64_t tokens, int64_t vocab_local, const float* logits, const float* max, float* sumexp) override;
  void ce_target_logit(int64_t tokens, int64_t vocab_local, int64_t vocab_offset, const float* logits,
                       const int32_t* targets, float* tlogit) override;
  void ce_loss(int64_t tokens, const float* max, const float* sumexp, const float* tlogit, float* loss) override;
  void ce_backward(int64_t tokens, int64_t vocab_local, int64_t vocab_offset, const float* logits, const float* max,
                   const float* sumexp, const int32_t* targets, float* d_logits) override;
  void fp8_amax(int64_t n, const float* x, float* amax) override;
  void fp8_cast(int64_t n, DType to, const float* x, const float* amax, float* xq, float* scale) override;

  RequestPtr all_reduce(Group g, ReduceOp op, const float* in, float* out, int64_t n) override;
  RequestPtr all_gather(Group g, const float* in, float* out, int64_t n) override;
  RequestPtr reduce_scatter(Group g, ReduceOp op, const float* in, float* out, int64_t n) override;
  RequestPtr all_to_all(Group g, const float* in, float* out, int64_t n) override;
  RequestPtr send_recv(Group g, const float* send, int dst, float* recv, int src, int64_t n) override;

  std::unique_ptr<Timer> make_timer() override;
  void synchronize() override {}

  // Watchdog: a collective's `wait` that has not completed after `seconds` throws tptune::Error ("all_reduce did
  // not complete within 3 s ..."); 0 waits forever (the default).
  void set_timeout(double seconds) { timeout_s_ = seconds; }

 private:
  MPI_Comm comm(Group g) const { return g == Group::tp ? tp_ : dp_; }
  MPI_Comm tp_, dp_;
  int tag_ = 0;  // next send_recv tag
  double timeout_s_ = 0;
};

}  // namespace tptune
