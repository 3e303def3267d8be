// The simple (slow, clearly correct) attention kernels; see attention.h. Per (batch, head, query row i) with
// scale = 1/sqrt(d) and the keys j the row sees (j <= i when causal):
//   s_ij = scale * q_i . k_j,  lse_i = m_i + log sum_j exp(s_ij - m_i),  o_i = sum_j exp(s_ij - lse_i) v_j
// Backward (the flash-attention form of kernels/cpu/attention.h): D_i = dO_i . O_i, p_ij = exp(s_ij - lse_i),
// ds_ij = p_ij (dO_i . v_j - D_i), dq_i = scale sum_j ds_ij k_j, dk_j = scale sum_{h in group, i} ds_ij q_i,
// dv_j = sum_{h in group, i} p_ij dO_i.
// Scores are recomputed in every pass rather than stored, so memory is O(head_dim) per block for any seq. Blocks
// process keys (or queries) in chunks of kChunk: each thread computes one score of the chunk into shared memory,
// then each thread accumulates its output dims (c = tid, tid + kChunk, ...) over the chunk in order.
#include <string>

#include "kernels/cuda/attention/attention.h"
#include "kernels/cuda/device/check.h"
#include "kernels/cuda/device/device_element.cuh"

namespace tptune::cuda {
namespace {

using namespace kernel_names;  // kernels/cuda/device/device_element.cuh

constexpr int kChunk = 128;       // threads per block, and scores per chunk
constexpr int kMaxHeadDim = 512;  // dims per thread: kMaxHeadDim / kChunk
constexpr int kDimsPerThread = kMaxHeadDim / kChunk;

struct Geometry {
  int64_t batch, seq, heads, kv_heads, d, group;
  bool causal;
  float scale;
  // Element offsets of row (b, t) of head h in a (batch, seq, heads * d) tensor.
  __device__ int64_t q_row(int64_t b, int64_t t, int64_t h) const { return ((b * seq + t) * heads + h) * d; }
  __device__ int64_t kv_row(int64_t b, int64_t t, int64_t g) const { return ((b * seq + t) * kv_heads + g) * d; }
};

template <class T>
__device__ float dot(const float* a_shared, const T* b, int64_t d) {
  float s = 0.0f;
  for (int64_t c = 0; c < d; ++c) s += a_shared[c] * to_float(b[c]);
  return s;
}

template <class T>
__device__ void load_row(float* dst, const T* src, int64_t d) {
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) dst[c] = to_float(src[c]);
  __syncthreads();
}

// A chunk of a row's weighted sum of kv rows: acc[r] += sum over jj < n of w[jj] x (kv row j0 + jj of `x`) at the
// columns this thread owns (threadIdx.x + r kChunk), between the barriers that fill the shared weights `w` and free
// them for the next chunk (the forward's P V, the backward's dS K).
template <class T>
__device__ void accumulate_chunk(float (&acc)[kDimsPerThread], const float* w, const T* x, const Geometry& g, int64_t b,
                                 int64_t kvh, int64_t j0, int64_t nk) {
  __syncthreads();
  const int64_t n = nk - j0 < kChunk ? nk - j0 : kChunk;
  for (int r = 0; r < kDimsPerThread; ++r) {
    const int64_t c = threadIdx.x + int64_t(r) * kChunk;
    if (c >= g.d) break;
    for (int64_t jj = 0; jj < n; ++jj) acc[r] += w[jj] * to_float(x[g.kv_row(b, j0 + jj, kvh) + c]);
  }
  __syncthreads();
}

// grid (seq, heads, batch), kChunk threads, shared: q row (d floats).
template <class T>
__global__ void fwd_kernel(Geometry g, const T* q, const T* k, const T* v, T* o, float* lse) {
  __shared__ float q_row[kMaxHeadDim];
  __shared__ float p[kChunk];
  __shared__ float red_f[33];
  __shared__ double red_d[33];
  const int64_t i = blockIdx.x, h = blockIdx.y, b = blockIdx.z, kvh = h / g.group;
  const int64_t nk = g.causal ? i + 1 : g.seq;
  load_row(q_row, q + g.q_row(b, i, h), g.d);
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < nk; j += blockDim.x)
    m = fmaxf(m, g.scale * dot(q_row, k + g.kv_row(b, j, kvh), g.d));
  m = block_max(m, red_f);
  double l = 0.0;
  for (int64_t j = threadIdx.x; j < nk; j += blockDim.x)
    l += ::exp(double(g.scale * dot(q_row, k + g.kv_row(b, j, kvh), g.d) - m));
  const float row_lse = m + float(::log(block_sum(l, red_d)));
  float acc[kDimsPerThread] = {};
  for (int64_t j0 = 0; j0 < nk; j0 += kChunk) {
    const int64_t j = j0 + threadIdx.x;
    p[threadIdx.x] = j < nk ? ::expf(g.scale * dot(q_row, k + g.kv_row(b, j, kvh), g.d) - row_lse) : 0.0f;
    accumulate_chunk(acc, p, v, g, b, kvh, j0, nk);
  }
  for (int r = 0; r < kDimsPerThread; ++r) {
    const int64_t c = threadIdx.x + int64_t(r) * kChunk;
    if (c < g.d) o[g.q_row(b, i, h) + c] = from_float<T>(acc[r]);
  }
  if (threadIdx.x == 0) lse[(b * g.heads + h) * g.seq + i] = row_lse;
}

