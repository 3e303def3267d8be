// Typed copies; see copy.h.
#include "kernels/cuda/copy.h"
#include "kernels/cuda/device/check.h"
#include "kernels/cuda/device/device_element.cuh"

namespace tptune::cuda {
namespace {

using namespace kernel_names;  // kernels/cuda/device/device_element.cuh

template <class From, class To>
__global__ void convert_kernel(int64_t n, const From* x, To* y) {
  TPTUNE_GRID_STRIDE(i, n) {
    if constexpr (std::is_same_v<From, To>)
      y[i] = x[i];
    else
      y[i] = from_float<To>(to_float(x[i]));
  }
}

}  // namespace

template <class T>
void copy2d(cudaStream_t stream, T* dst, int64_t dst_ld, const T* src, int64_t src_ld, int64_t rows, int64_t cols) {
  require(rows >= 0 && cols >= 0, "copy2d", "negative rows or cols");
  if (rows == 0 || cols == 0) return;
  require(dst_ld >= cols && src_ld >= cols, "copy2d", "leading dimensions must be >= cols");
  check_cuda(cudaMemcpy2DAsync(dst, size_t(dst_ld) * sizeof(T), src, size_t(src_ld) * sizeof(T),
                               size_t(cols) * sizeof(T), size_t(rows), cudaMemcpyDeviceToDevice, stream),
             "copy2d", "cudaMemcpy2DAsync");
}

template <class From, class To>
void convert(cudaStream_t stream, int64_t n, const From* x, To* y) {
  require(n >= 0, "convert", "negative element count");
  if (n == 0) return;
  convert_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, x, y);
  check_launch("convert");
}

template void copy2d<float>(cudaStream_t, float*, int64_t, const float*, int64_t, int64_t, int64_t);
template void copy2d<__nv_bfloat16>(cudaStream_t, __nv_bfloat16*, int64_t, const __nv_bfloat16*, int64_t, int64_t,
                                    int64_t);
template void copy2d<__nv_fp8_e4m3>(cudaStream_t, __nv_fp8_e4m3*, int64_t, const __nv_fp8_e4m3*, int64_t, int64_t,
                                    int64_t);
template void copy2d<__nv_fp8_e5m2>(cudaStream_t, __nv_fp8_e5m2*, int64_t, const __nv_fp8_e5m2*, int64_t, int64_t,
                                    int64_t);
template void copy2d<int32_t>(cudaStream_t, int32_t*, int64_t, const int32_t*, int64_t, int64_t, int64_t);

#define TPTUNE_CONVERT_FROM(From)                                                                 \
  template void convert<From, float>(cudaStream_t, int64_t, const From*, float*);                 \
  template void convert<From, __nv_bfloat16>(cudaStream_t, int64_t, const From*, __nv_bfloat16*); \
  template void convert<From, __nv_fp8_e4m3>(cudaStream_t, int64_t, const From*, __nv_fp8_e4m3*); \
  template void convert<From, __nv_fp8_e5m2>(cudaStream_t, int64_t, const From*, __nv_fp8_e5m2*);
TPTUNE_CONVERT_FROM(float)
TPTUNE_CONVERT_FROM(__nv_bfloat16)
TPTUNE_CONVERT_FROM(__nv_fp8_e4m3)
TPTUNE_CONVERT_FROM(__nv_fp8_e5m2)

}  // namespace tptune::cuda
