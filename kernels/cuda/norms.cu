// RMSNorm / LayerNorm CUDA kernels; see norms.h.
//
// Forward: one block per row; the row sums in double (block_sum: fixed order), then every element through
// kernels/formulas/norm.h. Backward: one block per row for dx (the row's dots), then the dw/db column sums in two
// deterministic passes: slab s of the rows (kSlabs fixed slabs) sums its rows per column into partial[s][col], then one
// thread per column adds the slabs in order.
#include <algorithm>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device_element.cuh"
#include "kernels/cuda/norms.h"
#include "kernels/formulas/norm.h"

namespace tptune::cuda {

using namespace formulas;  // the per-element formulas the CPU reference shares (kernels/formulas/)
namespace {

using detail::block_sum;
using detail::from_double;
using detail::kThreads;
using detail::to_float;

constexpr int64_t kSlabs = 64;

template <class T>
__global__ void rmsnorm_fwd_kernel(int64_t dim, float eps, const T* x, const T* w, T* y, float* rstd) {
  __shared__ double shared[33];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * dim;
  double ss = 0.0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const double xi = to_float(xr[i]);
    ss += xi * xi;
  }
  const double r = norm_rstd(block_sum(ss, shared), dim, eps);
  if (threadIdx.x == 0) rstd[row] = float(r);
  T* yr = y + row * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
    yr[i] = from_double<T>(rmsnorm_y(to_float(xr[i]), r, to_float(w[i])));
}

template <class T>
__global__ void rmsnorm_dx_kernel(int64_t dim, const T* x, const T* w, const float* rstd, const T* dy, T* dx) {
  __shared__ double shared[33];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * dim;
  const T* dyr = dy + row * dim;
  const double r = rstd[row];
  double dot = 0.0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
    dot += rmsnorm_dot_term(to_float(xr[i]), to_float(w[i]), to_float(dyr[i]), r);
  const double c = block_sum(dot, shared) / double(dim);
  T* dxr = dx + row * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
    dxr[i] = from_double<T>(rmsnorm_dx(to_float(xr[i]), to_float(w[i]), to_float(dyr[i]), r, c));
}

// partial[slab][col] = sum over the slab's rows of dy * xhat (and of dy when db_partial is non-null); xhat from
// mean (LayerNorm, non-null) or not (RMSNorm).
template <class T>
__global__ void norm_dw_partial_kernel(int64_t rows, int64_t dim, int64_t slabs, const T* x, const float* mean,
                                       const float* rstd, const T* dy, double* dw_partial, double* db_partial) {
  const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t slab = blockIdx.y;
  if (col >= dim) return;
  const int64_t r0 = rows * slab / slabs, r1 = rows * (slab + 1) / slabs;
  double dw = 0.0, db = 0.0;
  for (int64_t t = r0; t < r1; ++t) {
    const float xi = to_float(x[t * dim + col]), g = to_float(dy[t * dim + col]);
    if (mean) {
      dw += double(g) * layernorm_xhat(xi, mean[t], rstd[t]);
      db += g;
    } else {
      dw += rmsnorm_dw_term(xi, g, rstd[t]);
    }
  }
  dw_partial[slab * dim + col] = dw;
  if (db_partial) db_partial[slab * dim + col] = db;
}

template <class T>
__global__ void sum_slabs_kernel(int64_t dim, int64_t slabs, const double* partial, T* out) {
  const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= dim) return;
  double s = 0.0;
  for (int64_t k = 0; k < slabs; ++k) s += partial[k * dim + col];
  out[col] = from_double<T>(s);
}

template <class T>
__global__ void layernorm_fwd_kernel(int64_t dim, float eps, const T* x, const T* w, const T* b, T* y, float* mean,
                                     float* rstd) {
  __shared__ double shared[33];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * dim;
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) s += to_float(xr[i]);
  const double mu = block_sum(s, shared) / double(dim);
  double ss = 0.0;  // two-pass variance, as the CPU reference
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const double d = double(to_float(xr[i])) - mu;
    ss += d * d;
  }
  const double r = norm_rstd(block_sum(ss, shared), dim, eps);
  if (threadIdx.x == 0) {
    mean[row] = float(mu);
    rstd[row] = float(r);
  }
  T* yr = y + row * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
    yr[i] = from_double<T>(layernorm_y(to_float(xr[i]), mu, r, to_float(w[i]), to_float(b[i])));
}

template <class T>
__global__ void layernorm_dx_kernel(int64_t dim, const T* x, const T* w, const float* mean, const float* rstd,
                                    const T* dy, T* dx) {
  __shared__ double shared[33];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * dim;
  const T* dyr = dy + row * dim;
  const double mu = mean[row], r = rstd[row];
  double sg = 0.0, sgx = 0.0;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const double g = double(to_float(dyr[i])) * double(to_float(w[i]));
    sg += g;
    sgx += g * layernorm_xhat(to_float(xr[i]), mu, r);
  }
  const double mg = block_sum(sg, shared) / double(dim);
  const double mgx = block_sum(sgx, shared) / double(dim);
  T* dxr = dx + row * dim;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x)
    dxr[i] = from_double<T>(
        layernorm_dx(to_float(w[i]), to_float(dyr[i]), layernorm_xhat(to_float(xr[i]), mu, r), r, mg, mgx));
}

