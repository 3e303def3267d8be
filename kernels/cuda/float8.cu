// Tensorwise float8 CUDA kernels; see float8.h.
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_element.cuh"
#include "kernels/cuda/float8.h"
#include "kernels/formulas/float8.h"

namespace tptune::cuda {

using namespace formulas;  // the per-element formulas the CPU reference shares (kernels/formulas/)
namespace {

using detail::fp8_format_of;
using detail::grid_for;
using detail::kThreads;
using detail::to_float;

// amax as the bits of |x|: unsigned order = value order for non-negative floats, NaN (sign cleared) above +inf.
template <class T>
__global__ void amax_kernel(int64_t n, const T* x, unsigned int* amax_bits) {
  unsigned int m = 0;
  TPTUNE_GRID_STRIDE(i, n) {
    const unsigned int b = float_bits(to_float(x[i])) & 0x7FFFFFFFu;
    m = b > m ? b : m;
  }
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned int other = __shfl_xor_sync(0xFFFFFFFFu, m, o);
    m = other > m ? other : m;
  }
  if (threadIdx.x % 32 == 0 && m != 0) atomicMax(amax_bits, m);
}

template <class T, class F8>
__global__ void cast_kernel(int64_t n, const T* x, const float* amax, F8* xq, float* scale) {
  constexpr Fp8 f = fp8_format_of<F8>();
  const float s = fp8_scale(*amax, f);
  if (blockIdx.x == 0 && threadIdx.x == 0) *scale = s;
  TPTUNE_GRID_STRIDE(i, n) xq[i].__x = fp8_quantize(to_float(x[i]), s, f);
}

}  // namespace

template <class T>
void fp8_amax(cudaStream_t stream, int64_t n, const T* x, float* amax) {
  require(n >= 0, "fp8_amax", "negative element count");
  check_cuda(cudaMemsetAsync(amax, 0, sizeof(float), stream), "fp8_amax", "cudaMemsetAsync (amax = 0)");
  if (n == 0) return;
  amax_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, x, reinterpret_cast<unsigned int*>(amax));
  check_launch("fp8_amax");
}

template <class T, class F8>
void fp8_cast(cudaStream_t stream, int64_t n, const T* x, const float* amax, F8* xq, float* scale) {
  require(n >= 0, "fp8_cast", "negative element count");
  // Launched even for n == 0: the scale is written from amax all the same.
  cast_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, x, amax, xq, scale);
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
