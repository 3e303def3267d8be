#pragma once
// Causal grouped-query attention, forward and backward (CPU reference of the flash-attention contract).
//
// Contract (AttentionOp in plans/program/program.h):
//   forward  {q, k, v}                -> {o, lse}
//   backward {q, k, v, o, lse, d_o}   -> {dq, dk, dv}
// Shapes (row-major): q, o, d_o, dq are (batch, seq, n_heads * head_dim); k, v, dk, dv are
// (batch, seq, n_kv_heads * head_dim); lse is (batch, n_heads, seq) fp32.
// Query head h reads kv head h / (n_heads / n_kv_heads) (n_heads % n_kv_heads == 0; MHA when equal).
//
// Math, per (batch, head), scale = 1/sqrt(head_dim), query row i, key row j (j <= i when causal):
//   s_ij = scale * q_i . k_j,  lse_i = log sum_j exp(s_ij),  p_ij = exp(s_ij - lse_i),  o_i = sum_j p_ij v_j
// Backward (the flash-attention form: P is recomputed from lse, D_i = rowsum(dO * O) replaces sum_j p_ij dp_ij):
//   dv_j += sum_i p_ij do_i,  dp_ij = do_i . v_j,  ds_ij = p_ij (dp_ij - D_i),
//   dq_i = scale * sum_j ds_ij k_j,  dk_j += scale * sum_i ds_ij q_i
// dk and dv sum over the n_heads / n_kv_heads query heads sharing a kv head. All outputs are written (dk, dv are
// zeroed first), never accumulated into across calls.
//
// Implementation: the whole sequence as one block of attention_block.h (ring attention's building block): O(seq^2)
// with Eigen float matmuls, 64 query rows at a time (scores are a (64, keys) block, so memory stays O(64 * seq); a
// causal block only multiplies the keys it can see). Softmax
// statistics are float; the error is that of float dot products of head_dim and seq terms (see the tests).
// FLOPs (napkin, causal): forward 2 matmuls x 2*b*h*s*s*d / 2 (mask) = 2*b*h*s^2*d; backward ~2.5x forward.
// Preconditions (std::invalid_argument otherwise): positive dims, n_heads % n_kv_heads == 0.

#include <cstdint>

namespace tptune::kernels {

struct AttentionDims {
  int64_t batch = 0, seq = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  bool causal = true;
};

// q (b, s, hq*d), k, v (b, s, hkv*d) -> o (b, s, hq*d), lse (b, hq, s).
void attention(const AttentionDims& dims, const float* q, const float* k, const float* v, float* o, float* lse);

// q, k, v, o, lse as above, d_o (b, s, hq*d) -> dq (b, s, hq*d), dk, dv (b, s, hkv*d).
void attention_bwd(const AttentionDims& dims, const float* q, const float* k, const float* v, const float* o,
                   const float* lse, const float* d_o, float* dq, float* dk, float* dv);

}  // namespace tptune::kernels
