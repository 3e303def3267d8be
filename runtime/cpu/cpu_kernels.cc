// CpuBackend kernels: thin calls into the CPU reference kernels of kernels/cpu/ (which fix the math and its
// precision), plus the trivial add/accumulate.
#include <fmt/format.h>

#include "kernels/cpu/activations.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/float8.h"
#include "kernels/cpu/norms.h"
#include "kernels/cpu/rope.h"
#include "plans/error.h"
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

void CpuBackend::attention_fwd(const AttentionShape& s, const float* q, const float* k, const float* v, float* o,
                               float* lse) {
  kernels::attention(dims(s), q, k, v, o, lse);
}
void CpuBackend::attention_bwd(const AttentionShape& s, const float* q, const float* k, const float* v, const float* o,
                               const float* lse, const float* d_o, float* dq, float* dk, float* dv) {
  kernels::attention_bwd(dims(s), q, k, v, o, lse, d_o, dq, dk, dv);
}
void CpuBackend::rmsnorm_fwd(int64_t rows, int64_t dim, double eps, const float* x, const float* w, float* y,
                             float* rstd) {
  kernels::rmsnorm(x, w, rows, dim, static_cast<float>(eps), y, rstd);
}
void CpuBackend::rmsnorm_bwd(int64_t rows, int64_t dim, const float* x, const float* w, const float* rstd,
                             const float* dy, float* dx, float* dw) {
  kernels::rmsnorm_bwd(x, w, rstd, dy, rows, dim, dx, dw);
}
void CpuBackend::layernorm_fwd(int64_t rows, int64_t dim, double eps, const float* x, const float* w, const float* b,
                               float* y, float* mean, float* rstd) {
  kernels::layernorm(x, w, b, rows, dim, static_cast<float>(eps), y, mean, rstd);
}
void CpuBackend::layernorm_bwd(int64_t rows, int64_t dim, const float* x, const float* w, const float* mean,
                               const float* rstd, const float* dy, float* dx, float* dw, float* db) {
  kernels::layernorm_bwd(x, w, mean, rstd, dy, rows, dim, dx, dw, db);
}
void CpuBackend::rope_fwd(const RopeShape& s, const float* x, float* y) {
  kernels::rope(x, s.batch, s.seq, s.heads, s.head_dim, s.offset, s.theta, y);
}
void CpuBackend::rope_bwd(const RopeShape& s, const float* dy, float* dx) {
  kernels::rope_bwd(dy, s.batch, s.seq, s.heads, s.head_dim, s.offset, s.theta, dx);
}
void CpuBackend::swiglu_fwd(int64_t n, const float* a, const float* b, float* y) { kernels::swiglu(a, b, n, y); }
void CpuBackend::swiglu_bwd(int64_t n, const float* a, const float* b, const float* dy, float* da, float* db) {
  kernels::swiglu_bwd(a, b, dy, n, da, db);
}
void CpuBackend::gelu_fwd(int64_t n, const float* a, float* y) { kernels::gelu(a, n, y); }
void CpuBackend::gelu_bwd(int64_t n, const float* a, const float* dy, float* da) { kernels::gelu_bwd(a, dy, n, da); }
void CpuBackend::add(int64_t n, const float* a, const float* b, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}
void CpuBackend::accumulate(int64_t n, const float* a, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += a[i];
}
void CpuBackend::adamw(int64_t n, const AdamWParams& h, float* p, const float* g, float* m, float* v) {
  kernels::AdamWConfig c;
  c.lr = h.lr;
  c.beta1 = h.beta1;
  c.beta2 = h.beta2;
  c.eps = h.eps;
  c.weight_decay = h.weight_decay;
  kernels::adamw(p, g, m, v, n, c, h.step);
}
void CpuBackend::embedding_fwd(int64_t tokens, int64_t vocab_local, int64_t dim, int64_t vocab_offset,
                               bool vocab_sharded, const int32_t* ids, const float* weight, float* out) {
  kernels::embedding(ids, tokens, weight, vocab_local, dim, vocab_offset, vocab_sharded, out);
}
void CpuBackend::embedding_bwd(int64_t tokens, int64_t vocab_local, int64_t dim, int64_t vocab_offset,
                               bool vocab_sharded, const int32_t* ids, const float* d_out, float* d_weight) {
  kernels::embedding_bwd(ids, tokens, d_out, vocab_local, dim, vocab_offset, vocab_sharded, d_weight);
}
void CpuBackend::ce_row_max(int64_t tokens, int64_t vocab_local, const float* logits, float* max) {
  kernels::cross_entropy_row_max(logits, tokens, vocab_local, max);
}
void CpuBackend::ce_sum_exp(int64_t tokens, int64_t vocab_local, const float* logits, const float* max, float* sumexp) {
  kernels::cross_entropy_sum_exp(logits, max, tokens, vocab_local, sumexp);
}
void CpuBackend::ce_target_logit(int64_t tokens, int64_t vocab_local, int64_t vocab_offset, const float* logits,
                                 const int32_t* targets, float* tlogit) {
  kernels::cross_entropy_target_logit(logits, targets, tokens, vocab_local, vocab_offset, tlogit);
}
void CpuBackend::ce_loss(int64_t tokens, const float* max, const float* sumexp, const float* tlogit, float* loss) {
  *loss = kernels::cross_entropy_loss(max, sumexp, tlogit, tokens);
}
void CpuBackend::ce_backward(int64_t tokens, int64_t vocab_local, int64_t vocab_offset, const float* logits,
                             const float* max, const float* sumexp, const int32_t* targets, float* d_logits) {
  kernels::cross_entropy_bwd(logits, max, sumexp, targets, tokens, vocab_local, vocab_offset, d_logits);
}
void CpuBackend::fp8_amax(int64_t n, const float* x, float* amax) { *amax = kernels::amax(x, n); }
void CpuBackend::fp8_cast(int64_t n, DType to, const float* x, const float* amax, float* xq, float* scale) {
  *scale = kernels::cast_to_float8(x, n, *amax, format(to), xq);
}

}  // namespace tptune
