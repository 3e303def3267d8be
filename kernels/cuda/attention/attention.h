#pragma once
// Causal grouped-query attention (SDPA) forward and backward on CUDA.
//
// Contract: the Backend's attention_fwd/bwd (runtime/backend.h, AttentionShape) and the CPU reference
// kernels/cpu/attention.h: q, o, d_o, dq (batch, seq, n_heads * head_dim); k, v, dk, dv (batch, seq,
// n_kv_heads * head_dim); lse (batch, n_heads, seq) fp32, the natural-log sum of exp of the scaled scores;
// scale = 1/sqrt(head_dim); query head h reads kv head h / (n_heads / n_kv_heads). All outputs are written
// (dk, dv summed over the query heads that share a kv head).
//
// Two implementations:
// - T = __nv_bfloat16: cuDNN 9's fused flash attention (the SDPA operation graph PyTorch's cuDNN attention backend
//   runs), built through the cuDNN backend API of cudnn_graph.h (attention_cudnn.cu). The execution plan of each
//   shape is built once and cached in the AttentionPlanCache, which also owns the cuDNN handle and the workspace.
// - T = float: a simple, clearly-correct and SLOW reference kernel (attention_reference.cu: one thread block per
//   (batch, head, query row), fp32 with a two-pass softmax), so that the fp32 path works and so that the cuDNN
//   path has a device-side reference. It is not meant to be fast.
// The bf16 implementation is chosen when the AttentionPlanCache is made (AttentionImpl): cuDNN by default; the
// reference kernel on request (a run that must not depend on cuDNN, or that checks it), never as a silent fallback.
// Errors: every cuDNN/CUDA status is checked; a failure throws std::runtime_error naming the kernel, the call and
// cuDNN's message (e.g. a head_dim cuDNN does not support: it must be a multiple of 8, at most 256 on Hopper).

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "kernels/cpu/attention.h"
#include "kernels/cuda/device/scratch.h"

namespace tptune::cuda {

using kernels::AttentionDims;

// Which kernels run bf16 attention.
enum class AttentionImpl { cudnn, reference };

// Owns a cuDNN handle and the cuDNN execution plans built per (shape, direction). Device scratch (cuDNN's workspace,
// the reference backward's D) comes from `scratch` (kernels/cuda/device/scratch.h), taken per call and released after
// it: the CUDA backend passes its caching allocator, so no call allocates after the first step. Without one (the
// kernels' tests), the workspace is one cudaMalloc grown to the largest plan's need and D is stream-ordered. Not
// thread-safe; one per device (per CUDA backend). The workspace is shared by every call through the cache, so those
// calls must be ordered: issue them on one stream (the backend's compute stream). It is lazy: nothing is created until
// the first bf16 attention call through cuDNN (which needs the cuDNN library and a device).
class AttentionPlanCache {
 public:
  explicit AttentionPlanCache(AttentionImpl bf16 = AttentionImpl::cudnn, ScratchAllocator scratch = {});
  AttentionImpl bf16_impl() const { return bf16_; }
  const ScratchAllocator& scratch() const { return scratch_; }
  ~AttentionPlanCache();
  AttentionPlanCache(const AttentionPlanCache&) = delete;
  AttentionPlanCache& operator=(const AttentionPlanCache&) = delete;

  struct Impl;  // cuDNN objects; defined in attention_cudnn.cu
  Impl& impl();

 private:
  std::unique_ptr<Impl> impl_;
  AttentionImpl bf16_;
  ScratchAllocator scratch_;
};

// The cuDNN version the bf16 attention runs on (cudnnGetVersion() of the loaded library, e.g. 91900 for 9.19.0), or
// 0 when tptune_kernels was built without cuDNN. For the Profile's environment.
int64_t cudnn_version();

// The dispatching launchers: T = float runs the reference kernels below; T = __nv_bfloat16 runs cuDNN (throws
// std::runtime_error when the library was built without cuDNN), or the reference kernels when the cache was made
// with AttentionImpl::reference.
template <class T>
void attention_fwd(cudaStream_t stream, AttentionPlanCache& cache, const AttentionDims& s, const T* q, const T* k,
                   const T* v, T* o, float* lse);
template <class T>
void attention_bwd(cudaStream_t stream, AttentionPlanCache& cache, const AttentionDims& s, const T* q, const T* k,
                   const T* v, const T* o, const float* lse, const T* d_o, T* dq, T* dk, T* dv);

// The simple reference kernels, for T = float and T = __nv_bfloat16 (fp32 arithmetic either way): one block per
// (batch, head, query row) recomputes the row's scores in each of its passes (max, sum, output); the backward runs
// one block per query row for dq (and D_i = rowsum(dO * O)), then one block per (batch, kv head, key row) for dk and
// dv summed over the query heads of the group, so no atomics: deterministic. head_dim <= 512. O(seq^2 * head_dim)
// work with no tiling: SLOW by design. Scratch: D (batch, n_heads, seq) fp32, from `scratch`.
template <class T>
void attention_fwd_reference(cudaStream_t stream, const AttentionDims& s, const T* q, const T* k, const T* v, T* o,
                             float* lse);
template <class T>
void attention_bwd_reference(cudaStream_t stream, const AttentionDims& s, const T* q, const T* k, const T* v,
                             const T* o, const float* lse, const T* d_o, T* dq, T* dk, T* dv,
                             const ScratchAllocator& scratch = {});

}  // namespace tptune::cuda
