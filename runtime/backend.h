#pragma once
// The one narrow interface between the executor and a device: memory, GEMM, the kernels of the Program IR,
// collectives and timers. The CPU backend (runtime/cpu/) implements it with Eigen and MPI; a CUDA backend
// implements the same calls with cuBLASLt, NCCL and CUDA events.
//
// Contract.
// - Memory. `alloc` returns a zero-filled Buffer of `numel` elements in device memory, stored in one of the
//   Storage formats below. Which storage holds a tensor of a Program dtype is the backend's choice,
//   `storage_for(DType)`: the CPU backend stores every floating-point tensor as fp32 and computes in fp32 (bf16
//   only changes the byte counts the simulator uses; a float8 tensor holds fp32 values that are exactly
//   representable in its format, written by `fp8_cast`); the CUDA backend stores bf16 as bf16, float8 as one byte
//   per element, fp32 as fp32. Tokens and targets are int32 on every backend.
// - Typed pointers. Activations, weights and gradients are passed as DevPtr (a device pointer and its Storage), so
//   one call serves every storage and a backend dispatches on it. Statistics are plain `float*` into fp32 storage
//   whatever the activations are (the Program declares them fp32): norm rstd/mean, attention lse, cross-entropy
//   max/sumexp/tlogit/loss, float8 amax/scale, AdamW moments and master weights. Ids and targets are `int32_t*`.
//   A backend rejects a storage it cannot compute in with tptune::Error naming the call.
// - Host transfers (`upload`, `download`) take fp32 host data and convert to / from the storage (round to nearest
//   even; float8 values must be representable, as fp8_cast writes them).
// - Compute calls are stream-ordered: they may return before the work is done; `synchronize` waits for all of it.
//   On CPU they are plain synchronous calls.
// - Collectives run on a Group (the TP, DP, CP or pipeline group) and are non-blocking: they return a Request that
//   completes later; the executor calls `wait` before it reads the output or reuses the input. All ranks of a group
//   must issue the group's collectives in the same order (they do: every rank runs the same Program). Layouts are
//   rank-major (what MPI and NCCL do): all_gather writes rank i's `n` elements at out + i*n; reduce_scatter leaves
//   rank i with the reduction of in[i*n, (i+1)*n); all_to_all sends in[j*n, (j+1)*n) to rank j and writes what rank
//   i sent at out + i*n. Rearranging to a tensor dim (gather along the sequence, scatter along features) is the
//   executor's job, with `copy2d`. `in` and `out` of one collective have the same storage.
// - Timers measure device time between two points of the stream.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cpu/attention_block.h"  // the block and row types of ring attention (plain structs)
#include "plans/model/dtype.h"
#include "plans/program/program.h"

namespace tptune {

// How the elements of a device buffer are stored. fp8_* hold one byte per element (OCP e4m3fn / e5m2 bits).
enum class Storage { f32, bf16, fp8_e4m3, fp8_e5m2, i32 };
int storage_bytes(Storage s);  // 4, 2, 1, 1, 4
std::string_view to_string(Storage s);

// A typed device pointer: where the elements are and how they are stored. Used for inputs and outputs alike (the
// Backend's call says which it writes). A float* is an fp32 pointer (implicit conversion, so fp32 code reads as
// before).
struct DevPtr {
  void* ptr = nullptr;
  Storage storage = Storage::f32;
  DevPtr() = default;
  DevPtr(void* p, Storage s) : ptr(p), storage(s) {}
  DevPtr(float* p) : ptr(p), storage(Storage::f32) {}                            // NOLINT(google-explicit-constructor)
  DevPtr(const float* p) : ptr(const_cast<float*>(p)), storage(Storage::f32) {}  // NOLINT(google-explicit-constructor)
  // The pointer `elements` elements further on.
  DevPtr at(int64_t elements) const { return {static_cast<char*>(ptr) + elements * storage_bytes(storage), storage}; }
  // The fp32 pointer; throws tptune::Error naming `what` when the storage is not fp32.
  float* f32(const char* what) const;
};

// A device allocation. Cheap to copy (shared ownership); `ptr()` is the typed device pointer.
class Buffer {
 public:
  Buffer() = default;
  Buffer(std::shared_ptr<void> mem, int64_t numel, Storage storage)
      : mem_(std::move(mem)), numel_(numel), storage_(storage) {}
  int64_t numel() const { return numel_; }
  Storage storage() const { return storage_; }
  bool empty() const { return mem_ == nullptr; }
  DevPtr ptr() const { return {mem_.get(), storage_}; }
  float* f32() const { return storage_ == Storage::f32 ? static_cast<float*>(mem_.get()) : nullptr; }
  int32_t* i32() const { return storage_ == Storage::i32 ? static_cast<int32_t*>(mem_.get()) : nullptr; }

