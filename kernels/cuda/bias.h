#pragma once
// A Linear's bias on CUDA: the twins of kernels/cpu/bias.h.
//
// Contract: the Backend calls bias_add / bias_grad (runtime/backend.h) with typed device pointers; T is float or
// __nv_bfloat16 (explicitly instantiated in bias.cu).
//   bias_add   y (rows, n) = x + b / split, b (n) broadcast over the rows; y may alias x.
//   bias_grad  db (n) = the column sums of dy (rows, n); written, never accumulated into.
// Every call is stream-ordered on `stream` and returns before the work is done.
// Precision: operands are widened to float exactly (bf16); bias_add computes in double and rounds once to T, as the
// CPU reference; bias_grad sums each column in double in row order (one thread per column: the CPU reference's
// order) and rounds once.
// Cost (napkin): memory-bound; bias_add reads and writes rows*n elements, bias_grad reads them once.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tptune::cuda {

template <class T>
void bias_add(cudaStream_t stream, int64_t rows, int64_t n, int split, const T* x, const T* b, T* y);
template <class T>
void bias_grad(cudaStream_t stream, int64_t rows, int64_t n, const T* dy, T* db);

}  // namespace tptune::cuda
