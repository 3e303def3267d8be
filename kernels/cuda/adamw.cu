// Multi-tensor AdamW; see adamw.h. The tensors of one launch travel in the kernel's parameter block (a Batch:
// pointers, sizes and the prefix sums of their block counts); block b finds its tensor by binary search over the
// prefix sums and updates kChunk consecutive elements of it.
#include <algorithm>
#include <string>

#include "kernels/cuda/adamw.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_element.cuh"
#include "kernels/formulas/adamw.h"

namespace tptune::cuda {

using namespace formulas;  // the per-element formulas the CPU reference shares (kernels/formulas/)
namespace {

using detail::kThreads;
using detail::to_float;

constexpr int64_t kChunk = kThreads * 16;  // elements per block

template <class T>
struct Batch {
  AdamWTensor<T> tensors[kAdamWMaxTensorsPerLaunch];
  int64_t block_start[kAdamWMaxTensorsPerLaunch + 1];  // tensor i owns blocks [block_start[i], block_start[i+1])
  int count;
  AdamWConstants c;
};
// CUDA's portable kernel parameter limit is 4 KB.
static_assert(sizeof(Batch<float>) <= 4000 && sizeof(Batch<__nv_bfloat16>) <= 4000);

template <class T>
__global__ void adamw_kernel(const __grid_constant__ Batch<T> batch) {
  const int64_t block = blockIdx.x;
  int lo = 0, hi = batch.count - 1;  // the last tensor whose block_start <= block
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (batch.block_start[mid] <= block)
      lo = mid;
    else
      hi = mid - 1;
  }
  const AdamWTensor<T>& t = batch.tensors[lo];
  const int64_t begin = (block - batch.block_start[lo]) * kChunk;
  const int64_t end = begin + kChunk < t.n ? begin + kChunk : t.n;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    float p = t.p[i], m = t.m[i], v = t.v[i];
    adamw_elem(batch.c, p, double(to_float(t.g[i])), m, v);
    t.p[i] = p;
    t.m[i] = m;
    t.v[i] = v;
  }
}

}  // namespace

template <class T>
void adamw(cudaStream_t stream, std::span<const AdamWTensor<T>> tensors, const kernels::AdamWConfig& config,
           int64_t step) {
  require(step >= 1, "adamw", "step is 1-based, got " + std::to_string(step));
  const AdamWConstants c =
      adamw_constants(config.lr, config.beta1, config.beta2, config.eps, config.weight_decay, step);
  size_t next = 0;
  while (next < tensors.size()) {
    Batch<T> batch{};
    batch.c = c;
    batch.count = 0;
    int64_t blocks = 0;
    for (; next < tensors.size() && batch.count < kAdamWMaxTensorsPerLaunch; ++next) {
      const AdamWTensor<T>& t = tensors[next];
      require(t.n >= 0, "adamw", "negative element count");
      if (t.n == 0) continue;
      require(t.p && t.g && t.m && t.v, "adamw", "null pointer for a non-empty tensor");
      batch.tensors[batch.count] = t;
      batch.block_start[batch.count] = blocks;
      blocks += (t.n + kChunk - 1) / kChunk;
      ++batch.count;
    }
    batch.block_start[batch.count] = blocks;
    if (batch.count == 0) continue;
    require(blocks <= int64_t(0x7FFFFFFF), "adamw", "too many elements for one launch");
    adamw_kernel<T><<<unsigned(blocks), kThreads, 0, stream>>>(batch);
    check_launch("adamw");
  }
}

template void adamw<float>(cudaStream_t, std::span<const AdamWTensor<float>>, const kernels::AdamWConfig&, int64_t);
template void adamw<__nv_bfloat16>(cudaStream_t, std::span<const AdamWTensor<__nv_bfloat16>>,
                                   const kernels::AdamWConfig&, int64_t);

}  // namespace tptune::cuda
