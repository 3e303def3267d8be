#pragma once
// Tensorwise float8 on CUDA: amax, then torchao's saturating round-to-nearest-even cast (kernels/formulas/float8.h).
//
// Contract: the Backend's fp8_amax / fp8_cast (runtime/backend.h; CastFp8Op in plans/program/program.h) and the CPU
// emulation kernels/cpu/float8.h, bit-identical to it (kernels/formulas/float8.h is the shared formula, checked
// on the host over every code and a sweep of fp32 inputs).
//   fp8_amax: x (n) of T (float or __nv_bfloat16) -> *amax (device fp32) = max |x| (0 for n == 0, NaN if any x is
//             NaN). Exact and deterministic (an integer atomicMax on the bits of |x|: for non-negative floats the
//             bit order is the value order, and every NaN with its sign cleared is above +inf).
//   fp8_cast: x (n) of T, *amax (device fp32, already all-reduced when x is sharded) -> xq (n) float8 storage
//             (F8 = __nv_fp8_e4m3 or __nv_fp8_e5m2) and *scale (device fp32); with the multiplier
//             m = float(max_finite / max(amax, 1e-12)) (divided in double), xq = round(x * m), saturating, and
//             scale = 1 / m: real value = xq * scale. scale must not be null nor alias amax (thread 0 writes it while
//             every thread reads amax).
// Cost (napkin): amax reads n elements; cast reads n and writes n bytes.

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tptune::cuda {

template <class T>
void fp8_amax(cudaStream_t stream, int64_t n, const T* x, float* amax);

template <class T, class F8>
void fp8_cast(cudaStream_t stream, int64_t n, const T* x, const float* amax, F8* xq, float* scale);

}  // namespace tptune::cuda
