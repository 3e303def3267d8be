// Vocab-parallel embedding CUDA kernels; see embedding.h.
// Backward, deterministically: key[t] = local row of token t (vocab_local when another shard owns it),
// stable radix sort of (key, t) with CUB, then the first position of each run of equal keys sums the run's d_out
// rows in token order into its d_weight row (rows that no token hits stay zero from the memset).
#include <cub/device/device_radix_sort.cuh>
#include <string>

#include "kernels/cuda/device/check.h"
#include "kernels/cuda/device/device_element.cuh"
#include "kernels/cuda/embedding.h"

namespace tptune::cuda {
namespace {

using namespace kernel_names;  // kernels/cuda/device/device_element.cuh

// The local row of an id, or -1 when it is not in [vocab_offset, vocab_offset + vocab_local).
__device__ __forceinline__ int64_t local_row(int32_t id, int64_t vocab_local, int64_t vocab_offset) {
  const int64_t r = int64_t(id) - vocab_offset;
  return (r >= 0 && r < vocab_local) ? r : -1;
}

// Thread per (token, pack of N columns): the pack of the token's weight row, or zeros for a row another shard owns.
template <int N, class T>
__global__ void embedding_fwd_kernel(int64_t tokens, int64_t vocab_local, int64_t dim, int64_t vocab_offset,
                                     const int32_t* ids, const T* weight, T* out) {
  const int64_t packs = dim / N;
  TPTUNE_GRID_STRIDE(idx, tokens * packs) {
    const int64_t t = idx / packs, k = idx % packs;
    const int64_t row = local_row(ids[t], vocab_local, vocab_offset);
    Pack<T, N> p;
    if (row < 0) {
#pragma unroll
      for (int j = 0; j < N; ++j) p.v[j] = from_float<T>(0.0f);
    } else {
      p = load_pack<N>(weight + row * dim, k);
    }
    store_pack<N>(out + t * dim, k, p);
  }
}

__global__ void embedding_keys_kernel(int64_t tokens, int64_t vocab_local, int64_t vocab_offset, const int32_t* ids,
                                      uint32_t* keys, int32_t* positions) {
  TPTUNE_GRID_STRIDE(t, tokens) {
    const int64_t row = local_row(ids[t], vocab_local, vocab_offset);
    keys[t] = uint32_t(row < 0 ? vocab_local : row);
    positions[t] = int32_t(t);
  }
}

// Block per sorted position (grid-stride): a position that starts a run of an owned row sums the run, thread per
// pack of N columns, in token order, in float.
template <int N, class T>
__global__ void embedding_scatter_kernel(int64_t tokens, int64_t vocab_local, int64_t dim, const uint32_t* keys,
                                         const int32_t* positions, const T* d_out, T* d_weight) {
  for (int64_t i = blockIdx.x; i < tokens; i += gridDim.x) {
    const uint32_t key = keys[i];
    if (int64_t(key) >= vocab_local || (i > 0 && keys[i - 1] == key)) continue;
    for (int64_t k = threadIdx.x; k < dim / N; k += blockDim.x) {
      float acc[N];
#pragma unroll
      for (int j = 0; j < N; ++j) acc[j] = 0.0f;
      for (int64_t r = i; r < tokens && keys[r] == key; ++r) {
        const Pack<T, N> g = load_pack<N>(d_out + int64_t(positions[r]) * dim, k);
#pragma unroll
        for (int j = 0; j < N; ++j) acc[j] += to_float(g.v[j]);
      }
      Pack<T, N> out;
#pragma unroll
      for (int j = 0; j < N; ++j) out.v[j] = from_float<T>(acc[j]);
      store_pack<N>(d_weight + int64_t(key) * dim, k, out);
    }
  }
}

// 16 bytes of T per access when the rows (dim) and the arrays allow it.
template <class T>
bool rows_packed(int64_t dim, const void* a, const void* b) {
  constexpr int N = detail::kPack<T>;
  return dim % N == 0 && detail::pack_aligned(a, sizeof(T), N) && detail::pack_aligned(b, sizeof(T), N);
}

void check_dims(int64_t tokens, int64_t vocab_local, int64_t dim, int64_t vocab_offset, const char* kernel) {
  require(tokens >= 0 && vocab_local >= 0 && dim >= 0 && vocab_offset >= 0, kernel, "negative dims");
  require(tokens < int64_t(0x7FFFFFFF) && vocab_local < int64_t(0x7FFFFFFF), kernel,
          "tokens and vocab_local must be below 2^31 - 1");
}

// Number of key bits the sort needs for keys 0..max_key.
int key_bits(int64_t max_key) {
  int bits = 1;
  while (bits < 32 && (int64_t(1) << bits) <= max_key) ++bits;
  return bits;
}

}  // namespace

template <class T>
void embedding_fwd(cudaStream_t stream, int64_t tokens, int64_t vocab_local, int64_t dim, int64_t vocab_offset,
                   bool /*vocab_sharded: see embedding.h, ids are checked on upload*/, const int32_t* ids,
                   const T* weight, T* out) {
  check_dims(tokens, vocab_local, dim, vocab_offset, "embedding_fwd");
  if (tokens * dim == 0) return;
  constexpr int N = detail::kPack<T>;
  if (rows_packed<T>(dim, weight, out))
    embedding_fwd_kernel<N><<<detail::grid_for_items(tokens * (dim / N)), kThreads, 0, stream>>>(
        tokens, vocab_local, dim, vocab_offset, ids, weight, out);
  else
    embedding_fwd_kernel<1>
        <<<grid_for(tokens * dim), kThreads, 0, stream>>>(tokens, vocab_local, dim, vocab_offset, ids, weight, out);
  check_launch("embedding_fwd");
}

template <class T>
void embedding_bwd(cudaStream_t stream, int64_t tokens, int64_t vocab_local, int64_t dim, int64_t vocab_offset,
                   bool /*vocab_sharded*/, const int32_t* ids, const T* d_out, T* d_weight,
                   const ScratchAllocator& alloc) {
  const char* kernel = "embedding_bwd";
  check_dims(tokens, vocab_local, dim, vocab_offset, kernel);
  if (vocab_local * dim > 0)
    check_cuda(cudaMemsetAsync(d_weight, 0, size_t(vocab_local * dim) * sizeof(T), stream), kernel,
               "cudaMemsetAsync (zero d_weight)");
  if (tokens == 0 || dim == 0 || vocab_local == 0) return;
  const int n = int(tokens);
  size_t temp_bytes = 0;
  check_cuda(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, static_cast<const uint32_t*>(nullptr),
                                             static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                             static_cast<int32_t*>(nullptr), n, 0, key_bits(vocab_local), stream),
             kernel, "cub::DeviceRadixSort::SortPairs (temp size)");
  // One scratch block: keys in/out, positions in/out (4 bytes each per token), then CUB's temp storage.
  // (rounded up to 256 bytes: CUB's temp storage starts on the alignment of a fresh allocation)
  const size_t arrays = (size_t(tokens) * 4 * sizeof(uint32_t) + 255) / 256 * 256;
  const std::shared_ptr<void> buffers = scratch(alloc, stream, arrays + temp_bytes, kernel);
  uint32_t* keys_in = static_cast<uint32_t*>(buffers.get());
  uint32_t* keys_out = keys_in + tokens;
  int32_t* pos_in = reinterpret_cast<int32_t*>(keys_out + tokens);
  int32_t* pos_out = pos_in + tokens;
  void* temp = static_cast<char*>(buffers.get()) + arrays;
  embedding_keys_kernel<<<grid_for(tokens), kThreads, 0, stream>>>(tokens, vocab_local, vocab_offset, ids, keys_in,
                                                                   pos_in);
  check_launch(kernel);
  check_cuda(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, pos_in, pos_out, n, 0,
                                             key_bits(vocab_local), stream),
             kernel, "cub::DeviceRadixSort::SortPairs");
  if (rows_packed<T>(dim, d_out, d_weight))
    embedding_scatter_kernel<detail::kPack<T>><<<grid_for(tokens * kThreads), kThreads, 0, stream>>>(
        tokens, vocab_local, dim, keys_out, pos_out, d_out, d_weight);
  else
    embedding_scatter_kernel<1><<<grid_for(tokens * kThreads), kThreads, 0, stream>>>(
        tokens, vocab_local, dim, keys_out, pos_out, d_out, d_weight);
  check_launch(kernel);
}

#define TPTUNE_INSTANTIATE(T)                                                                                          \
  template void embedding_fwd<T>(cudaStream_t, int64_t, int64_t, int64_t, int64_t, bool, const int32_t*, const T*,     \
                                 T*);                                                                                  \
  template void embedding_bwd<T>(cudaStream_t, int64_t, int64_t, int64_t, int64_t, bool, const int32_t*, const T*, T*, \
                                 const ScratchAllocator&);
TPTUNE_INSTANTIATE(float)
TPTUNE_INSTANTIATE(__nv_bfloat16)

}  // namespace tptune::cuda