// dq and D; grid (seq, heads, batch). shared: q row, dO row.
template <class T>
__global__ void bwd_dq_kernel(Geometry g, const T* q, const T* k, const T* v, const T* o, const float* lse,
                              const T* d_o, T* dq, float* D) {
  __shared__ float q_row[kMaxHeadDim];
  __shared__ float do_row[kMaxHeadDim];
  __shared__ float ds[kChunk];
  __shared__ double red_d[33];
  const int64_t i = blockIdx.x, h = blockIdx.y, b = blockIdx.z, kvh = h / g.group;
  const int64_t nk = g.causal ? i + 1 : g.seq;
  const int64_t row = g.q_row(b, i, h);
  for (int64_t c = threadIdx.x; c < g.d; c += blockDim.x) {
    q_row[c] = to_float(q[row + c]);
    do_row[c] = to_float(d_o[row + c]);
  }
  __syncthreads();
  double di = 0.0;
  for (int64_t c = threadIdx.x; c < g.d; c += blockDim.x) di += double(do_row[c]) * to_float(o[row + c]);
  const float Di = float(block_sum(di, red_d));
  const float row_lse = lse[(b * g.heads + h) * g.seq + i];
  if (threadIdx.x == 0) D[(b * g.heads + h) * g.seq + i] = Di;
  float acc[kDimsPerThread] = {};
  for (int64_t j0 = 0; j0 < nk; j0 += kChunk) {
    const int64_t j = j0 + threadIdx.x;
    float dsj = 0.0f;
    if (j < nk) {
      const float pj = ::expf(g.scale * dot(q_row, k + g.kv_row(b, j, kvh), g.d) - row_lse);
      dsj = pj * (dot(do_row, v + g.kv_row(b, j, kvh), g.d) - Di);
    }
    ds[threadIdx.x] = dsj;
    accumulate_chunk(acc, ds, k, g, b, kvh, j0, nk);
  }
  for (int r = 0; r < kDimsPerThread; ++r) {
    const int64_t c = threadIdx.x + int64_t(r) * kChunk;
    if (c < g.d) dq[row + c] = from_float<T>(g.scale * acc[r]);
  }
}

// dk and dv of key row j of kv head kvh; grid (seq, kv_heads, batch). The (query head, query row) pairs that see key
// j: the group's heads, rows i >= j (causal) or all rows.
template <class T>
__global__ void bwd_dkv_kernel(Geometry g, const T* q, const T* k, const T* v, const float* lse, const T* d_o,
                               const float* D, T* dk, T* dv) {
  __shared__ float k_row[kMaxHeadDim];
  __shared__ float v_row[kMaxHeadDim];
  __shared__ float p[kChunk], ds[kChunk];
  __shared__ int64_t q_offset[kChunk];
  const int64_t j = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
  const int64_t row = g.kv_row(b, j, kvh);
  for (int64_t c = threadIdx.x; c < g.d; c += blockDim.x) {
    k_row[c] = to_float(k[row + c]);
    v_row[c] = to_float(v[row + c]);
  }
  __syncthreads();
  const int64_t i0 = g.causal ? j : 0, ni = g.seq - i0, pairs = g.group * ni;
  float acc_k[kDimsPerThread] = {}, acc_v[kDimsPerThread] = {};
  for (int64_t x0 = 0; x0 < pairs; x0 += kChunk) {
    const int64_t x = x0 + threadIdx.x;
    float px = 0.0f, dsx = 0.0f;
    int64_t off = 0;
    if (x < pairs) {
      const int64_t h = kvh * g.group + x / ni, i = i0 + x % ni;
      off = g.q_row(b, i, h);
      const int64_t stat = (b * g.heads + h) * g.seq + i;
      px = ::expf(g.scale * dot(k_row, q + off, g.d) - lse[stat]);
      dsx = px * (dot(v_row, d_o + off, g.d) - D[stat]);
    }
    p[threadIdx.x] = px;
    ds[threadIdx.x] = dsx;
    q_offset[threadIdx.x] = off;
    __syncthreads();
    const int64_t n = pairs - x0 < kChunk ? pairs - x0 : kChunk;
    for (int r = 0; r < kDimsPerThread; ++r) {
      const int64_t c = threadIdx.x + int64_t(r) * kChunk;
      if (c >= g.d) break;
      for (int64_t xx = 0; xx < n; ++xx) {
        acc_v[r] += p[xx] * to_float(d_o[q_offset[xx] + c]);
        acc_k[r] += ds[xx] * to_float(q[q_offset[xx] + c]);
      }
    }
    __syncthreads();
  }
  for (int r = 0; r < kDimsPerThread; ++r) {
    const int64_t c = threadIdx.x + int64_t(r) * kChunk;
    if (c >= g.d) continue;
    dk[row + c] = from_float<T>(g.scale * acc_k[r]);
    dv[row + c] = from_float<T>(acc_v[r]);
  }
}

