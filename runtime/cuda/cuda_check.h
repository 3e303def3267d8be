#pragma once
// One error mechanism for the CUDA backend: every CUDA runtime, cuBLASLt and NCCL status is checked, and a failure
// throws tptune::Error in one line naming the backend call and the library call, with the library's own message:
//   "cuda backend: gemm: cublasLtMatmul: CUBLAS_STATUS_NOT_SUPPORTED (m 4096, n 14336, k 4096, fp8_e4m3 x fp8_e5m2)"
// The kernels of kernels/cuda/ throw std::runtime_error / std::invalid_argument; the executor names the op around
// either (Executor::run_op).

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

namespace tptune::cudabe {

[[noreturn]] void throw_error(const char* where, const char* call, const std::string& what);

inline void check(cudaError_t s, const char* where, const char* call) {
  if (s != cudaSuccess) throw_error(where, call, cudaGetErrorString(s));
}
void check(cublasStatus_t s, const char* where, const char* call, const std::string& context = "");
void check(ncclResult_t s, const char* where, const char* call);

}  // namespace tptune::cudabe
