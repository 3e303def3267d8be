// CpuBackend kernels: thin calls into the CPU reference kernels of kernels/cpu/ (which fix the math and its
// precision), plus the trivial add/accumulate.
#include <fmt/format.h>

#include "kernels/cpu/activations.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/bias.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/float8.h"
#include "kernels/cpu/norms.h"
#include "kernels/cpu/rope.h"
#include "plans/util/error.h"
#include "runtime/cpu/cpu_backend.h"

namespace tptune {
namespace {
kernels::AttentionDims dims(const AttentionShape& s) {
  return {s.batch, s.seq, s.n_heads, s.n_kv_heads, s.head_dim, s.causal};
}
kernels::Float8Format format(DType t) {
  if (t == DType::fp8_e4m3) return kernels::Float8Format::e4m3;
  if (t == DType::fp8_e5m2) return kernels::Float8Format::e5m2;
  throw Error(fmt::format("fp8_cast: target dtype {} is not a float8 format", to_string(t)));
}
}  // namespace

// Every activation, weight and gradient is fp32 here (storage_for); F names the call when one is not.
#define F(p) (p).f32("cpu backend: " CALL)

#define CALL "attention_fwd"
void CpuBackend::attention_fwd(const AttentionShape& s, DevPtr q, DevPtr k, DevPtr v, DevPtr o, float* lse) {
  kernels::attention(dims(s), F(q), F(k), F(v), F(o), lse);
}
#undef CALL
#define CALL "attention_bwd"
void CpuBackend::attention_bwd(const AttentionShape& s, DevPtr q, DevPtr k, DevPtr v, DevPtr o, const float* lse,
                               DevPtr d_o, DevPtr dq, DevPtr dk, DevPtr dv) {
  kernels::attention_bwd(dims(s), F(q), F(k), F(v), F(o), lse, F(d_o), F(dq), F(dk), F(dv));
}
#undef CALL
#define CALL "attention_block_fwd"
void CpuBackend::attention_block_fwd(const kernels::BlockHeads& h, kernels::BlockMask mask, kernels::SeqRows q_rows,
                                     kernels::SeqRows kv_rows, DevPtr q, DevPtr k, DevPtr v, DevPtr o, float* lse) {
  kernels::attention_block_fwd(h, mask, q_rows, kv_rows, F(q), F(k), F(v), F(o), lse);
}
#undef CALL
#define CALL "attention_block_bwd"
void CpuBackend::attention_block_bwd(const kernels::BlockHeads& h, kernels::BlockMask mask, kernels::SeqRows q_rows,
                                     kernels::SeqRows kv_rows, DevPtr q, DevPtr k, DevPtr v, DevPtr o, const float* lse,
                                     DevPtr d_o, DevPtr dq, DevPtr dk, DevPtr dv) {
  kernels::attention_block_bwd(h, mask, q_rows, kv_rows, F(q), F(k), F(v), F(o), lse, F(d_o), F(dq), F(dk), F(dv));
}
#undef CALL
#define CALL "attention_merge"
void CpuBackend::attention_merge(const kernels::BlockHeads& h, kernels::SeqRows q_rows, DevPtr o, float* lse,
                                 DevPtr o_part, const float* lse_part) {
  kernels::merge_partial(h, q_rows, F(o), lse, F(o_part), lse_part);
}
#undef CALL
#define CALL "rmsnorm_fwd"
void CpuBackend::rmsnorm_fwd(int64_t rows, int64_t dim, double eps, DevPtr x, DevPtr w, DevPtr y, float* rstd) {
  kernels::rmsnorm(F(x), F(w), rows, dim, static_cast<float>(eps), F(y), rstd);
}
#undef CALL
#define CALL "add_rmsnorm_fwd"
void CpuBackend::add_rmsnorm_fwd(int64_t rows, int64_t dim, double eps, DevPtr a, DevPtr b, DevPtr w, DevPtr h,
                                 DevPtr y, float* rstd) {
  kernels::add_rmsnorm(F(a), F(b), F(w), rows, dim, static_cast<float>(eps), F(h), F(y), rstd);
}
#undef CALL
#define CALL "rmsnorm_bwd_add"
void CpuBackend::rmsnorm_bwd_add(int64_t rows, int64_t dim, DevPtr x, DevPtr w, const float* rstd, DevPtr dy,
                                 DevPtr dres, DevPtr dx, DevPtr dw) {
  kernels::rmsnorm_bwd_add(F(x), F(w), rstd, F(dy), F(dres), rows, dim, F(dx), F(dw));
}
#undef CALL
#define CALL "rmsnorm_bwd"
void CpuBackend::rmsnorm_bwd(int64_t rows, int64_t dim, DevPtr x, DevPtr w, const float* rstd, DevPtr dy, DevPtr dx,
                             DevPtr dw) {
  kernels::rmsnorm_bwd(F(x), F(w), rstd, F(dy), rows, dim, F(dx), F(dw));
}
#undef CALL
#define CALL "layernorm_fwd"
void CpuBackend::layernorm_fwd(int64_t rows, int64_t dim, double eps, DevPtr x, DevPtr w, DevPtr b, DevPtr y,
                               float* mean, float* rstd) {
  kernels::layernorm(F(x), F(w), F(b), rows, dim, static_cast<float>(eps), F(y), mean, rstd);
}
#undef CALL
#define CALL "layernorm_bwd"
void CpuBackend::layernorm_bwd(int64_t rows, int64_t dim, DevPtr x, DevPtr w, const float* mean, const float* rstd,
                               DevPtr dy, DevPtr dx, DevPtr dw, DevPtr db) {
  kernels::layernorm_bwd(F(x), F(w), mean, rstd, F(dy), rows, dim, F(dx), F(dw), F(db));
}
#undef CALL
#define CALL "rope"
void CpuBackend::rope_fwd(const RopeShape& s, DevPtr x, DevPtr y) {
  kernels::rope(F(x), s.batch, s.seq, s.heads, s.head_dim, s.offset, s.theta, F(y));
}
void CpuBackend::rope_bwd(const RopeShape& s, DevPtr dy, DevPtr dx) {
  kernels::rope_bwd(F(dy), s.batch, s.seq, s.heads, s.head_dim, s.offset, s.theta, F(dx));
}
#undef CALL
#define CALL "activation"
void CpuBackend::swiglu_fwd(int64_t n, DevPtr a, DevPtr b, DevPtr y) { kernels::swiglu(F(a), F(b), n, F(y)); }
void CpuBackend::swiglu_bwd(int64_t n, DevPtr a, DevPtr b, DevPtr dy, DevPtr da, DevPtr db) {
  kernels::swiglu_bwd(F(a), F(b), F(dy), n, F(da), F(db));
}
void CpuBackend::gelu_fwd(int64_t n, DevPtr a, DevPtr y) { kernels::gelu(F(a), n, F(y)); }
void CpuBackend::gelu_bwd(int64_t n, DevPtr a, DevPtr dy, DevPtr da) { kernels::gelu_bwd(F(a), F(dy), n, F(da)); }
#undef CALL
#define CALL "add"
void CpuBackend::add(int64_t n, DevPtr ap, DevPtr bp, DevPtr yp) {
  const float *a = F(ap), *b = F(bp);
  float* y = F(yp);
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}
void CpuBackend::accumulate(int64_t n, DevPtr ap, DevPtr yp) {
  const float* a = F(ap);
  float* y = F(yp);
  for (int64_t i = 0; i < n; ++i) y[i] += a[i];
}
#undef CALL
#define CALL "bias"
void CpuBackend::bias_add(int64_t rows, int64_t n, int split, DevPtr x, DevPtr b, DevPtr y) {
  kernels::bias_add(F(x), F(b), rows, n, split, F(y));
}
void CpuBackend::bias_grad(int64_t rows, int64_t n, DevPtr dy, DevPtr db) { kernels::bias_grad(F(dy), rows, n, F(db)); }
#undef CALL
#define CALL "adamw"
void CpuBackend::adamw(int64_t n, const AdamWParams& h, float* p, DevPtr g, float* m, float* v) {
  kernels::AdamWConfig c;
  c.lr = h.lr;
  c.beta1 = h.beta1;
  c.beta2 = h.beta2;
  c.eps = h.eps;
  c.weight_decay = h.weight_decay;
  kernels::adamw(p, F(g), m, v, n, c, h.step);
}
#undef CALL
#define CALL "embedding"
void CpuBackend::embedding_fwd(int64_t tokens, int64_t vocab_local, int64_t dim, int64_t vocab_offset,
                               bool vocab_sharded, const int32_t* ids, DevPtr weight, DevPtr out) {
  kernels::embedding(ids, tokens, F(weight), vocab_local, dim, vocab_offset, vocab_sharded, F(out));
}
void CpuBackend::embedding_bwd(int64_t tokens, int64_t vocab_local, int64_t dim, int64_t vocab_offset,
                               bool vocab_sharded, const int32_t* ids, DevPtr d_out, DevPtr d_weight) {
  kernels::embedding_bwd(ids, tokens, F(d_out), vocab_local, dim, vocab_offset, vocab_sharded, F(d_weight));
}
#undef CALL
#define CALL "cross_entropy"
void CpuBackend::ce_row_max(int64_t tokens, int64_t vocab_local, DevPtr logits, float* max) {
  kernels::cross_entropy_row_max(F(logits), tokens, vocab_local, max);
}
void CpuBackend::ce_sum_exp(int64_t tokens, int64_t vocab_local, DevPtr logits, const float* max, float* sumexp) {
  kernels::cross_entropy_sum_exp(F(logits), max, tokens, vocab_local, sumexp);
}
void CpuBackend::ce_target_logit(int64_t tokens, int64_t vocab_local, int64_t vocab_offset, DevPtr logits,
                                 const int32_t* targets, float* tlogit) {
  kernels::cross_entropy_target_logit(F(logits), targets, tokens, vocab_local, vocab_offset, tlogit);
}
void CpuBackend::ce_loss(int64_t tokens, int64_t mean_over, const float* max, const float* sumexp, const float* tlogit,
                         float* loss) {
  *loss = kernels::cross_entropy_loss(max, sumexp, tlogit, tokens, mean_over);
}
void CpuBackend::ce_backward(int64_t tokens, int64_t mean_over, int64_t vocab_local, int64_t vocab_offset,
                             DevPtr logits, const float* max, const float* sumexp, const int32_t* targets,
                             DevPtr d_logits) {
  kernels::cross_entropy_bwd(F(logits), max, sumexp, targets, tokens, mean_over, vocab_local, vocab_offset,
                             F(d_logits));
}
#undef CALL
#define CALL "fp8_cast"
void CpuBackend::fp8_amax(int64_t n, DevPtr x, float* amax) { *amax = kernels::amax(F(x), n); }
void CpuBackend::fp8_cast(int64_t n, DType to, DevPtr x, const float* amax, DevPtr xq, float* scale) {
  *scale = kernels::cast_to_float8(F(x), n, *amax, format(to), F(xq));
}
#undef CALL
#undef F

}  // namespace tptune