Geometry geometry(const AttentionDims& s, const char* kernel) {
  require(s.batch >= 0 && s.seq >= 0 && s.n_heads > 0 && s.n_kv_heads > 0 && s.head_dim > 0, kernel,
          "dims must be positive");
  require(s.n_heads % s.n_kv_heads == 0, kernel,
          "n_heads (" + std::to_string(s.n_heads) + ") must be a multiple of n_kv_heads (" +
              std::to_string(s.n_kv_heads) + ")");
  require(s.head_dim <= kMaxHeadDim, kernel, "head_dim above 512 is not supported by the reference kernel");
  require(s.seq <= int64_t(0x7FFFFFFF) && s.n_heads <= 65535 && s.batch <= 65535, kernel,
          "seq < 2^31, n_heads and batch <= 65535");
  return {s.batch,    s.seq,
          s.n_heads,  s.n_kv_heads,
          s.head_dim, s.n_heads / s.n_kv_heads,
          s.causal,   float(1.0 / std::sqrt(double(s.head_dim)))};
}

}  // namespace

template <class T>
void attention_fwd_reference(cudaStream_t stream, const AttentionDims& s, const T* q, const T* k, const T* v, T* o,
                             float* lse) {
  const Geometry g = geometry(s, "attention_fwd_reference");
  if (g.batch == 0 || g.seq == 0) return;
  fwd_kernel<<<dim3(unsigned(g.seq), unsigned(g.heads), unsigned(g.batch)), kChunk, 0, stream>>>(g, q, k, v, o, lse);
  check_launch("attention_fwd_reference");
}

template <class T>
void attention_bwd_reference(cudaStream_t stream, const AttentionDims& s, const T* q, const T* k, const T* v,
                             const T* o, const float* lse, const T* d_o, T* dq, T* dk, T* dv,
                             const ScratchAllocator& alloc) {
  const char* kernel = "attention_bwd_reference";
  const Geometry g = geometry(s, kernel);
  if (g.batch == 0 || g.seq == 0) return;
  const std::shared_ptr<void> row_dots =
      scratch(alloc, stream, size_t(g.batch * g.heads * g.seq) * sizeof(float), kernel);
  void* D = row_dots.get();
  bwd_dq_kernel<<<dim3(unsigned(g.seq), unsigned(g.heads), unsigned(g.batch)), kChunk, 0, stream>>>(
      g, q, k, v, o, lse, d_o, dq, static_cast<float*>(D));
  check_launch(kernel);
  bwd_dkv_kernel<<<dim3(unsigned(g.seq), unsigned(g.kv_heads), unsigned(g.batch)), kChunk, 0, stream>>>(
      g, q, k, v, lse, d_o, static_cast<const float*>(D), dk, dv);
  check_launch(kernel);
}

#define TPTUNE_INSTANTIATE(T)                                                                                          \
  template void attention_fwd_reference<T>(cudaStream_t, const AttentionDims&, const T*, const T*, const T*, T*,       \
                                           float*);                                                                    \
  template void attention_bwd_reference<T>(cudaStream_t, const AttentionDims&, const T*, const T*, const T*, const T*, \
                                           const float*, const T*, T*, T*, T*, const ScratchAllocator&);
TPTUNE_INSTANTIATE(float)
TPTUNE_INSTANTIATE(__nv_bfloat16)

}  // namespace tptune::cuda
