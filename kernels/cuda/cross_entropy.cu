// Vocab-parallel cross-entropy CUDA kernels; see cross_entropy.h. Row stages: one block per token row, in 16-byte
// packs when the rows are aligned to them.
#include <algorithm>

#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/device/check.h"
#include "kernels/cuda/device/device_element.cuh"
#include "kernels/formulas/cross_entropy.h"

namespace tptune::cuda {

using namespace formulas;  // the per-element formulas the CPU reference shares (kernels/formulas/)
namespace {

using namespace kernel_names;  // kernels/cuda/device/device_element.cuh

// Calls f(j, element j) for every j in [0, n) of a row this thread's block owns, thread threadIdx.x taking
// elements (N = 1) or 16-byte packs (N > 1, the row aligned to them and n a multiple of N) tid, tid + blockDim, ...
template <int N, class T, class F>
__device__ __forceinline__ void for_row(const T* row, int64_t n, F f) {
  for (int64_t k = threadIdx.x; k < n / N; k += blockDim.x) {
    const Pack<T, N> p = load_pack<N>(row, k);
#pragma unroll
    for (int j = 0; j < N; ++j) f(k * N + j, p.v[j]);
  }
}

template <int N, class T>
__global__ void row_max_kernel(int64_t vocab_local, const T* logits, float* max) {
  __shared__ float shared[33];
  const T* row = logits + int64_t(blockIdx.x) * vocab_local;
  float m = -INFINITY;
  for_row<N>(row, vocab_local, [&](int64_t, T x) { m = detail::nan_ignoring_max(m, to_float(x)); });
  m = block_max(m, shared);
  if (threadIdx.x == 0) max[blockIdx.x] = m;
}

template <int N, class T>
__global__ void sum_exp_kernel(int64_t vocab_local, const T* logits, const float* max, float* sumexp) {
  __shared__ double shared[33];
  const T* row = logits + int64_t(blockIdx.x) * vocab_local;
  const float m = max[blockIdx.x];
  double s = 0.0;
  for_row<N>(row, vocab_local, [&](int64_t, T x) { s += ce_exp_term<Compute<T>>(to_float(x), m); });
  s = block_sum(s, shared);
  if (threadIdx.x == 0) sumexp[blockIdx.x] = float(s);
}

template <class T>
__global__ void target_logit_kernel(int64_t tokens, int64_t vocab_local, int64_t vocab_offset, const T* logits,
                                    const int32_t* targets, float* tlogit) {
  TPTUNE_GRID_STRIDE(t, tokens) {
    const int64_t j = ce_local_column(targets[t], vocab_local, vocab_offset);
    tlogit[t] = j < 0 ? 0.0f : to_float(logits[t * vocab_local + j]);
  }
}

__global__ void loss_kernel(int64_t tokens, const float* max, const float* sumexp, const float* tlogit, float* loss) {
  __shared__ double shared[33];
  double s = 0.0;
  for (int64_t t = threadIdx.x; t < tokens; t += blockDim.x) s += ce_token_loss(max[t], sumexp[t], tlogit[t]);
  s = block_sum(s, shared);
  if (threadIdx.x == 0) *loss = tokens <= 0 ? 0.0f : float(s / double(tokens));
}

template <int N, class T>
__global__ void backward_kernel(int64_t tokens, int64_t vocab_local, int64_t vocab_offset, const T* logits,
                                const float* max, const float* sumexp, const int32_t* targets, T* d_logits) {
  const int64_t t = blockIdx.x;
  const T* row = logits + t * vocab_local;
  T* drow = d_logits + t * vocab_local;
  const float m = max[t];
  using C = Compute<T>;
  const C inv_sum = C(1) / C(sumexp[t]), inv_tokens = C(1) / C(tokens);
  const int64_t target = ce_local_column(targets[t], vocab_local, vocab_offset);
  for (int64_t k = threadIdx.x; k < vocab_local / N; k += blockDim.x) {  // each pack read before it is written
    const Pack<T, N> p = load_pack<N>(row, k);
    Pack<T, N> g;
#pragma unroll
    for (int j = 0; j < N; ++j)
      g.v[j] = from_double<T>(double(ce_grad<C>(to_float(p.v[j]), m, inv_sum, k * N + j == target, inv_tokens)));
    store_pack<N>(drow, k, g);
  }
}

// N = 16 bytes of T when every row of `logits` (and d_logits) starts aligned to it, else 1.
template <class T>
bool rows_packed(int64_t vocab_local, const void* a, const void* b = nullptr) {
  constexpr int N = detail::kPack<T>;
  return vocab_local % N == 0 && detail::pack_aligned(a, sizeof(T), N) && detail::pack_aligned(b, sizeof(T), N);
}

// Threads per row block: 256, or 1024 for rows of at least 64 Ki elements (a 128 Ki vocabulary at tp 1 or 2).
unsigned row_block(int64_t vocab_local) { return vocab_local >= (int64_t(1) << 16) ? 1024u : unsigned(kThreads); }

void check_dims(int64_t tokens, int64_t vocab_local, const char* kernel) {
  require(tokens >= 0 && vocab_local >= 0, kernel, "negative dims");
  require(tokens <= int64_t(0x7FFFFFFF), kernel, "more than 2^31 - 1 tokens");
}

}  // namespace

template <class T>
void ce_row_max(cudaStream_t stream, int64_t tokens, int64_t vocab_local, const T* logits, float* max) {
  check_dims(tokens, vocab_local, "ce_row_max");
  if (tokens == 0) return;
  if (rows_packed<T>(vocab_local, logits))
    row_max_kernel<detail::kPack<T>><<<unsigned(tokens), row_block(vocab_local), 0, stream>>>(vocab_local, logits, max);
  else
    row_max_kernel<1><<<unsigned(tokens), row_block(vocab_local), 0, stream>>>(vocab_local, logits, max);
  check_launch("ce_row_max");
}

template <class T>
void ce_sum_exp(cudaStream_t stream, int64_t tokens, int64_t vocab_local, const T* logits, const float* max,
                float* sumexp) {
  check_dims(tokens, vocab_local, "ce_sum_exp");
  if (tokens == 0) return;
  if (rows_packed<T>(vocab_local, logits))
    sum_exp_kernel<detail::kPack<T>>
        <<<unsigned(tokens), row_block(vocab_local), 0, stream>>>(vocab_local, logits, max, sumexp);
  else
    sum_exp_kernel<1><<<unsigned(tokens), row_block(vocab_local), 0, stream>>>(vocab_local, logits, max, sumexp);
  check_launch("ce_sum_exp");
}

template <class T>
void ce_target_logit(cudaStream_t stream, int64_t tokens, int64_t vocab_local, int64_t vocab_offset, const T* logits,
                     const int32_t* targets, float* tlogit) {
  check_dims(tokens, vocab_local, "ce_target_logit");
  if (tokens == 0) return;
  target_logit_kernel<<<grid_for(tokens), kThreads, 0, stream>>>(tokens, vocab_local, vocab_offset, logits, targets,
                                                                 tlogit);
  check_launch("ce_target_logit");
}

void ce_loss(cudaStream_t stream, int64_t tokens, const float* max, const float* sumexp, const float* tlogit,
             float* loss) {
  check_dims(tokens, 0, "ce_loss");
  loss_kernel<<<1, 1024, 0, stream>>>(tokens, max, sumexp, tlogit, loss);
  check_launch("ce_loss");
}

template <class T>
void ce_backward(cudaStream_t stream, int64_t tokens, int64_t vocab_local, int64_t vocab_offset, const T* logits,
                 const float* max, const float* sumexp, const int32_t* targets, T* d_logits) {
  check_dims(tokens, vocab_local, "ce_backward");
  if (tokens == 0 || vocab_local == 0) return;
  if (rows_packed<T>(vocab_local, logits, d_logits))
    backward_kernel<detail::kPack<T>><<<unsigned(tokens), row_block(vocab_local), 0, stream>>>(
        tokens, vocab_local, vocab_offset, logits, max, sumexp, targets, d_logits);
  else
    backward_kernel<1><<<unsigned(tokens), row_block(vocab_local), 0, stream>>>(tokens, vocab_local, vocab_offset,
                                                                                logits, max, sumexp, targets, d_logits);
  check_launch("ce_backward");
}

#define TPTUNE_INSTANTIATE(T)                                                                                  \
  template void ce_row_max<T>(cudaStream_t, int64_t, int64_t, const T*, float*);                               \
  template void ce_sum_exp<T>(cudaStream_t, int64_t, int64_t, const T*, const float*, float*);                 \
  template void ce_target_logit<T>(cudaStream_t, int64_t, int64_t, int64_t, const T*, const int32_t*, float*); \
  template void ce_backward<T>(cudaStream_t, int64_t, int64_t, int64_t, const T*, const float*, const float*,  \
                               const int32_t*, T*);
TPTUNE_INSTANTIATE(float)
TPTUNE_INSTANTIATE(__nv_bfloat16)

}  // namespace tptune::cuda
