// Embedding CPU reference; see embedding.h for the contract.
#include "kernels/cpu/embedding.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tptune::kernels {
namespace {

// The local row of token t, or -1 when another shard owns it.
int64_t local_row(const int32_t* tokens, int64_t t, int64_t vocab_local, int64_t vocab_offset, bool vocab_sharded) {
  const int64_t row = int64_t(tokens[t]) - vocab_offset;
  if (row >= 0 && row < vocab_local) return row;
  if (!vocab_sharded)
    throw std::invalid_argument("embedding: token " + std::to_string(t) + " has id " + std::to_string(tokens[t]) +
                                ", expected an id in [0, " + std::to_string(vocab_local) + ")");
  return -1;
}

}  // namespace

void embedding(const int32_t* tokens, int64_t n_tokens, const float* weight, int64_t vocab_local, int64_t dim_local,
               int64_t vocab_offset, bool vocab_sharded, float* out) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t row = local_row(tokens, t, vocab_local, vocab_offset, vocab_sharded);
    float* o = out + t * dim_local;
    if (row < 0)
      std::fill(o, o + dim_local, 0.0f);
    else
      std::copy(weight + row * dim_local, weight + (row + 1) * dim_local, o);
  }
}

void embedding_bwd(const int32_t* tokens, int64_t n_tokens, const float* d_out, int64_t vocab_local, int64_t dim_local,
                   int64_t vocab_offset, bool vocab_sharded, float* d_weight) {
  std::fill(d_weight, d_weight + vocab_local * dim_local, 0.0f);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t row = local_row(tokens, t, vocab_local, vocab_offset, vocab_sharded);
    if (row < 0) continue;
    float* dw = d_weight + row * dim_local;
    const float* g = d_out + t * dim_local;
    for (int64_t i = 0; i < dim_local; ++i) dw[i] += g[i];
  }
}

}  // namespace tptune::kernels
