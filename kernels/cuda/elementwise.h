#pragma once
// Elementwise CUDA kernels: add, accumulate, fill, SwiGLU and GELU (tanh) forward and backward.
//
// Contract: the Backend calls of the same names (runtime/backend.h) with typed device pointers; T is float or
// __nv_bfloat16 (explicitly instantiated in elementwise.cu). All arrays hold n elements, any shape; outputs are
// written, never accumulated into (accumulate excepted: y += a), and may alias inputs of the same element.
// Every call is stream-ordered on `stream` and returns before the work is done.
// Precision: bf16 operands are widened to float exactly; SwiGLU/GELU compute in double for T = float (the CPU
// reference's arithmetic, kernels/formulas/activation.h) and in float for T = bf16; each result is rounded once
// to T (bf16: round to nearest even). add/accumulate compute a + b in float and round once.
// Cost (napkin): memory-bound; swiglu reads 2n and writes n elements (6 bytes per element in bf16).

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tptune::cuda {

// y = a + b.
template <class T>
void add(cudaStream_t stream, int64_t n, const T* a, const T* b, T* y);
// y += a.
template <class T>
void accumulate(cudaStream_t stream, int64_t n, const T* a, T* y);
// y[i] = value (rounded to T).
template <class T>
void fill(cudaStream_t stream, T* y, int64_t n, float value);

// y = silu(a) * b.
template <class T>
void swiglu_fwd(cudaStream_t stream, int64_t n, const T* a, const T* b, T* y);
// da = dy * b * silu'(a), db = dy * silu(a).
template <class T>
void swiglu_bwd(cudaStream_t stream, int64_t n, const T* a, const T* b, const T* dy, T* da, T* db);
// y = gelu_tanh(a).
template <class T>
void gelu_fwd(cudaStream_t stream, int64_t n, const T* a, T* y);
// da = dy * gelu_tanh'(a).
template <class T>
void gelu_bwd(cudaStream_t stream, int64_t n, const T* a, const T* dy, T* da);

}  // namespace tptune::cuda
