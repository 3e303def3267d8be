#pragma once
// RMSNorm and LayerNorm over the last dim, forward and backward, on CUDA.
//
// Contract: the Backend calls rmsnorm_fwd/bwd, layernorm_fwd/bwd (runtime/backend.h) and the CPU reference
// kernels/cpu/norms.h, with typed device pointers. x, y, dy, dx are (rows, dim) of T (float or __nv_bfloat16);
// w, b, dw, db are (dim) of T; mean and rstd are (rows) of fp32. Outputs are written, never accumulated into
// (dw/db are the sums over all rows of this call). y may alias x, and dx may alias x or dy (each row is read
// before it is written; the backward's column sums run before dx). eps is rounded to float first, as CpuBackend
// does.
// Precision and determinism: row statistics and the dw/db column sums accumulate in a fixed order (one block per
// row for the row sums, in double; for dw/db, fixed slabs of rows, then the slabs in order in double), so results
// are reproducible run to run; they differ from the CPU loop's order by rounding only.
// Scratch: the backward's dw/db partial sums come from `scratch` (kernels/cuda/device/scratch.h: the backend's caching
// allocator; empty: stream-ordered from the default pool): RMSNorm's packed path (rows aligned to 16 bytes, dim a
// whole number of 16-byte packs, at most 2048 of them) min(rows, 4 per SM) x dim partials (fp32 for bf16 tensors,
// double for fp32), the scalar path <= 64 x dim doubles.
// Cost (napkin): forward reads x and w once and writes y. RMSNorm backward on the packed path reads x and dy once
// and writes dx (plus the partials); LayerNorm backward and the scalar path read x and dy twice (row pass, column
// pass).

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device/scratch.h"

namespace tptune::cuda {

template <class T>
void rmsnorm_fwd(cudaStream_t stream, int64_t rows, int64_t dim, double eps, const T* x, const T* w, T* y, float* rstd);
template <class T>
void rmsnorm_bwd(cudaStream_t stream, int64_t rows, int64_t dim, const T* x, const T* w, const float* rstd, const T* dy,
                 T* dx, T* dw, const ScratchAllocator& scratch = {});
// The fused norms of a compiled Program (ElementwiseOp add_rmsnorm, rmsnorm_bwd_add; kernels/cpu/norms.h states the
// math): on the packed path one pass, the residual sum h = a + b (rounded to T, as the add kernel stores it) formed
// in registers, stored, and normed; the backward's dx plus dres (rounded as the add of the stored dx) stored once.
// Elsewhere the eager kernels one after the other. Results equal the eager pair's bit for bit.
template <class T>
void add_rmsnorm_fwd(cudaStream_t stream, int64_t rows, int64_t dim, double eps, const T* a, const T* b, const T* w,
                     T* h, T* y, float* rstd);
template <class T>
void rmsnorm_bwd_add(cudaStream_t stream, int64_t rows, int64_t dim, const T* x, const T* w, const float* rstd,
                     const T* dy, const T* dres, T* dx, T* dw, const ScratchAllocator& scratch = {});
template <class T>
void layernorm_fwd(cudaStream_t stream, int64_t rows, int64_t dim, double eps, const T* x, const T* w, const T* b, T* y,
                   float* mean, float* rstd);
template <class T>
void layernorm_bwd(cudaStream_t stream, int64_t rows, int64_t dim, const T* x, const T* w, const float* mean,
                   const float* rstd, const T* dy, T* dx, T* dw, T* db, const ScratchAllocator& scratch = {});

}  // namespace tptune::cuda
