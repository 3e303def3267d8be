// RoPE CUDA kernels; see rope.h. Aligned tensors whose head_dim holds whole 16-byte packs take the packed kernel
// (below); otherwise one thread per (batch, token, pair): cos/sin of the pair's angle in double, once, then the
// rotation of that pair in every head of the token (adjacent threads take adjacent pairs: coalesced).
#include <string>
#include <type_traits>

#include "kernels/cuda/device/check.h"
#include "kernels/cuda/device/device_element.cuh"
#include "kernels/cuda/rope.h"
#include "kernels/formulas/rope.h"

namespace tptune::cuda {

using namespace formulas;  // the per-element formulas the CPU reference shares (kernels/formulas/)
namespace {

using namespace kernel_names;  // kernels/cuda/device/device_element.cuh

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

// The packed path: thread (token, group of kHeadsPerThread heads, pack k of the head) loads pack k of each head of
// its group, computes the N / 2 angles of the pack's pairs once and rotates the pack in each head: 16-byte loads and
// stores, adjacent threads on adjacent packs of one head. The inverse frequencies theta^(-2i/head_dim) depend on the
// pair alone: each block computes the head's head_dim / 2 of them once into shared memory (the same double pow as
// rope_angle, so the same bits), and an angle costs one multiply. Before, each item called the double pow once per
// pair: 4 x 127 FP64 PTX instructions per bf16 item (256 bytes moved), where a copy's rate leaves an SM ~16 cycles per
// 256 bytes and Hopper retires 64 FP64 operations per SM cycle: the pow alone took ~half of that budget.
constexpr int kHeadsPerThread = 8;

// The packed kernels' shared table holds at most this many pairs (head_dim <= 2 * kMaxTablePairs); wider heads take
// the scalar kernel.
constexpr int64_t kMaxTablePairs = 2048;

// inv_freq[i] = rope_inv_freq(i, head_dim, theta) for i < head_dim / 2, by the block's threads; then a barrier.
__device__ void fill_inv_freq(const RopeDims& d, double* inv_freq) {
  for (int64_t i = threadIdx.x; i < d.head_dim / 2; i += blockDim.x)
    inv_freq[i] = rope_inv_freq(i, d.head_dim, d.theta);
  __syncthreads();
}

// Work items of the packed kernel for a tensor of dims d.
__host__ __device__ inline int64_t packed_items(const RopeDims& d, int n_pack) {
  return d.batch * d.seq * ((d.heads + kHeadsPerThread - 1) / kHeadsPerThread) * (d.head_dim / n_pack);
}

template <int N, class T>
__device__ void rope_pack_item(const RopeDims& d, const double* inv_freq, double sign, const T* x, T* y, int64_t idx) {
  const int64_t packs_per_head = d.head_dim / N, groups = (d.heads + kHeadsPerThread - 1) / kHeadsPerThread;
  const int64_t k = idx % packs_per_head, g = (idx / packs_per_head) % groups;
  const int64_t token = idx / (packs_per_head * groups);  // token = b * seq + s
  const int64_t s = token % d.seq;
  // Pack k of each head of the group, all loaded before the angles are computed and any pack is rotated: up to
  // kHeadsPerThread loads in flight per thread (one at a time, a thread waited out each load's latency in turn).
  const int64_t h0 = g * kHeadsPerThread, first = token * (d.heads * packs_per_head) + h0 * packs_per_head + k;
  const int64_t heads_here = d.heads - h0 < kHeadsPerThread ? d.heads - h0 : kHeadsPerThread;
  Pack<T, N> xp[kHeadsPerThread];
#pragma unroll
  for (int u = 0; u < kHeadsPerThread; ++u)
    if (u < heads_here) xp[u] = load_pack<N>(x, first + u * packs_per_head);
  using C = detail::Compute<T>;  // double for fp32 tensors (the CPU reference's arithmetic), float for bf16
  C c[N / 2], sn[N / 2];
#pragma unroll
  for (int j = 0; j < N / 2; ++j) {
    const double a = double(d.offset + s) * inv_freq[k * (N / 2) + j];  // rope_angle, its pow from the table
    if constexpr (std::is_same_v<T, float>) {
      ::sincos(a, &sn[j], &c[j]);
    } else {
      // bf16: the angle reduced to [-pi, pi] in double, then float sine and cosine and a float rotation (their
      // error, ~1e-7, is far below a bf16 rounding; double sincos of angles up to seq_len radians and double
      // rotations were the kernel's cost: 1.9 TB/s on the H200).
      constexpr double two_pi = 6.283185307179586476925286766559;
      ::sincosf(float(a - two_pi * ::rint(a / two_pi)), &sn[j], &c[j]);
    }
    sn[j] *= C(sign);
  }
#pragma unroll
  for (int u = 0; u < kHeadsPerThread; ++u) {
    if (u >= heads_here) break;
    Pack<T, N> yp;
#pragma unroll
    for (int j = 0; j < N / 2; ++j) {
      const C x0 = to_float(xp[u].v[2 * j]), x1 = to_float(xp[u].v[2 * j + 1]);  // rope_rotate in C
      yp.v[2 * j] = from_float<T>(float(x0 * c[j] - x1 * sn[j]));
      yp.v[2 * j + 1] = from_float<T>(float(x0 * sn[j] + x1 * c[j]));
    }
    store_pack<N>(y, first + u * packs_per_head, yp);
  }
}

template <int N, class T>
__global__ void rope_packed_kernel(RopeDims d, double sign, const T* x, T* y) {
  extern __shared__ double inv_freq[];  // head_dim / 2 (table_bytes)
  fill_inv_freq(d, inv_freq);
  const int64_t n = packed_items(d, N);
  TPTUNE_GRID_STRIDE(idx, n) rope_pack_item<N>(d, inv_freq, sign, x, y, idx);
}

// rope_qk: q's items, then k's, in one grid (one launch for both tensors; one table: same head_dim and theta).
template <int N, class T>
__global__ void rope_qk_packed_kernel(RopeDims dq, RopeDims dk, double sign, const T* q, const T* k, T* qo, T* ko) {
  extern __shared__ double inv_freq[];
  fill_inv_freq(dq, inv_freq);
  const int64_t nq = packed_items(dq, N), n = nq + packed_items(dk, N);
  TPTUNE_GRID_STRIDE(idx, n) {  // one inlined item for both tensors (two would double its registers)
    const bool is_q = idx < nq;
    const RopeDims d = is_q ? dq : dk;
    rope_pack_item<N>(d, inv_freq, sign, is_q ? q : k, is_q ? qo : ko, is_q ? idx : idx - nq);
  }
}

size_t table_bytes(const RopeDims& d) { return size_t(d.head_dim / 2) * sizeof(double); }

void check_rope_dims(const RopeDims& d, const char* kernel) {
  require(d.head_dim > 0 && d.head_dim % 2 == 0, kernel,
          "head_dim must be even and positive, got " + std::to_string(d.head_dim));
  require(d.theta > 0.0, kernel, "theta must be positive");
  require(d.batch >= 0 && d.seq >= 0 && d.heads >= 0 && d.offset >= 0, kernel, "negative dims");
}

template <class T>
bool rope_packs(const RopeDims& d, const T* x, const T* y) {
  constexpr int N = detail::kPack<T>;
  return d.head_dim % N == 0 && d.head_dim / 2 <= kMaxTablePairs && detail::pack_aligned(x, sizeof(T), N) &&
         detail::pack_aligned(y, sizeof(T), N);
}

template <class T>
void rotate(cudaStream_t stream, const RopeDims& d, double sign, const T* x, T* y, const char* kernel) {
  check_rope_dims(d, kernel);
  const int64_t n = d.batch * d.seq * (d.head_dim / 2);
  if (n == 0 || d.heads == 0) return;
  constexpr int N = detail::kPack<T>;
  if (rope_packs(d, x, y)) {
    rope_packed_kernel<N>
        <<<detail::grid_for_items(packed_items(d, N)), kThreads, table_bytes(d), stream>>>(d, sign, x, y);
  } else {
    rope_kernel<<<grid_for(n), kThreads, 0, stream>>>(d, sign, x, y);
  }
  check_launch(kernel);
}

// q and k in one launch when both take the packed path; otherwise one rotation each.
template <class T>
void rotate_qk(cudaStream_t stream, const RopeDims& dq, const RopeDims& dk, double sign, const T* q, const T* k, T* qo,
               T* ko, const char* kernel) {
  check_rope_dims(dq, kernel);
  check_rope_dims(dk, kernel);
  constexpr int N = detail::kPack<T>;
  if (!rope_packs(dq, q, qo) || !rope_packs(dk, k, ko) || dq.head_dim != dk.head_dim || dq.theta != dk.theta) {
    rotate(stream, dq, sign, q, qo, kernel);
    rotate(stream, dk, sign, k, ko, kernel);
    return;
  }
  const int64_t n = packed_items(dq, N) + packed_items(dk, N);
  if (n == 0) return;
  rope_qk_packed_kernel<N>
      <<<detail::grid_for_items(n), kThreads, table_bytes(dq), stream>>>(dq, dk, sign, q, k, qo, ko);
  check_launch(kernel);
}

}  // namespace

template <class T>
void rope_qk_fwd(cudaStream_t stream, const RopeDims& dq, const RopeDims& dk, const T* q, const T* k, T* qo, T* ko) {
  rotate_qk(stream, dq, dk, +1.0, q, k, qo, ko, "rope_qk_fwd");
}

template <class T>
void rope_qk_bwd(cudaStream_t stream, const RopeDims& dq, const RopeDims& dk, const T* dq_in, const T* dk_in, T* dqo,
                 T* dko) {
  rotate_qk(stream, dq, dk, -1.0, dq_in, dk_in, dqo, dko, "rope_qk_bwd");
}

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
#define TPTUNE_INSTANTIATE_QK(T)                                                                            \
  template void rope_qk_fwd<T>(cudaStream_t, const RopeDims&, const RopeDims&, const T*, const T*, T*, T*); \
  template void rope_qk_bwd<T>(cudaStream_t, const RopeDims&, const RopeDims&, const T*, const T*, T*, T*);
TPTUNE_INSTANTIATE_QK(float)
TPTUNE_INSTANTIATE_QK(__nv_bfloat16)

}  // namespace tptune::cuda
