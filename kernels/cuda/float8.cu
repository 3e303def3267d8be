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

// fp8_quantize (kernels/formulas/float8.h) with the rounding done by the conversion instruction where the GPU has
// one (sm_89 and later: cvt.rn.satfinite, round to nearest even, saturating to the largest finite value, as the
// shared formula); NaN keeps the formula's sign-preserving code (the instruction's NaN drops the sign). The
// division stays IEEE (__fdiv_rn). The [cuda] float8 test checks every code bit for bit against the CPU
// emulation.
template <class F8>
__device__ __forceinline__ uint8_t quantize_fast(float x, float scale) {
  constexpr Fp8 f = fp8_format_of<F8>();
  const float q = __fdiv_rn(x, scale);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if (!isnan(q)) return __nv_cvt_float_to_fp8(q, __NV_SATFINITE, f == Fp8::e4m3 ? __NV_E4M3 : __NV_E5M2);
#endif
  return fp8_encode(q, f);
}

// The cast of pack k: x's N elements to N float8 codes, the scale from the (all-reduced) amax.
template <class T, class F8>
struct CastPacks {
  const T* x;
  const float* amax;
  F8* xq;
  float* scale;
  template <int N>
  __device__ void apply(int64_t k) const {
    constexpr Fp8 f = fp8_format_of<F8>();
    const float s = fp8_scale(*amax, f);
    if (k == 0 && scale) *scale = s;  // one writer: pack 0 of the packed pass (see fp8_cast)
    const Pack<T, N> p = load_pack<N>(x, k);
    Pack<F8, N> q;
#pragma unroll
    for (int j = 0; j < N; ++j) q.v[j].__x = quantize_fast<F8>(to_float(p.v[j]), s);
    store_pack<N>(xq, k, q);
  }
};

template <class F8>
__global__ void scale_kernel(const float* amax, float* scale) {
  *scale = fp8_scale(*amax, fp8_format_of<F8>());
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
  constexpr int N = detail::kPack<T>;
  const bool aligned = pack_aligned(x, sizeof(T), N) && pack_aligned(xq, sizeof(F8), N);
  if (n >= N && aligned) {  // pack 0 exists and writes the scale
    launch_packed_map<N>(stream, n, true, CastPacks<T, F8>{x, amax, xq, scale});
  } else {  // the scale is written even for n == 0, by its own one-thread launch
    scale_kernel<F8><<<1, 1, 0, stream>>>(amax, scale);
    check_launch("fp8_cast");
    if (n > 0) launch_packed_map<N>(stream, n, false, CastPacks<T, F8>{x, amax, xq, nullptr});
  }
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
