#pragma once
// Typed copies on CUDA: the strided 2-D copy of the Backend, and element-type conversion.
//
// copy2d: dst[r*dst_ld + c] = src[r*src_ld + c] for r < rows, c < cols (the Backend's copy2d, typed; also the
//         plain copy with rows = 1). T: float, __nv_bfloat16, __nv_fp8_e4m3, __nv_fp8_e5m2, int32_t. One
//         cudaMemcpy2DAsync (device to device, stream-ordered); dst and src must not overlap.
// convert: y[i] = x[i] converted from From to To, for From, To in {float, __nv_bfloat16, __nv_fp8_e4m3,
//         __nv_fp8_e5m2} (uploads of fp32 host data into bf16/fp8 storage, dtype changes between ops, downloads
//         through fp32). Widening is exact; narrowing rounds to nearest even: to bf16 as __float2bfloat16_rn (NaN
//         stays NaN, overflow to inf), to float8 SATURATING (kernels/formulas/bf16.h, float8.h: bit-identical to the
//         CPU emulation; no scale: a scaled cast is fp8_cast). From == To is a copy.
// fill is in elementwise.h.

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tptune::cuda {

template <class T>
void copy2d(cudaStream_t stream, T* dst, int64_t dst_ld, const T* src, int64_t src_ld, int64_t rows, int64_t cols);

template <class From, class To>
void convert(cudaStream_t stream, int64_t n, const From* x, To* y);

}  // namespace tptune::cuda
