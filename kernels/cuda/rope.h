#pragma once
// Rotary position embedding (RoPE) forward and backward on CUDA.
//
// Contract: the Backend calls rope_fwd/rope_bwd (runtime/backend.h, RopeShape) and the CPU reference
// kernels/cpu/rope.h: x (batch, seq, heads * head_dim) of T (float or __nv_bfloat16), adjacent pairs
// (x[2i], x[2i+1]) rotated by pos * theta^(-2i/head_dim), pos = offset + s; backward rotates by the opposite
// angle. y may alias x. Angles, cos/sin and the rotation in double (the CPU's arithmetic, kernels/formulas/rope.h),
// computed once per (token, pair) and applied to every head. Throws std::invalid_argument for an odd or non-positive
// head_dim or theta <= 0, as the CPU reference does.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tptune::cuda {

// The fields of runtime/backend.h's RopeShape (kernels/ may not include runtime/).
struct RopeDims {
  int64_t batch = 0, seq = 0, heads = 0, head_dim = 0, offset = 0;
  double theta = 10000.0;
};

template <class T>
void rope_fwd(cudaStream_t stream, const RopeDims& s, const T* x, T* y);
template <class T>
void rope_bwd(cudaStream_t stream, const RopeDims& s, const T* dy, T* dx);
// rope_qk (ElementwiseOp rope_qk / rope_qk_bwd): q (dims dq) and k (dims dk) rotated in one launch (the packed
// kernel's grid covers q's items, then k's); each result equals rope_fwd / rope_bwd of that tensor. Tensors the packed
// path does not take run as two rotations.
template <class T>
void rope_qk_fwd(cudaStream_t stream, const RopeDims& dq, const RopeDims& dk, const T* q, const T* k, T* qo, T* ko);
template <class T>
void rope_qk_bwd(cudaStream_t stream, const RopeDims& dq, const RopeDims& dk, const T* dq_in, const T* dk_in, T* dqo,
                 T* dko);

}  // namespace tptune::cuda
