// RMSNorm / LayerNorm CUDA kernels; see norms.h.
//
// RMSNorm on aligned rows runs the packed kernels (16-byte accesses, x read once forward and x, dy read once
// backward: below). LayerNorm, and RMSNorm on unaligned or very wide rows, run the scalar kernels:
// Forward: one block per row; the row sums in double (block_sum: fixed order), then every element through
// kernels/formulas/norm.h. Backward: one block per row for dx (the row's dots), then the dw/db column sums in two
// deterministic passes: slab s of the rows (kSlabs fixed slabs) sums its rows per column into partial[s][col], then one
// thread per column adds the slabs in order.
#include <algorithm>
#include <initializer_list>
#include <type_traits>

#include "kernels/cuda/device/check.h"
#include "kernels/cuda/device/device_element.cuh"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/norms.h"
#include "kernels/formulas/norm.h"

namespace tptune::cuda {

using namespace formulas;  // the per-element formulas the CPU reference shares (kernels/formulas/)
namespace {

using namespace kernel_names;  // kernels/cuda/device/device_element.cuh

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

// ---- RMSNorm at the memory system's rate ----------------------------------------------------------------------
// Forward: one block per row; each thread owns packs tid, tid + blockDim, ... of the row, holds them in registers
// (at most P packs of N elements), sums their squares in double, and writes y from the registers: x is read once.
// Backward: block s owns a slab of consecutive rows; for each row it reads the row's x and dy once into
// registers, reduces the dot (block_sum), writes dx, and adds the row's dw terms to per-thread accumulators of its
// columns; at the end it writes its slab's column partials, and sum_partials_kernel adds the slabs in order. x and
// dy are read once (the scalar path above reads them twice), and the reductions keep a fixed order.
// The per-element arithmetic is Compute<T>: double for fp32 tensors (the CPU reference's, formulas/norm.h), float
// for bf16 ones (as torch's RMSNorm computes a bf16 input: x.float()); the row sums meet in double. With double per
// element the bf16 kernels ran at 1.6 TB/s on the H200: conversions and double multiplies, not memory, were the
// limit.

template <int N, int P, class T>
__global__ void __launch_bounds__(P == 1 ? 1024 : 512)
    rmsnorm_fwd_packed_kernel(int64_t dim, float eps, const T* x, const T* res, const T* w, T* h, T* y, float* rstd) {
  __shared__ double shared[33];
  const int64_t row = blockIdx.x, packs = dim / N;
  const T* xr = x + row * dim;
  using C = Compute<T>;  // the per-element arithmetic: double for fp32 tensors, float for bf16 (see above)
  Pack<T, N> xp[P];
  C ss = 0;
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int64_t k = threadIdx.x + int64_t(p) * blockDim.x;
    if (k < packs) {
      xp[p] = load_pack<N>(xr, k);
      if (res) {  // add_rmsnorm: the residual sum h = x + res, rounded to T as the add kernel stores it, then normed
        const Pack<T, N> rp = load_pack<N>(res + row * dim, k);
#pragma unroll
        for (int j = 0; j < N; ++j) xp[p].v[j] = from_float<T>(to_float(xp[p].v[j]) + to_float(rp.v[j]));
        store_pack<N>(h + row * dim, k, xp[p]);
      }
#pragma unroll
      for (int j = 0; j < N; ++j) {
        const C xi = to_float(xp[p].v[j]);
        ss += xi * xi;
      }
    }
  }
  const double r = norm_rstd(block_sum(double(ss), shared), dim, eps);
  if (threadIdx.x == 0) rstd[row] = float(r);
  const C rc = C(r);
  T* yr = y + row * dim;
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int64_t k = threadIdx.x + int64_t(p) * blockDim.x;
    if (k < packs) {
      const Pack<T, N> wp = load_pack<N>(w, k);
      Pack<T, N> yp;
#pragma unroll
      for (int j = 0; j < N; ++j) yp.v[j] = from_float<T>(float(C(to_float(xp[p].v[j])) * rc * C(to_float(wp.v[j]))));
      store_pack<N>(yr, k, yp);
    }
  }
}

