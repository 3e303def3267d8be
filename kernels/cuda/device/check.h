#pragma once
// One error mechanism for the CUDA kernels: every CUDA / cuDNN status is checked, and a failure throws
// std::runtime_error naming the kernel and the call ("cuda kernel rmsnorm_fwd: cudaLaunchKernel: invalid
// configuration argument"). kernels/ may include nothing from plans/, so this is std::runtime_error rather than
// tptune::Error; the CUDA backend (runtime/cuda/) lets it propagate or rewraps it with the op's name.
// Bad arguments (an odd head_dim, a negative size) throw std::invalid_argument naming the kernel, as the CPU
// reference kernels do.

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace tptune::cuda {

[[noreturn]] inline void throw_cuda_error(const char* kernel, const char* call, const std::string& what) {
  throw std::runtime_error(std::string("cuda kernel ") + kernel + ": " + call + ": " + what);
}

// Throws when `status` is not cudaSuccess.
inline void check_cuda(cudaError_t status, const char* kernel, const char* call) {
  if (status != cudaSuccess) throw_cuda_error(kernel, call, cudaGetErrorString(status));
}

// After a <<<...>>> launch: a bad configuration shows up in cudaGetLastError.
inline void check_launch(const char* kernel) { check_cuda(cudaGetLastError(), kernel, "kernel launch"); }

// Precondition of a launcher's arguments.
inline void require(bool ok, const char* kernel, const std::string& what) {
  if (!ok) throw std::invalid_argument(std::string("cuda kernel ") + kernel + ": " + what);
}

}  // namespace tptune::cuda