 private:
  std::shared_ptr<void> mem_;
  int64_t numel_ = 0;
  Storage storage_ = Storage::f32;
};

// C (m, n) = alpha * op(A) (m, k) x op(B) (k, n) [+ C when accumulate]; row-major, op(X) = X^T when trans.
// float8 operands: A and B hold exactly representable values and their real values are stored * scale; the scales
// are device fp32 scalars (scale_a/scale_b non-null), so C = scale_a * scale_b * (A_stored x B_stored).
// Accumulation is fp32 whatever the storages; C is rounded to its storage once.
struct GemmArgs {
  int64_t m = 0, n = 0, k = 0;
  DevPtr a, b, c;
  bool trans_a = false, trans_b = false, accumulate = false;
  const float* scale_a = nullptr;  // float8 operands only
  const float* scale_b = nullptr;
  DType a_dtype = DType::fp32, b_dtype = DType::fp32;
};

// Causal grouped-query attention on local heads; q (b, s, h*d), k/v (b, s, kvh*d), o like q, lse (b, h, s).
struct AttentionShape {
  int64_t batch = 0, seq = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  bool causal = true;
};

// Rotary embedding of x (b, s, heads*head_dim): position of row (i, t) is offset + t (offset: the first position
// of this rank's sequence shard).
struct RopeShape {
  int64_t batch = 0, seq = 0, heads = 0, head_dim = 0, offset = 0;
  double theta = 10000.0;
};

struct AdamWParams {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
  int step = 1;  // 1-based, for bias correction
};

// One tensor of a multi-tensor AdamW (Backend::adamw_multi): n elements of fp32 master weights p and moments m, v,
// the gradient g in its storage.
struct AdamWTensorRef {
  int64_t n = 0;
  float* p = nullptr;
  DevPtr g;
  float* m = nullptr;
  float* v = nullptr;
};

// A pending collective. `wait` blocks until it is complete (idempotent), or throws tptune::Error when the backend's
// watchdog timeout passes first (a peer that never joins).
class Request {
 public:
  virtual ~Request() = default;
  virtual void wait() = 0;
  // True when complete (non-blocking poll; drives progress on backends that need it).
  virtual bool test() = 0;
};
using RequestPtr = std::unique_ptr<Request>;

// Device time between start() and stop(); elapsed_us() synchronizes as needed.
class Timer {
 public:
  virtual ~Timer() = default;
  virtual void start() = 0;
  virtual void stop() = 0;
  virtual double elapsed_us() = 0;
};

// What a Profile records about where it ran.
struct BackendEnvironment {
  std::string backend;                                         // "cpu" | "cuda"
  std::string device;                                          // CPU model or GPU name
  int threads = 1;                                             // compute threads per rank (CPU)
  std::vector<std::pair<std::string, std::string>> details;    // device facts: {"sm_count", "132"}, {"driver", ...}
  std::vector<std::pair<std::string, std::string>> libraries;  // {"eigen", "3.4.0"}, {"mpi", "Open MPI v4.1.4"}
};

// "Open MPI v4.1.4": the MPI library's name and version (MPI_Get_library_version up to its first comma), or "" before
// MPI_Init. Both backends list it among their libraries: the ranks are MPI processes either way.
std::string mpi_library_version();

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendEnvironment environment() const = 0;
  virtual int group_size(Group g) const = 0;
  virtual int group_rank(Group g) const = 0;