// Partial dw of slab blockIdx.x (rows [r0, r1)) into partial[slab][col], in Acc (double for fp32 tensors, float
// for bf16: a slab's sum of a few dozen rows, then the slabs in double). No prefetch of row t + 1: its registers
// took the bf16 kernel at 4 packs per thread to the 128-register cap of 512-thread blocks and 352 bytes of spills
// per thread (sm_90, ptxas -v); without it 105 registers, no local memory, and the other blocks resident on the SM
// keep loads in flight while one block reduces.
template <int N, int P, class T, class Acc>
__global__ void __launch_bounds__(P == 1 ? 1024 : 512)
    rmsnorm_bwd_packed_kernel(int64_t rows, int64_t dim, int64_t slabs, const T* x, const T* w, const float* rstd,
                              const T* dy, const T* dres, T* dx, Acc* partial) {
  __shared__ double shared[33];
  const int64_t slab = blockIdx.x, packs = dim / N;
  const int64_t r0 = rows * slab / slabs, r1 = rows * (slab + 1) / slabs;
  Acc acc[P][N];
#pragma unroll
  for (int p = 0; p < P; ++p)
#pragma unroll
    for (int j = 0; j < N; ++j) acc[p][j] = Acc(0);
  Pack<T, N> xp[P], gp[P];
  using C = Compute<T>;  // the per-element arithmetic: double for fp32 tensors, float for bf16 (see above)
  for (int64_t t = r0; t < r1; ++t) {
#pragma unroll
    for (int p = 0; p < P; ++p) {  // the row's x and dy, all of the thread's packs in flight at once
      const int64_t k = threadIdx.x + int64_t(p) * blockDim.x;
      if (k < packs) {
        xp[p] = load_pack<N>(x + t * dim, k);
        gp[p] = load_pack<N>(dy + t * dim, k);
      }
    }
    const C r = rstd[t];
    C dot = 0;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int64_t k = threadIdx.x + int64_t(p) * blockDim.x;
      if (k < packs) {
        const Pack<T, N> wp = load_pack<N>(w, k);
#pragma unroll
        for (int j = 0; j < N; ++j) {  // rmsnorm_dot_term and rmsnorm_dw_term (formulas/norm.h) in C
          const C xhat = C(to_float(xp[p].v[j])) * r, gi = to_float(gp[p].v[j]);
          dot += gi * C(to_float(wp.v[j])) * xhat;
          acc[p][j] += Acc(gi * xhat);
        }
      }
    }
    const C c = C(block_sum(double(dot), shared) / double(dim));  // every thread has read its x and dy of row t
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int64_t k = threadIdx.x + int64_t(p) * blockDim.x;
      if (k < packs) {
        const Pack<T, N> wp = load_pack<N>(w, k);
        Pack<T, N> dxp;
#pragma unroll
        for (int j = 0; j < N; ++j)
          dxp.v[j] = from_float<T>(float(  // rmsnorm_dx (formulas/norm.h) in C
              r * (C(to_float(gp[p].v[j])) * C(to_float(wp.v[j])) - C(to_float(xp[p].v[j])) * r * c)));
        if (dres) {  // rmsnorm_bwd_add: + the residual's gradient, with the add kernel's rounding of the stored dx
          const Pack<T, N> rp = load_pack<N>(dres + t * dim, k);
#pragma unroll
          for (int j = 0; j < N; ++j) dxp.v[j] = from_float<T>(to_float(rp.v[j]) + to_float(dxp.v[j]));
        }
        store_pack<N>(dx + t * dim, k, dxp);
      }
    }
  }
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int64_t k = threadIdx.x + int64_t(p) * blockDim.x;
    if (k < packs) {
#pragma unroll
      for (int j = 0; j < N; ++j) partial[slab * dim + k * N + j] = acc[p][j];
    }
  }
}

// out[col] = sum over slabs of partial[slab][col], in double, in a fixed order: the block is 32 columns x 32 lanes;
// lane l sums slabs l, l + 32, ... in order, then lane 0 adds the 32 lane sums in order. 32 lanes, not 8: the
// partials (4 x SMs slabs x dim, 8.6 MB at dim 4096 on an H200) are read by dim / 32 blocks, one per SM, whose loads
// in flight set the pace: at 8 lanes ~4 KB per SM, which by Little's law (~1 us a load) reads them in ~17 us, a fifth
// of the backward at Llama 3 8B's shapes (an estimate; not measured apart).
constexpr int kSumLanes = 32;

