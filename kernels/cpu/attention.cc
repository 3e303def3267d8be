// Causal GQA attention CPU reference; see attention.h for the math.
#include "kernels/cpu/attention.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace tptune::kernels {
namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using CMap = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
using MMap = Eigen::Map<RowMat, 0, Eigen::OuterStride<>>;

constexpr int64_t kBlock = 64;  // query rows per block

void check(const AttentionDims& d) {
  if (d.batch < 0 || d.seq < 0 || d.n_heads <= 0 || d.n_kv_heads <= 0 || d.head_dim <= 0)
    throw std::invalid_argument("attention: dims must be positive");
  if (d.n_heads % d.n_kv_heads != 0)
    throw std::invalid_argument("attention: n_heads (" + std::to_string(d.n_heads) +
                                ") must be a multiple of n_kv_heads (" + std::to_string(d.n_kv_heads) + ")");
}

// Views of head h of batch b in a (batch, seq, heads*head_dim) tensor: (seq, head_dim) with row stride.
struct Heads {
  int64_t seq, heads, head_dim;
  int64_t offset(int64_t b, int64_t h) const { return b * seq * heads * head_dim + h * head_dim; }
  CMap view(const float* p, int64_t b, int64_t h) const {
    return CMap(p + offset(b, h), seq, head_dim, Eigen::OuterStride<>(heads * head_dim));
  }
  MMap view(float* p, int64_t b, int64_t h) const {
    return MMap(p + offset(b, h), seq, head_dim, Eigen::OuterStride<>(heads * head_dim));
  }
};

// Number of keys the query rows [i0, i1) see.
int64_t keys_seen(const AttentionDims& d, int64_t i1) { return d.causal ? i1 : d.seq; }

// Zero p(r, j) for masked keys j > i0 + r (causal only).
void zero_masked(const AttentionDims& d, int64_t i0, RowMat& p) {
  if (!d.causal) return;
  for (int64_t r = 0; r < p.rows(); ++r) {
    const int64_t first_masked = i0 + r + 1;
    if (first_masked < p.cols()) p.row(r).tail(p.cols() - first_masked).setZero();
  }
}

}  // namespace

void attention(const AttentionDims& d, const float* q, const float* k, const float* v, float* o, float* lse) {
  check(d);
  const Heads qh{d.seq, d.n_heads, d.head_dim}, kh{d.seq, d.n_kv_heads, d.head_dim};
  const int64_t group = d.n_heads / d.n_kv_heads;
  const float scale = float(1.0 / std::sqrt(double(d.head_dim)));
  RowMat s;
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.n_heads; ++h) {
      const CMap Q = qh.view(q, b, h), K = kh.view(k, b, h / group), V = kh.view(v, b, h / group);
      MMap O = qh.view(o, b, h);
      float* lse_bh = lse + (b * d.n_heads + h) * d.seq;
      for (int64_t i0 = 0; i0 < d.seq; i0 += kBlock) {
        const int64_t ni = std::min(kBlock, d.seq - i0), nk = keys_seen(d, i0 + ni);
        s.noalias() = scale * (Q.middleRows(i0, ni) * K.topRows(nk).transpose());
        for (int64_t r = 0; r < ni; ++r) {
          // Row max over visible keys (j <= i0 + r when causal; the diagonal is always visible).
          const int64_t visible = d.causal ? i0 + r + 1 : nk;
          const float m = s.row(r).head(visible).maxCoeff();
          s.row(r).head(visible) = (s.row(r).head(visible).array() - m).exp();
          if (visible < nk) s.row(r).tail(nk - visible).setZero();
          const float l = s.row(r).head(visible).sum();
          lse_bh[i0 + r] = m + std::log(l);
          s.row(r).head(visible) /= l;
        }
        O.middleRows(i0, ni).noalias() = s * V.topRows(nk);
      }
    }
  }
}

void attention_bwd(const AttentionDims& d, const float* q, const float* k, const float* v, const float* o,
                   const float* lse, const float* d_o, float* dq, float* dk, float* dv) {
  check(d);
  const Heads qh{d.seq, d.n_heads, d.head_dim}, kh{d.seq, d.n_kv_heads, d.head_dim};
  const int64_t group = d.n_heads / d.n_kv_heads;
  const float scale = float(1.0 / std::sqrt(double(d.head_dim)));
  const int64_t kv_elems = d.batch * d.seq * d.n_kv_heads * d.head_dim;
  std::fill(dk, dk + kv_elems, 0.0f);
  std::fill(dv, dv + kv_elems, 0.0f);
  RowMat p, dp;
  Eigen::VectorXf di;
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.n_heads; ++h) {
      const int64_t g = h / group;
      const CMap Q = qh.view(q, b, h), K = kh.view(k, b, g), V = kh.view(v, b, g);
      const CMap O = qh.view(o, b, h), dO = qh.view(d_o, b, h);
      MMap dQ = qh.view(dq, b, h), dK = kh.view(dk, b, g), dV = kh.view(dv, b, g);
      const float* lse_bh = lse + (b * d.n_heads + h) * d.seq;
      for (int64_t i0 = 0; i0 < d.seq; i0 += kBlock) {
        const int64_t ni = std::min(kBlock, d.seq - i0), nk = keys_seen(d, i0 + ni);
        const auto Qb = Q.middleRows(i0, ni);
        const auto dOb = dO.middleRows(i0, ni);
        // P = exp(scale * Q K^T - lse), masked entries exactly 0.
        p.noalias() = scale * (Qb * K.topRows(nk).transpose());
        for (int64_t r = 0; r < ni; ++r) p.row(r).array() = (p.row(r).array() - lse_bh[i0 + r]).exp();
        zero_masked(d, i0, p);
        dV.topRows(nk).noalias() += p.transpose() * dOb;
        dp.noalias() = dOb * V.topRows(nk).transpose();
        di = (dOb.array() * O.middleRows(i0, ni).array()).rowwise().sum();  // D_i = rowsum(dO * O)
        // dS = P * (dP - D_i); masked entries stay 0 since P is 0 there.
        p.array() *= (dp.colwise() - di).array();
        dQ.middleRows(i0, ni).noalias() = scale * (p * K.topRows(nk));
        dK.topRows(nk).noalias() += scale * (p.transpose() * Qb);
      }
    }
  }
}

}  // namespace tptune::kernels