  // --- memory ---
  // The storage of a floating-point tensor of Program dtype `t` (see the contract).
  virtual Storage storage_for(DType t) const = 0;
  virtual Buffer alloc(int64_t numel, Storage storage) = 0;
  virtual void upload(DevPtr dst, const float* host, int64_t n) = 0;  // converts fp32 -> dst.storage
  virtual void upload(int32_t* dst, const int32_t* host, int64_t n) = 0;
  virtual void download(float* host, DevPtr src, int64_t n) = 0;  // converts src.storage -> fp32
  virtual void download(int32_t* host, const int32_t* src, int64_t n) = 0;
  virtual void fill(DevPtr dst, int64_t n, float value) = 0;
  // dst[r*dst_ld + c] = src[r*src_ld + c] for r < rows, c < cols (strided 2-D copy; also the plain copy). Same
  // storage on both sides.
  virtual void copy2d(DevPtr dst, int64_t dst_ld, DevPtr src, int64_t src_ld, int64_t rows, int64_t cols) = 0;
  // dst = src converted to dst.storage (round to nearest even; to float8: saturating). The executor's fp32 master
  // weights and their compute copies.
  virtual void convert(DevPtr dst, DevPtr src, int64_t n) = 0;

  // --- compute ---
  virtual void gemm(const GemmArgs& g) = 0;
  virtual void attention_fwd(const AttentionShape& s, DevPtr q, DevPtr k, DevPtr v, DevPtr o, float* lse) = 0;
  virtual void attention_bwd(const AttentionShape& s, DevPtr q, DevPtr k, DevPtr v, DevPtr o, const float* lse,
                             DevPtr d_o, DevPtr dq, DevPtr dk, DevPtr dv) = 0;
  // Ring attention's blocks (context parallelism), as kernels/cpu/attention_block.h states them: the forward WRITES
  // o and lse of q's rows; the backward ADDS the block's shares into dq, dk, dv; merge folds (o_part, lse_part) into
  // (o, lse) at q's rows. The CPU backend runs them; the CUDA backend throws tptune::Error (not built).
  virtual void attention_block_fwd(const kernels::BlockHeads& h, kernels::BlockMask mask, kernels::SeqRows q_rows,
                                   kernels::SeqRows kv_rows, DevPtr q, DevPtr k, DevPtr v, DevPtr o, float* lse) = 0;
  virtual void attention_block_bwd(const kernels::BlockHeads& h, kernels::BlockMask mask, kernels::SeqRows q_rows,
                                   kernels::SeqRows kv_rows, DevPtr q, DevPtr k, DevPtr v, DevPtr o, const float* lse,
                                   DevPtr d_o, DevPtr dq, DevPtr dk, DevPtr dv) = 0;
  virtual void attention_merge(const kernels::BlockHeads& h, kernels::SeqRows q_rows, DevPtr o, float* lse,
                               DevPtr o_part, const float* lse_part) = 0;
  // Norms over the last dim of x (rows, dim); statistics (rows) fp32.
  virtual void rmsnorm_fwd(int64_t rows, int64_t dim, double eps, DevPtr x, DevPtr w, DevPtr y, float* rstd) = 0;
  virtual void rmsnorm_bwd(int64_t rows, int64_t dim, DevPtr x, DevPtr w, const float* rstd, DevPtr dy, DevPtr dx,
                           DevPtr dw) = 0;
  virtual void layernorm_fwd(int64_t rows, int64_t dim, double eps, DevPtr x, DevPtr w, DevPtr b, DevPtr y, float* mean,
                             float* rstd) = 0;
  virtual void layernorm_bwd(int64_t rows, int64_t dim, DevPtr x, DevPtr w, const float* mean, const float* rstd,
                             DevPtr dy, DevPtr dx, DevPtr dw, DevPtr db) = 0;
  virtual void rope_fwd(const RopeShape& s, DevPtr x, DevPtr y) = 0;
  virtual void rope_bwd(const RopeShape& s, DevPtr dy, DevPtr dx) = 0;
  // The fused ops of a compiled Program (ElementwiseOp add_rmsnorm, rmsnorm_bwd_add, rope_qk, rope_qk_bwd in
  // plans/program/program.h). add_rmsnorm: h = a + b, then rmsnorm of h (h, y (rows, dim)); rmsnorm_bwd_add: dx =
  // dres + rmsnorm_bwd's dx; rope_qk: rope of q (shape qs) and of k (shape ks) in one launch. Each equals the eager
  // ops it replaces. The defaults here run those eager ops one after the other (the CUDA backend until its fused
  // kernels land); the CPU backend runs the one-pass kernels of kernels/cpu/norms.h.
  virtual void add_rmsnorm_fwd(int64_t rows, int64_t dim, double eps, DevPtr a, DevPtr b, DevPtr w, DevPtr h, DevPtr y,
                               float* rstd);
  virtual void rmsnorm_bwd_add(int64_t rows, int64_t dim, DevPtr x, DevPtr w, const float* rstd, DevPtr dy, DevPtr dres,
                               DevPtr dx, DevPtr dw);
  virtual void rope_qk_fwd(const RopeShape& qs, const RopeShape& ks, DevPtr q, DevPtr k, DevPtr qo, DevPtr ko);
  virtual void rope_qk_bwd(const RopeShape& qs, const RopeShape& ks, DevPtr dq, DevPtr dk, DevPtr dqo, DevPtr dko);
  virtual void swiglu_fwd(int64_t n, DevPtr a, DevPtr b, DevPtr y) = 0;
  virtual void swiglu_bwd(int64_t n, DevPtr a, DevPtr b, DevPtr dy, DevPtr da, DevPtr db) = 0;
  virtual void gelu_fwd(int64_t n, DevPtr a, DevPtr y) = 0;
  virtual void gelu_bwd(int64_t n, DevPtr a, DevPtr dy, DevPtr da) = 0;
  virtual void add(int64_t n, DevPtr a, DevPtr b, DevPtr y) = 0;  // y = a + b
  virtual void accumulate(int64_t n, DevPtr a, DevPtr y) = 0;     // y += a
  // A Linear's bias (ElementwiseOp bias_add / bias_grad): y (rows, n) = x + b / split with b (n) broadcast over the
  // rows; db (n) = the column sums of dy (rows, n).
  virtual void bias_add(int64_t rows, int64_t n, int split, DevPtr x, DevPtr b, DevPtr y) = 0;
  virtual void bias_grad(int64_t rows, int64_t n, DevPtr dy, DevPtr db) = 0;
  // AdamW on fp32 master weights p with fp32 moments m, v; the gradient g in its storage.
  virtual void adamw(int64_t n, const AdamWParams& h, float* p, DevPtr g, float* m, float* v) = 0;
  // The same update of many tensors, as torch's foreach/fused AdamW: the CUDA backend launches its multi-tensor kernel
  // once per gradient storage (dtype group; kernels/cuda/adamw.h takes up to 48 tensors a launch), with the per-element
  // arithmetic of adamw() (kernels/formulas/adamw.h). Default: adamw() on each tensor in order.
  virtual void adamw_multi(const std::vector<AdamWTensorRef>& tensors, const AdamWParams& h);
  // Embedding: out (tokens, dim) = rows of weight (vocab_local, dim) for ids in [vocab_offset, +vocab_local), zero
  // rows otherwise (only allowed when vocab_sharded). Backward: d_weight = scatter-add of d_out rows (overwrites).
  virtual void embedding_fwd(int64_t tokens, int64_t vocab_local, int64_t dim, int64_t vocab_offset, bool vocab_sharded,
                             const int32_t* ids, DevPtr weight, DevPtr out) = 0;
  virtual void embedding_bwd(int64_t tokens, int64_t vocab_local, int64_t dim, int64_t vocab_offset, bool vocab_sharded,
                             const int32_t* ids, DevPtr d_out, DevPtr d_weight) = 0;
  // Staged (vocab-parallel) cross-entropy on logits (tokens, vocab_local) whose column 0 is vocab id vocab_offset;
  // see CrossEntropyOp in plans/program/program.h. The loss is the mean over `tokens`. Statistics (tokens) fp32.
  virtual void ce_row_max(int64_t tokens, int64_t vocab_local, DevPtr logits, float* max) = 0;
  virtual void ce_sum_exp(int64_t tokens, int64_t vocab_local, DevPtr logits, const float* max, float* sumexp) = 0;
  virtual void ce_target_logit(int64_t tokens, int64_t vocab_local, int64_t vocab_offset, DevPtr logits,
                               const int32_t* targets, float* tlogit) = 0;
  // The loss and the gradient divide by `mean_over` (CrossEntropyOp::divisor(): `tokens`, or the global token count
  // under FSDP / context parallelism); the CUDA backend supports mean_over == tokens only.
  virtual void ce_loss(int64_t tokens, int64_t mean_over, const float* max, const float* sumexp, const float* tlogit,
                       float* loss) = 0;
  virtual void ce_backward(int64_t tokens, int64_t mean_over, int64_t vocab_local, int64_t vocab_offset, DevPtr logits,
                           const float* max, const float* sumexp, const int32_t* targets, DevPtr d_logits) = 0;
  // Tensorwise float8 (torchao's): amax = max |x|; cast: m = max_finite(to) / max(amax, 1e-12), xq = round_to(x * m)
  // saturated, scale = 1 / m (kernels/formulas/float8.h).
  // xq's storage is the backend's storage_for(to).
  virtual void fp8_amax(int64_t n, DevPtr x, float* amax) = 0;
  virtual void fp8_cast(int64_t n, DType to, DevPtr x, const float* amax, DevPtr xq, float* scale) = 0;

