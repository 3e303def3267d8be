// Elementwise CUDA kernels; see elementwise.h.
#include "kernels/cuda/check.h"
#include "kernels/cuda/device_element.cuh"
#include "kernels/cuda/elementwise.h"
#include "kernels/formulas/activation.h"

namespace tptune::cuda {

using namespace formulas;  // the per-element formulas the CPU reference shares (kernels/formulas/)
namespace {

using detail::Compute;
using detail::from_float;
using detail::grid_for;
using detail::kThreads;
using detail::to_float;

template <class T>
__global__ void add_kernel(int64_t n, const T* a, const T* b, T* y) {
  TPTUNE_GRID_STRIDE(i, n) y[i] = from_float<T>(to_float(a[i]) + to_float(b[i]));
}

template <class T>
__global__ void accumulate_kernel(int64_t n, const T* a, T* y) {
  TPTUNE_GRID_STRIDE(i, n) y[i] = from_float<T>(to_float(y[i]) + to_float(a[i]));
}

template <class T>
__global__ void fill_kernel(T* y, int64_t n, float value) {
  const T v = from_float<T>(value);
  TPTUNE_GRID_STRIDE(i, n) y[i] = v;
}

template <class T>
__global__ void swiglu_fwd_kernel(int64_t n, const T* a, const T* b, T* y) {
  using C = Compute<T>;
  TPTUNE_GRID_STRIDE(i, n) y[i] = from_float<T>(float(swiglu_fwd_elem(C(to_float(a[i])), C(to_float(b[i])))));
}

template <class T>
__global__ void swiglu_bwd_kernel(int64_t n, const T* a, const T* b, const T* dy, T* da, T* db) {
  using C = Compute<T>;
  TPTUNE_GRID_STRIDE(i, n) {
    const SwigluGrad<C> g = swiglu_bwd_elem(C(to_float(a[i])), C(to_float(b[i])), C(to_float(dy[i])));
    da[i] = from_float<T>(float(g.da));  // after all three reads: da/db may alias the inputs
    db[i] = from_float<T>(float(g.db));
  }
}

template <class T>
__global__ void gelu_fwd_kernel(int64_t n, const T* a, T* y) {
  using C = Compute<T>;
  TPTUNE_GRID_STRIDE(i, n) y[i] = from_float<T>(float(gelu_fwd_elem(C(to_float(a[i])))));
}

template <class T>
__global__ void gelu_bwd_kernel(int64_t n, const T* a, const T* dy, T* da) {
  using C = Compute<T>;
  TPTUNE_GRID_STRIDE(i, n) da[i] = from_float<T>(float(gelu_bwd_elem(C(to_float(a[i])), C(to_float(dy[i])))));
}

void check_n(int64_t n, const char* kernel) { require(n >= 0, kernel, "negative element count"); }

}  // namespace

template <class T>
void add(cudaStream_t stream, int64_t n, const T* a, const T* b, T* y) {
  check_n(n, "add");
  if (n == 0) return;
  add_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, a, b, y);
  check_launch("add");
}

template <class T>
void accumulate(cudaStream_t stream, int64_t n, const T* a, T* y) {
  check_n(n, "accumulate");
  if (n == 0) return;
  accumulate_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, a, y);
  check_launch("accumulate");
}

template <class T>
void fill(cudaStream_t stream, T* y, int64_t n, float value) {
  check_n(n, "fill");
  if (n == 0) return;
  fill_kernel<<<grid_for(n), kThreads, 0, stream>>>(y, n, value);
  check_launch("fill");
}

template <class T>
void swiglu_fwd(cudaStream_t stream, int64_t n, const T* a, const T* b, T* y) {
  check_n(n, "swiglu_fwd");
  if (n == 0) return;
  swiglu_fwd_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, a, b, y);
  check_launch("swiglu_fwd");
}

template <class T>
void swiglu_bwd(cudaStream_t stream, int64_t n, const T* a, const T* b, const T* dy, T* da, T* db) {
  check_n(n, "swiglu_bwd");
  if (n == 0) return;
  swiglu_bwd_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, a, b, dy, da, db);
  check_launch("swiglu_bwd");
}

template <class T>
void gelu_fwd(cudaStream_t stream, int64_t n, const T* a, T* y) {
  check_n(n, "gelu_fwd");
  if (n == 0) return;
  gelu_fwd_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, a, y);
  check_launch("gelu_fwd");
}

template <class T>
void gelu_bwd(cudaStream_t stream, int64_t n, const T* a, const T* dy, T* da) {
  check_n(n, "gelu_bwd");
  if (n == 0) return;
  gelu_bwd_kernel<<<grid_for(n), kThreads, 0, stream>>>(n, a, dy, da);
  check_launch("gelu_bwd");
}

#define TPTUNE_INSTANTIATE(T)                                                               \
  template void add<T>(cudaStream_t, int64_t, const T*, const T*, T*);                      \
  template void accumulate<T>(cudaStream_t, int64_t, const T*, T*);                         \
  template void fill<T>(cudaStream_t, T*, int64_t, float);                                  \
  template void swiglu_fwd<T>(cudaStream_t, int64_t, const T*, const T*, T*);               \
  template void swiglu_bwd<T>(cudaStream_t, int64_t, const T*, const T*, const T*, T*, T*); \
  template void gelu_fwd<T>(cudaStream_t, int64_t, const T*, T*);                           \
  template void gelu_bwd<T>(cudaStream_t, int64_t, const T*, const T*, T*);
TPTUNE_INSTANTIATE(float)
TPTUNE_INSTANTIATE(__nv_bfloat16)

}  // namespace tptune::cuda
