#pragma once
// Multi-tensor AdamW on CUDA: one launch updates many parameter tensors (as torch's fused/foreach AdamW does).
//
// Contract: the Backend's adamw (runtime/backend.h) and the CPU reference kernels/cpu/adamw.h, for a list of
// tensors: p (fp32 master weights), m, v (fp32 optimizer state) and g (the gradient, T = float or __nv_bfloat16)
// hold n elements each; p, m, v are updated in place for the 1-based `step` (std::invalid_argument if < 1).
// Each launch takes up to kAdamWMaxTensorsPerLaunch tensors (their pointers travel in the kernel's parameter
// block, no device-side table to allocate); a longer list takes ceil(count / that) launches.
// Precision: double per element, the CPU reference's operations in order (kernels/formulas/adamw.h); with FMA
// contraction off the fp32-gradient result is bit-identical to the CPU's. Cost (napkin): reads p, g, m, v and writes p,
// m, v: 26 bytes per parameter with a bf16 gradient, 28 with fp32.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "kernels/cpu/adamw.h"

namespace tptune::cuda {

template <class T>
struct AdamWTensor {
  float* p = nullptr;
  const T* g = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  int64_t n = 0;
};

inline constexpr int kAdamWMaxTensorsPerLaunch = 48;

template <class T>
void adamw(cudaStream_t stream, std::span<const AdamWTensor<T>> tensors, const kernels::AdamWConfig& config,
           int64_t step);

}  // namespace tptune::cuda
