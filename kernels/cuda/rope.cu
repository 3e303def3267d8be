// RoPE CUDA kernels; see rope.h. One thread per (batch, token, pair): cos/sin of the pair's angle in double, once,
// then the rotation of that pair in every head of the token (adjacent threads take adjacent pairs: coalesced).
#include <string>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_element.cuh"
#include "kernels/cuda/rope.h"
#include "kernels/formulas/rope.h"

namespace tptune::cuda {

using namespace formulas;  // the per-element formulas the CPU reference shares (kernels/formulas/)
namespace {

using detail::from_double;
using detail::grid_for;
using detail::kThreads;
using detail::to_float;

template <class T>
__global__ void rope_kernel(RopeDims d, double sign, const T* x, T* y) {
  const int64_t half = d.head_dim / 2, row = d.heads * d.head_dim;
  const int64_t n = d.batch * d.seq * half;
  TPTUNE_GRID_STRIDE(idx, n) {
    const int64_t i = idx % half, token = idx / half;  // token = b * seq + s
    const int64_t s = token % d.seq;
    const double a = rope_angle(d.offset + s, i, d.head_dim, d.theta);
    double sn = 0.0, c = 0.0;
    ::sincos(a, &sn, &c);
    sn *= sign;
    const T* xr = x + token * row;
    T* yr = y + token * row;
    for (int64_t h = 0; h < d.heads; ++h) {
      const int64_t j = h * d.head_dim + 2 * i;
      const RopePair p = rope_rotate(to_float(xr[j]), to_float(xr[j + 1]), c, sn);  // both read before writing
      yr[j] = from_double<T>(p.y0);
      yr[j + 1] = from_double<T>(p.y1);
    }
  }
}

template <class T>
void rotate(cudaStream_t stream, const RopeDims& d, double sign, const T* x, T* y, const char* kernel) {
  require(d.head_dim > 0 && d.head_dim % 2 == 0, kernel,
          "head_dim must be even and positive, got " + std::to_string(d.head_dim));
  require(d.theta > 0.0, kernel, "theta must be positive");
  require(d.batch >= 0 && d.seq >= 0 && d.heads >= 0 && d.offset >= 0, kernel, "negative dims");
  const int64_t n = d.batch * d.seq * (d.head_dim / 2);
  if (n == 0 || d.heads == 0) return;
  rope_kernel<<<grid_for(n), kThreads, 0, stream>>>(d, sign, x, y);
  check_launch(kernel);
}

}  // namespace

template <class T>
void rope_fwd(cudaStream_t stream, const RopeDims& s, const T* x, T* y) {
  rotate(stream, s, +1.0, x, y, "rope_fwd");
}

template <class T>
void rope_bwd(cudaStream_t stream, const RopeDims& s, const T* dy, T* dx) {
  rotate(stream, s, -1.0, dy, dx, "rope_bwd");
}

template void rope_fwd<float>(cudaStream_t, const RopeDims&, const float*, float*);
template void rope_bwd<float>(cudaStream_t, const RopeDims&, const float*, float*);
template void rope_fwd<__nv_bfloat16>(cudaStream_t, const RopeDims&, const __nv_bfloat16*, __nv_bfloat16*);
template void rope_bwd<__nv_bfloat16>(cudaStream_t, const RopeDims&, const __nv_bfloat16*, __nv_bfloat16*);

}  // namespace tptune::cuda
