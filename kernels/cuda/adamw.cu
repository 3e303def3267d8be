// Multi-tensor AdamW; see adamw.h. The tensors of one launch travel in the kernel's parameter block (a Batch:
// pointers, sizes and the prefix sums of their block counts); block b finds its tensor by binary search over the
// prefix sums and updates kChunk consecutive elements of it, in 16-byte packs where the tensor's arrays allow.
#include <algorithm>
#include <string>

#include "kernels/cuda/adamw.h"
#include "kernels/cuda/device/check.h"
#include "kernels/cuda/device/device_element.cuh"
#include "kernels/formulas/adamw.h"

namespace tptune::cuda {

using namespace formulas;  // the per-element formulas the CPU reference shares (kernels/formulas/)
namespace {

using namespace kernel_names;  // kernels/cuda/device/device_element.cuh

constexpr int64_t kChunk = kThreads * 16;                   // elements per block (a multiple of kPack)
constexpr int kPack = 4;                                    // fp32 elements in 16 bytes
constexpr int kPacksPerThread = kChunk / kPack / kThreads;  // 4: a block's chunk in one round

template <class T>
struct Batch {
  AdamWTensor<T> tensors[kAdamWMaxTensorsPerLaunch];
  int64_t block_start[kAdamWMaxTensorsPerLaunch + 1];  // tensor i owns blocks [block_start[i], block_start[i+1])
  bool packed[kAdamWMaxTensorsPerLaunch];              // p, g, m, v aligned to packs of kPack elements
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
  int64_t first_scalar = begin;
  if (batch.packed[lo]) {  // whole packs of kPack elements: 16-byte loads of p, m, v (8 or 16 of g)
    const int64_t pack_end = begin + (end - begin) / kPack * kPack;
    const int64_t k0 = begin / kPack, k1 = pack_end / kPack;
    // kPacksPerThread packs per thread per round, all loaded before any is updated (the loads in flight together).
    for (int64_t base = k0 + threadIdx.x; base < k1; base += int64_t(blockDim.x) * kPacksPerThread) {
      Pack<float, kPack> p[kPacksPerThread], m[kPacksPerThread], v[kPacksPerThread];
      Pack<T, kPack> g[kPacksPerThread];
#pragma unroll
      for (int u = 0; u < kPacksPerThread; ++u) {
        const int64_t k = base + int64_t(u) * blockDim.x;
        if (k < k1) {
          p[u] = load_pack<kPack>(t.p, k);
          m[u] = load_pack<kPack>(t.m, k);
          v[u] = load_pack<kPack>(t.v, k);
          g[u] = load_pack<kPack>(t.g, k);
        }
      }
#pragma unroll
      for (int u = 0; u < kPacksPerThread; ++u) {
        const int64_t k = base + int64_t(u) * blockDim.x;
        if (k < k1) {
#pragma unroll
          for (int j = 0; j < kPack; ++j)
            adamw_elem(batch.c, p[u].v[j], double(to_float(g[u].v[j])), m[u].v[j], v[u].v[j]);
          store_pack<kPack>(t.p, k, p[u]);
          store_pack<kPack>(t.m, k, m[u]);
          store_pack<kPack>(t.v, k, v[u]);
        }
      }
    }
    first_scalar = pack_end;
  }
  for (int64_t i = first_scalar + threadIdx.x; i < end; i += blockDim.x) {
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
      batch.packed[batch.count] = pack_aligned(t.p, sizeof(float), kPack) && pack_aligned(t.m, sizeof(float), kPack) &&
                                  pack_aligned(t.v, sizeof(float), kPack) && pack_aligned(t.g, sizeof(T), kPack);
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