template <class T, class Acc>
__global__ void __launch_bounds__(32 * kSumLanes)
    sum_partials_kernel(int64_t dim, int64_t slabs, const Acc* partial, T* out) {
  __shared__ double lane_sum[kSumLanes][32];
  const int64_t col = int64_t(blockIdx.x) * 32 + threadIdx.x;
  double s = 0.0;
  if (col < dim)
    for (int64_t k = threadIdx.y; k < slabs; k += kSumLanes) s += double(partial[k * dim + col]);
  lane_sum[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < dim) {
    double total = 0.0;
    for (int l = 0; l < kSumLanes; ++l) total += lane_sum[l][threadIdx.x];
    out[col] = from_double<T>(total);
  }
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

// The packed RMSNorm path: N = 16 bytes of T, every pointer aligned to it, dim a multiple of N, and at most 2048
// packs in a row (dim <= 16384 bf16, 8192 fp32). Otherwise the scalar kernels above run.
constexpr int64_t kMaxPacksPerRow = 2048;

template <class T>
bool rmsnorm_packed(int64_t dim, std::initializer_list<const void*> pointers) {
  constexpr int N = detail::kPack<T>;
  if (dim % N != 0 || dim / N > kMaxPacksPerRow) return false;
  for (const void* p : pointers)
    if (!pack_aligned(p, sizeof(T), N)) return false;
  return true;
}

// Threads and packs per thread P for a row of `packs` packs. Forward: P up to 8 (all of a thread's loads in
// flight at once, and small blocks: many rows per SM); backward: P up to 4 (it holds x, dy and the dw accumulators).
// Threads: a multiple of 32, at most 1024 (P = 1) or 512 (P > 1: the register budget of 1024-thread blocks would
// spill). Calls f(threads, std::integral_constant<int, P>).
template <int MaxP, class F>
void with_row_threads(int64_t packs, F f) {
  const auto threads_for = [&](int p) {
    return unsigned(std::clamp<int64_t>(((packs + p - 1) / p + 31) / 32 * 32, 32, p == 1 ? 1024 : 512));
  };
  if (packs <= 32)
    f(threads_for(1), std::integral_constant<int, 1>{});
  else if (packs <= 64)
    f(threads_for(2), std::integral_constant<int, 2>{});
  else if (MaxP == 4 || packs <= 256)
    f(threads_for(4), std::integral_constant<int, 4>{});
  else if constexpr (MaxP == 8)
    f(threads_for(8), std::integral_constant<int, 8>{});
}

// Streaming multiprocessors of the current device (slabs of the backward: 4 blocks per SM).
int64_t multiprocessors() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    return 132;
  return sms > 0 ? sms : 132;
}

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
  if (rmsnorm_packed<T>(dim, {x, w, y})) {
    constexpr int N = detail::kPack<T>;
    with_row_threads<8>(dim / N, [&](unsigned threads, auto packs_per_thread) {
      rmsnorm_fwd_packed_kernel<N, decltype(packs_per_thread)::value><<<unsigned(rows), threads, 0, stream>>>(
          dim, float(eps), x, static_cast<const T*>(nullptr), w, static_cast<T*>(nullptr), y, rstd);
    });
  } else {
    rmsnorm_fwd_kernel<<<unsigned(rows), row_threads(dim), 0, stream>>>(dim, float(eps), x, w, y, rstd);
  }
  check_launch("rmsnorm_fwd");
}

template <class T>
void rmsnorm_bwd(cudaStream_t stream, int64_t rows, int64_t dim, const T* x, const T* w, const float* rstd, const T* dy,
                 T* dx, T* dw, const ScratchAllocator& scratch) {
  check_dims(rows, dim, "rmsnorm_bwd");
  if (rows > 0 && rmsnorm_packed<T>(dim, {x, w, dy, dx})) {
    constexpr int N = detail::kPack<T>;
    using Acc = detail::Compute<T>;  // double for fp32 tensors, float for bf16
    const int64_t slabs = std::min<int64_t>(rows, 4 * multiprocessors());
    const std::shared_ptr<void> partials =
        cuda::scratch(scratch, stream, size_t(slabs * dim) * sizeof(Acc), "rmsnorm_bwd");
    Acc* partial = static_cast<Acc*>(partials.get());
    with_row_threads<4>(dim / N, [&](unsigned threads, auto packs_per_thread) {
      rmsnorm_bwd_packed_kernel<N, decltype(packs_per_thread)::value><<<unsigned(slabs), threads, 0, stream>>>(
          rows, dim, slabs, x, w, rstd, dy, static_cast<const T*>(nullptr), dx, partial);
    });
    check_launch("rmsnorm_bwd");
    sum_partials_kernel<<<unsigned((dim + 31) / 32), dim3(32, kSumLanes), 0, stream>>>(dim, slabs, partial, dw);
    check_launch("rmsnorm_bwd");
    return;
  }
  // dw first: it reads dy and x, which dx may alias.
  column_sums<T>(stream, rows, dim, x, nullptr, rstd, dy, dw, nullptr, scratch, "rmsnorm_bwd");
  if (rows > 0) {
    rmsnorm_dx_kernel<<<unsigned(rows), row_threads(dim), 0, stream>>>(dim, x, w, rstd, dy, dx);
    check_launch("rmsnorm_bwd");
  }
}