  // --- collectives (non-blocking; see the contract above) ---
  // n: elements per rank (all_reduce: of the whole buffer). in == out is allowed for all_reduce only.
  virtual RequestPtr all_reduce(Group g, ReduceOp op, DevPtr in, DevPtr out, int64_t n) = 0;
  virtual RequestPtr all_gather(Group g, DevPtr in, DevPtr out, int64_t n) = 0;
  virtual RequestPtr reduce_scatter(Group g, ReduceOp op, DevPtr in, DevPtr out, int64_t n) = 0;
  virtual RequestPtr all_to_all(Group g, DevPtr in, DevPtr out, int64_t n) = 0;
  // Send `n` elements to group rank `dst` and receive `n` from group rank `src` (a ring step).
  virtual RequestPtr send_recv(Group g, DevPtr send, int dst, DevPtr recv, int src, int64_t n) = 0;
  // One way (a pipeline stage's transfer, plans/lower/rewrite/pipeline_stage.h): send `n` elements to group rank `dst`,
  // or receive `n` from group rank `src`, the two sides matched by `tag` (0 <= tag <= max_p2p_tag()): a send and a
  // receive pair when their peers and tags agree, whatever else is in flight between the two ranks. The peer may be
  // this rank itself (a local copy, once both sides are issued). The send's buffer must not change until it completes.
  virtual RequestPtr send(Group g, DevPtr data, int dst, int64_t n, int tag) = 0;
  virtual RequestPtr recv(Group g, DevPtr data, int src, int64_t n, int tag) = 0;
  // The largest tag send() and recv() take.
  virtual int max_p2p_tag() const = 0;

  // --- time ---
  virtual std::unique_ptr<Timer> make_timer() = 0;
  virtual void synchronize() = 0;
};

}  // namespace tptune
