// Tensorwise float8 CUDA kernels; see float8.h.
#include "kernels/cuda/device/check.h"
#include "kernels/cuda/device/device_element.cuh"
#include "kernels/cuda/float8.h"
#include "kernels/formulas/float8.h"

namespace tptune::cuda {

using namespace formulas;  // the per-element formulas the CPU reference shares (kernels/formulas/)
namespace {

using namespace kernel_names;  // kernels/cuda/device/device_element.cuh

// amax as the bits of |x|: unsigned order = value order for non-negative floats, NaN (sign cleared) above +inf.
// Each thread reduces its 16-byte packs (grid-stride), the block reduces its threads (warp shuffles, then the
// warps' maxima through shared memory), and one atomicMax per block (not per warp) meets at the one address.
template <int N, class T>
__global__ void amax_kernel(int64_t n, const T* x, unsigned int* amax_bits) {
  __shared__ unsigned int warp_max[32];
  unsigned int m = 0;
  const int64_t packs = n / N, stride = int64_t(gridDim.x) * blockDim.x;
  // kInFlight packs per thread per round, loaded before any is reduced (the loads of one round in flight together).
  constexpr int kInFlight = 4;
  for (int64_t base = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; base < packs; base += stride * kInFlight) {
    Pack<T, N> p[kInFlight];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u)
      if (base + u * stride < packs) p[u] = load_pack<N>(x, base + u * stride);
#pragma unroll
    for (int u = 0; u < kInFlight; ++u)
      if (base + u * stride < packs) {
#pragma unroll
        for (int j = 0; j < N; ++j) {
          const unsigned int b = float_bits(to_float(p[u].v[j])) & 0x7FFFFFFFu;
          m = b > m ? b : m;
        }
      }
  }
  if constexpr (N > 1) {  // the n % N elements after the last whole pack
    const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, first = packs * N;
    if (t < n - first) {
      const unsigned int b = float_bits(to_float(x[first + t])) & 0x7FFFFFFFu;
      m = b > m ? b : m;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned int other = __shfl_xor_sync(0xFFFFFFFFu, m, o);
    m = other > m ? other : m;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_max[warp] = m;
  __syncthreads();
  if (warp == 0) {
    m = lane < int(blockDim.x / 32) ? warp_max[lane] : 0u;
    for (int o = 16; o > 0; o >>= 1) {
      const unsigned int other = __shfl_xor_sync(0xFFFFFFFFu, m, o);
      m = other > m ? other : m;
    }
    if (lane == 0 && m != 0) atomicMax(amax_bits, m);
  }
}

// fp8_quantize (kernels/formulas/float8.h) of a pair, with the rounding done by the conversion instruction where the
// GPU has one (sm_89 and later: cvt.rn.satfinite.{e4m3,e5m2}x2.f32, round to nearest even, saturating to the largest
// finite value, as the shared formula; two elements an instruction); a pair with a NaN product goes through the
// formula (the instruction's NaN code is always 0x7F). The products stay IEEE (__fmul_rn), whose NaN is the device's
// canonical positive one: a negative NaN input gives 0x7F here, as torch's CUDA cast gives it, where the CPU's x86
// multiply keeps the sign (0xFF). The [cuda] float8 test checks every code bit for bit against the CPU emulation on
// inputs whose NaNs are positive.
template <class F8>
__device__ __forceinline__ void quantize_pair(float a, float b, float m, F8& qa, F8& qb) {
  constexpr Fp8 f = fp8_format_of<F8>();
  const float pa = __fmul_rn(a, m), pb = __fmul_rn(b, m);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if (!isnan(pa) && !isnan(pb)) {
    const __nv_fp8x2_storage_t two =
        __nv_cvt_float2_to_fp8x2(make_float2(pa, pb), __NV_SATFINITE, f == Fp8::e4m3 ? __NV_E4M3 : __NV_E5M2);
    qa.__x = uint8_t(two & 0xFFu), qb.__x = uint8_t(two >> 8);  // x.x in the low byte
    return;
  }
#endif
  qa.__x = fp8_encode(pa, f), qb.__x = fp8_encode(pb, f);
}

// The cast, in items of 16 elements: 16 x sizeof(T) bytes read as 16-byte packs of T, one 16-byte store of codes
// (bf16: two loads and a store an item). A thread loads kInFlight items before converting any (a copy's rate needs
// ~40 KB in flight per SM), the multiplier is computed once per thread (one double division), and thread 0 writes
// the scale. kVec false (x or xq not 16-byte aligned): each element is its own item.
constexpr int kCastInFlight = 2;
template <bool kVec, class T, class F8>
__global__ void cast_kernel(int64_t n, const T* x, const float* amax, F8* xq, float* scale) {
  constexpr Fp8 f = fp8_format_of<F8>();
  constexpr int kItem = kVec ? 16 : 1, kIn = kVec ? detail::kPack<T> : 1, kLoads = kItem / kIn,
                kInFlight = kCastInFlight;
  const float m = fp8_multiplier(*amax, f);
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, stride = int64_t(gridDim.x) * blockDim.x;
  if (t == 0) *scale = fp8_scale_of_multiplier(m);
  const int64_t items = n / kItem;
  for (int64_t base = t; base < items; base += stride * kInFlight) {
    Pack<T, kIn> p[kInFlight][kLoads];
#pragma unroll
    for (int u = 0; u < kInFlight; ++u)
      if (base + u * stride < items)
#pragma unroll
        for (int l = 0; l < kLoads; ++l) p[u][l] = load_pack<kIn>(x, (base + u * stride) * kLoads + l);
#pragma unroll
    for (int u = 0; u < kInFlight; ++u)
      if (base + u * stride < items) {
        Pack<F8, kItem> q;
        if constexpr (kVec) {
#pragma unroll
          for (int l = 0; l < kLoads; ++l)
#pragma unroll
            for (int j = 0; j < kIn; j += 2)
              quantize_pair(to_float(p[u][l].v[j]), to_float(p[u][l].v[j + 1]), m, q.v[l * kIn + j],
                            q.v[l * kIn + j + 1]);
        } else {
          F8 unused;
          quantize_pair(to_float(p[u][0].v[0]), 0.0f, m, q.v[0], unused);
        }
        store_pack<kItem>(xq, base + u * stride, q);
      }
  }
  if constexpr (kVec) {  // the n % 16 elements after the last whole item
    const int64_t first = items * kItem;
    if (t < n - first) {
      F8 unused;
      quantize_pair(to_float(x[first + t]), 0.0f, m, xq[first + t], unused);
    }
  }
}

}  // namespace

template <class T>
void fp8_amax(cudaStream_t stream, int64_t n, const T* x, float* amax) {
  require(n >= 0, "fp8_amax", "negative element count");
  check_cuda(cudaMemsetAsync(amax, 0, sizeof(float), stream), "fp8_amax", "cudaMemsetAsync (amax = 0)");
  if (n == 0) return;
  constexpr int N = detail::kPack<T>;
  auto* bits = reinterpret_cast<unsigned int*>(amax);
  if (pack_aligned(x, sizeof(T), N))
    amax_kernel<N><<<detail::grid_for_items((n / N + 3) / 4 + 1), kThreads, 0, stream>>>(n, x, bits);
  else
    amax_kernel<1><<<detail::grid_for_items(n), kThreads, 0, stream>>>(n, x, bits);
  check_launch("fp8_amax");
}

template <class T, class F8>
void fp8_cast(cudaStream_t stream, int64_t n, const T* x, const float* amax, F8* xq, float* scale) {
  require(n >= 0, "fp8_cast", "negative element count");
  if (pack_aligned(x, 1, 16) && pack_aligned(xq, 1, 16))
    cast_kernel<true>
        <<<detail::grid_for_items(n / 16 / kCastInFlight + 1), kThreads, 0, stream>>>(n, x, amax, xq, scale);
  else
    cast_kernel<false><<<detail::grid_for_items(n / kCastInFlight + 1), kThreads, 0, stream>>>(n, x, amax, xq, scale);
  check_launch("fp8_cast");
}

template void fp8_amax<float>(cudaStream_t, int64_t, const float*, float*);
template void fp8_amax<__nv_bfloat16>(cudaStream_t, int64_t, const __nv_bfloat16*, float*);
template void fp8_cast<float, __nv_fp8_e4m3>(cudaStream_t, int64_t, const float*, const float*, __nv_fp8_e4m3*, float*);
template void fp8_cast<float, __nv_fp8_e5m2>(cudaStream_t, int64_t, const float*, const float*, __nv_fp8_e5m2*, float*);
template void fp8_cast<__nv_bfloat16, __nv_fp8_e4m3>(cudaStream_t, int64_t, const __nv_bfloat16*, const float*,
                                                     __nv_fp8_e4m3*, float*);
template void fp8_cast<__nv_bfloat16, __nv_fp8_e5m2>(cudaStream_t, int64_t, const __nv_bfloat16*, const float*,
                                                     __nv_fp8_e5m2*, float*);

}  // namespace tptune::cuda
