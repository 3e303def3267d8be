#pragma once
// Device-side helpers shared by the .cu files (not part of the public interface): widening an element of T to
// float, rounding a float/double to T, the compute type of the elementwise formulas, launch sizes and a
// deterministic block reduction.

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/formulas/bf16.h"
#include "kernels/formulas/float8.h"

namespace tptune::cuda::detail {

using namespace tptune::formulas;  // bf16 and float8 as bit patterns (kernels/formulas/)

// Widening (exact).
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return bf16_bits_to_float(__bfloat16_as_ushort(x)); }
__device__ __forceinline__ float to_float(__nv_fp8_e4m3 x) { return fp8_decode(x.__x, Fp8::e4m3); }
__device__ __forceinline__ float to_float(__nv_fp8_e5m2 x) { return fp8_decode(x.__x, Fp8::e5m2); }

// Narrowing: round to nearest even (float8: saturating), through the shared formulas.
template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
// bf16: the conversion instruction (cvt.rn.bf16.f32, sm_80+), which is float_to_bf16_bits for every non-NaN float
// (kernels/formulas/bf16.h; tests/kernels/cuda/conversions_host_test.cc), and the shared formula for NaN (its
// sign-preserving quiet NaN; the instruction's is the canonical 0x7FFF). The formula's integer rounding took ~6
// instructions an element, a measurable share of a memory-bound kernel on an H200.
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if (!isnan(x)) return __float2bfloat16_rn(x);
#endif
  return __ushort_as_bfloat16(float_to_bf16_bits(x));
}
template <>
__device__ __forceinline__ __nv_fp8_e4m3 from_float<__nv_fp8_e4m3>(float x) {
  __nv_fp8_e4m3 r;
  r.__x = fp8_encode(x, Fp8::e4m3);
  return r;
}
template <>
__device__ __forceinline__ __nv_fp8_e5m2 from_float<__nv_fp8_e5m2>(float x) {
  __nv_fp8_e5m2 r;
  r.__x = fp8_encode(x, Fp8::e5m2);
  return r;
}
// A double result is rounded to float first (as the CPU reference stores it), then to T.
template <class T>
__device__ __forceinline__ T from_double(double x) {
  return from_float<T>(float(x));
}

// The compute type of the elementwise formulas: the CPU reference's double for fp32 tensors, float for bf16.
template <class T>
using Compute = std::conditional_t<std::is_same_v<T, float>, double, float>;

// Float8 format of a storage type.
template <class F8>
__host__ __device__ constexpr Fp8 fp8_format_of() {
  static_assert(std::is_same_v<F8, __nv_fp8_e4m3> || std::is_same_v<F8, __nv_fp8_e5m2>);
  return std::is_same_v<F8, __nv_fp8_e4m3> ? Fp8::e4m3 : Fp8::e5m2;
}

constexpr int kThreads = 256;

// for (int64_t i = global thread index; i < n; i += total threads)
#define TPTUNE_GRID_STRIDE(i, n) \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

// Blocks for a grid-stride loop over n elements: enough to fill the device, capped (the loop covers the rest).
inline unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return unsigned(std::clamp<int64_t>(blocks, 1, 65536));
}

// ---- 16-byte accesses --------------------------------------------------------------------------------------------
// Memory-bound kernels move their elements in packs of N consecutive elements, one vector load or store per pack
// (N = 16 bytes / the element size: 8 bf16, 4 fp32, 16 float8), when every pointer of the launch is aligned to its
// pack; otherwise they fall back to N = 1 (a view at an odd offset). Pack k of an array holds elements
// [k N, k N + N).
template <class T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};
template <class T>
inline constexpr int kPack = int(16 / sizeof(T));  // elements of T in 16 bytes

template <int N, class T>
__device__ __forceinline__ Pack<T, N> load_pack(const T* p, int64_t k) {
  return reinterpret_cast<const Pack<T, N>*>(p)[k];
}
template <int N, class T>
__device__ __forceinline__ void store_pack(T* p, int64_t k, const Pack<T, N>& x) {
  reinterpret_cast<Pack<T, N>*>(p)[k] = x;
}

// True when p is aligned for a pack of n elements of `elem_bytes` each (null pointers count as aligned).
inline bool pack_aligned(const void* p, size_t elem_bytes, int n) {
  return reinterpret_cast<uintptr_t>(p) % (elem_bytes * size_t(n)) == 0;
}

// Blocks for a grid-stride loop over `items` (packs or elements) of kThreads per block: one item per thread up to
// a cap of 8 waves of 2048 resident threads on a 132-SM part (the loop covers the rest).
inline unsigned grid_for_items(int64_t items) {
  const int64_t blocks = (items + kThreads - 1) / kThreads;
  return unsigned(std::clamp<int64_t>(blocks, 1, 132 * 8 * 8));
}

// An elementwise map over n elements: f.template apply<N>(k) handles pack k (elements [kN, kN + N)), for every
// whole pack; the n % N elements after the last whole pack go to f.template apply<1>(element index).
template <int N, class F>
__global__ void packed_map_kernel(int64_t n, F f) {
  const int64_t packs = n / N;
  TPTUNE_GRID_STRIDE(k, packs) f.template apply<N>(k);
  if constexpr (N > 1) {
    const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, first = packs * N;
    if (t < n - first) f.template apply<1>(first + t);
  }
}

// Launches packed_map_kernel with N = `pack` when `aligned` (every pointer of f aligned to its pack), else N = 1.
template <int pack, class F>
void launch_packed_map(cudaStream_t stream, int64_t n, bool aligned, const F& f) {
  if (aligned)
    packed_map_kernel<pack><<<grid_for_items(n / pack + 1), kThreads, 0, stream>>>(n, f);
  else
    packed_map_kernel<1><<<grid_for_items(n), kThreads, 0, stream>>>(n, f);
}

// Sum of one double per thread over the block (blockDim.x a multiple of 32, <= 1024), in a fixed order: warp
// shuffles, then warp 0 over the warp sums. Every thread gets the result. `shared` holds 33 doubles.
__device__ __forceinline__ double block_sum(double v, double* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    double w = lane < warps ? shared[lane] : 0.0;
    for (int o = 16; o > 0; o >>= 1) w += __shfl_xor_sync(0xFFFFFFFFu, w, o);
    if (lane == 0) shared[32] = w;
  }
  __syncthreads();
  return shared[32];
}

// Max of one float per thread over the block, NaN-ignoring like std::max(m, x) from -inf (the CPU row max).
__device__ __forceinline__ float nan_ignoring_max(float m, float x) { return m < x ? x : m; }
__device__ __forceinline__ float block_max(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) v = nan_ignoring_max(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < warps ? shared[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1) w = nan_ignoring_max(w, __shfl_xor_sync(0xFFFFFFFFu, w, o));
    if (lane == 0) shared[32] = w;
  }
  __syncthreads();
  return shared[32];
}

}  // namespace tptune::cuda::detail

// The helpers above that the kernel files use unqualified, stated once: each file opens its anonymous namespace with
// `using namespace kernel_names;`. A using-directive, not detail's own: a file may define a name of its own beside
// them (adamw.cu's kPack) without an ambiguity.
namespace tptune::cuda::kernel_names {
using detail::block_max;
using detail::block_sum;
using detail::Compute;
using detail::fp8_format_of;
using detail::from_double;
using detail::from_float;
using detail::grid_for;
using detail::kThreads;
using detail::launch_packed_map;
using detail::load_pack;
using detail::Pack;
using detail::pack_aligned;
using detail::store_pack;
using detail::to_float;
}  // namespace tptune::cuda::kernel_names