template <class T>
void add_rmsnorm_fwd(cudaStream_t stream, int64_t rows, int64_t dim, double eps, const T* a, const T* b, const T* w,
                     T* h, T* y, float* rstd) {
  check_dims(rows, dim, "add_rmsnorm_fwd");
  if (rows == 0) return;
  if (!rmsnorm_packed<T>(dim, {a, b, w, h, y})) {  // the eager pair: the add, then the norm
    add<T>(stream, rows * dim, a, b, h);
    rmsnorm_fwd<T>(stream, rows, dim, eps, h, w, y, rstd);
    return;
  }
  constexpr int N = detail::kPack<T>;
  with_row_threads<8>(dim / N, [&](unsigned threads, auto packs_per_thread) {
    rmsnorm_fwd_packed_kernel<N, decltype(packs_per_thread)::value>
        <<<unsigned(rows), threads, 0, stream>>>(dim, float(eps), a, b, w, h, y, rstd);
  });
  check_launch("add_rmsnorm_fwd");
}

template <class T>
void rmsnorm_bwd_add(cudaStream_t stream, int64_t rows, int64_t dim, const T* x, const T* w, const float* rstd,
                     const T* dy, const T* dres, T* dx, T* dw, const ScratchAllocator& scratch) {
  check_dims(rows, dim, "rmsnorm_bwd_add");
  if (rows == 0 || !rmsnorm_packed<T>(dim, {x, w, dy, dres, dx})) {  // the eager pair: the norm backward, the sum
    const std::shared_ptr<void> part =
        cuda::scratch(scratch, stream, size_t(std::max<int64_t>(rows * dim, 1)) * sizeof(T), "rmsnorm_bwd_add");
    rmsnorm_bwd<T>(stream, rows, dim, x, w, rstd, dy, static_cast<T*>(part.get()), dw, scratch);
    add<T>(stream, rows * dim, dres, static_cast<const T*>(part.get()), dx);
    return;
  }
  constexpr int N = detail::kPack<T>;
  using Acc = detail::Compute<T>;
  const int64_t slabs = std::min<int64_t>(rows, 4 * multiprocessors());
  const std::shared_ptr<void> partials =
      cuda::scratch(scratch, stream, size_t(slabs * dim) * sizeof(Acc), "rmsnorm_bwd_add");
  Acc* partial = static_cast<Acc*>(partials.get());
  with_row_threads<4>(dim / N, [&](unsigned threads, auto packs_per_thread) {
    rmsnorm_bwd_packed_kernel<N, decltype(packs_per_thread)::value>
        <<<unsigned(slabs), threads, 0, stream>>>(rows, dim, slabs, x, w, rstd, dy, dres, dx, partial);
  });
  check_launch("rmsnorm_bwd_add");
  sum_partials_kernel<<<unsigned((dim + 31) / 32), dim3(32, kSumLanes), 0, stream>>>(dim, slabs, partial, dw);
  check_launch("rmsnorm_bwd_add");
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
  template void add_rmsnorm_fwd<T>(cudaStream_t, int64_t, int64_t, double, const T*, const T*, const T*, T*, T*,   \
                                   float*);                                                                        \
  template void rmsnorm_bwd_add<T>(cudaStream_t, int64_t, int64_t, const T*, const T*, const float*, const T*,     \
                                   const T*, T*, T*, const ScratchAllocator&);                                     \
  template void layernorm_fwd<T>(cudaStream_t, int64_t, int64_t, double, const T*, const T*, const T*, T*, float*, \
                                 float*);                                                                          \
  template void layernorm_bwd<T>(cudaStream_t, int64_t, int64_t, const T*, const T*, const float*, const float*,   \
                                 const T*, T*, T*, T*, const ScratchAllocator&);
TPTUNE_INSTANTIATE(float)
TPTUNE_INSTANTIATE(__nv_bfloat16)

}  // namespace tptune::cuda
