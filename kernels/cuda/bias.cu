// A Linear's bias on CUDA; see bias.h.
#include "kernels/cuda/bias.h"
#include "kernels/cuda/device/check.h"
#include "kernels/cuda/device/device_element.cuh"

namespace tptune::cuda {
namespace {

using namespace kernel_names;  // kernels/cuda/device/device_element.cuh

template <class T>
__global__ void bias_add_kernel(int64_t rows, int64_t n, int split, const T* x, const T* b, T* y) {
  TPTUNE_GRID_STRIDE(i, rows * n) {
    const double v = double(to_float(x[i])) + double(to_float(b[i % n])) / split;
    y[i] = from_float<T>(float(v));
  }
}

template <class T>
__global__ void bias_grad_kernel(int64_t rows, int64_t n, const T* dy, T* db) {
  TPTUNE_GRID_STRIDE(c, n) {
    double sum = 0;
    for (int64_t r = 0; r < rows; ++r) sum += double(to_float(dy[r * n + c]));
    db[c] = from_float<T>(float(sum));
  }
}

}  // namespace

template <class T>
void bias_add(cudaStream_t stream, int64_t rows, int64_t n, int split, const T* x, const T* b, T* y) {
  require(rows >= 0 && n >= 0, "bias_add", "negative size");
  require(split >= 1, "bias_add", "split must be positive");
  if (rows == 0 || n == 0) return;
  bias_add_kernel<<<grid_for(rows * n), kThreads, 0, stream>>>(rows, n, split, x, b, y);
  check_launch("bias_add");
}

template <class T>
void bias_grad(cudaStream_t stream, int64_t rows, int64_t n, const T* dy, T* db) {
  require(rows >= 0 && n >= 0, "bias_grad", "negative size");
  if (n == 0) return;
  bias_grad_kernel<<<grid_for(n), kThreads, 0, stream>>>(rows, n, dy, db);
  check_launch("bias_grad");
}

#define TPTUNE_INSTANTIATE(T)                                                             \
  template void bias_add<T>(cudaStream_t, int64_t, int64_t, int, const T*, const T*, T*); \
  template void bias_grad<T>(cudaStream_t, int64_t, int64_t, const T*, T*);
TPTUNE_INSTANTIATE(float)
TPTUNE_INSTANTIATE(__nv_bfloat16)

}  // namespace tptune::cuda
