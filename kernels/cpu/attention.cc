// Causal GQA attention CPU reference; see attention.h for the math. The whole sequence is one block of
// attention_block.h: queries and keys the same rows at the same positions, the mask causal or full.
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cpu/attention_block.h"

namespace tptune::kernels {
namespace {

void check(const AttentionDims& d) {
  if (d.batch < 0 || d.seq < 0 || d.n_heads <= 0 || d.n_kv_heads <= 0 || d.head_dim <= 0)
    throw std::invalid_argument("attention: dims must be positive");
  if (d.n_heads % d.n_kv_heads != 0)
    throw std::invalid_argument("attention: n_heads (" + std::to_string(d.n_heads) +
                                ") must be a multiple of n_kv_heads (" + std::to_string(d.n_kv_heads) + ")");
}

BlockHeads heads_of(const AttentionDims& d) { return {d.batch, d.n_heads, d.n_kv_heads, d.head_dim}; }
SeqRows whole(const AttentionDims& d) { return {d.seq, 0, d.seq, 0}; }
BlockMask mask_of(const AttentionDims& d) { return d.causal ? BlockMask::causal : BlockMask::full; }

}  // namespace

void attention(const AttentionDims& d, const float* q, const float* k, const float* v, float* o, float* lse) {
  check(d);
  attention_block_fwd(heads_of(d), mask_of(d), whole(d), whole(d), q, k, v, o, lse);
}

void attention_bwd(const AttentionDims& d, const float* q, const float* k, const float* v, const float* o,
                   const float* lse, const float* d_o, float* dq, float* dk, float* dv) {
  check(d);
  // The block backward adds its share: the whole sequence's share is the gradient, from zero.
  std::fill(dq, dq + d.batch * d.seq * d.n_heads * d.head_dim, 0.0f);
  std::fill(dk, dk + d.batch * d.seq * d.n_kv_heads * d.head_dim, 0.0f);
  std::fill(dv, dv + d.batch * d.seq * d.n_kv_heads * d.head_dim, 0.0f);
  attention_block_bwd(heads_of(d), mask_of(d), whole(d), whole(d), q, k, v, o, lse, d_o, dq, dk, dv);
}

}  // namespace tptune::kernels