void check_dims(int64_t rows, int64_t dim, const char* kernel) {
  require(rows >= 0 && dim > 0, kernel, "rows must be >= 0 and dim > 0");
  require(rows <= int64_t(0x7FFFFFFF), kernel, "more than 2^31 - 1 rows");
}

// Row blocks: up to 1024 threads, enough for one element per thread on rows up to 1024 wide.
unsigned row_threads(int64_t dim) { return unsigned(std::clamp<int64_t>((dim + 31) / 32 * 32, 32, 1024)); }

// dw (and db) = column sums over all rows, deterministic; the partials live in scratch (released after the launches).
template <class T>
void column_sums(cudaStream_t stream, int64_t rows, int64_t dim, const T* x, const float* mean, const float* rstd,
                 const T* dy, T* dw, T* db, const ScratchAllocator& alloc, const char* kernel) {
  const int64_t slabs = std::max<int64_t>(1, std::min(kSlabs, rows));
  const size_t bytes = size_t(slabs * dim) * sizeof(double) * (db ? 2 : 1);
  const std::shared_ptr<void> partials = scratch(alloc, stream, bytes, kernel);
  double* dw_partial = static_cast<double*>(partials.get());
  double* db_partial = db ? dw_partial + slabs * dim : nullptr;
  const dim3 grid(unsigned((dim + kThreads - 1) / kThreads), unsigned(slabs));
  norm_dw_partial_kernel<<<grid, kThreads, 0, stream>>>(rows, dim, slabs, x, mean, rstd, dy, dw_partial, db_partial);
  check_launch(kernel);
  const unsigned cols = unsigned((dim + kThreads - 1) / kThreads);
  sum_slabs_kernel<<<cols, kThreads, 0, stream>>>(dim, slabs, dw_partial, dw);
  check_launch(kernel);
  if (db) {
    sum_slabs_kernel<<<cols, kThreads, 0, stream>>>(dim, slabs, db_partial, db);
    check_launch(kernel);
  }
}

}  // namespace

template <class T>
void rmsnorm_fwd(cudaStream_t stream, int64_t rows, int64_t dim, double eps, const T* x, const T* w, T* y,
                 float* rstd) {
  check_dims(rows, dim, "rmsnorm_fwd");
  if (rows == 0) return;
  rmsnorm_fwd_kernel<<<unsigned(rows), row_threads(dim), 0, stream>>>(dim, float(eps), x, w, y, rstd);
  check_launch("rmsnorm_fwd");
}

template <class T>
void rmsnorm_bwd(cudaStream_t stream, int64_t rows, int64_t dim, const T* x, const T* w, const float* rstd, const T* dy,
                 T* dx, T* dw, const ScratchAllocator& scratch) {
  check_dims(rows, dim, "rmsnorm_bwd");
  // dw first: it reads dy and x, which dx may alias.
  column_sums<T>(stream, rows, dim, x, nullptr, rstd, dy, dw, nullptr, scratch, "rmsnorm_bwd");
  if (rows > 0) {
    rmsnorm_dx_kernel<<<unsigned(rows), row_threads(dim), 0, stream>>>(dim, x, w, rstd, dy, dx);
    check_launch("rmsnorm_bwd");
  }
}

template <class T>
void layernorm_fwd(cudaStream_t stream, int64_t rows, int64_t dim, double eps, const T* x, const T* w, const T* b, T* y,
                   float* mean, float* rstd) {
  check_dims(rows, dim, "layernorm_fwd");
  if (rows == 0) return;
  layernorm_fwd_kernel<<<unsigned(rows), row_threads(dim), 0, stream>>>(dim, float(eps), x, w, b, y, mean, rstd);
  check_launch("layernorm_fwd");
}

template <class T>
void layernorm_bwd(cudaStream_t stream, int64_t rows, int64_t dim, const T* x, const T* w, const float* mean,
                   const float* rstd, const T* dy, T* dx, T* dw, T* db, const ScratchAllocator& scratch) {
  check_dims(rows, dim, "layernorm_bwd");
  // dw, db first: they read dy and x, which dx may alias.
  column_sums<T>(stream, rows, dim, x, mean, rstd, dy, dw, db, scratch, "layernorm_bwd");
  if (rows > 0) {
    layernorm_dx_kernel<<<unsigned(rows), row_threads(dim), 0, stream>>>(dim, x, w, mean, rstd, dy, dx);
    check_launch("layernorm_bwd");
  }
}

#define TPTUNE_INSTANTIATE(T)                                                                                      \
  template void rmsnorm_fwd<T>(cudaStream_t, int64_t, int64_t, double, const T*, const T*, T*, float*);            \
  template void rmsnorm_bwd<T>(cudaStream_t, int64_t, int64_t, const T*, const T*, const float*, const T*, T*, T*, \
                               const ScratchAllocator&);                                                           \
  template void layernorm_fwd<T>(cudaStream_t, int64_t, int64_t, double, const T*, const T*, const T*, T*, float*, \
                                 float*);                                                                          \
  template void layernorm_bwd<T>(cudaStream_t, int64_t, int64_t, const T*, const T*, const float*, const float*,   \
                                 const T*, T*, T*, T*, const ScratchAllocator&);
TPTUNE_INSTANTIATE(float)
TPTUNE_INSTANTIATE(__nv_bfloat16)

}  // namespace tptune::cuda
