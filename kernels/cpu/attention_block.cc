// Blockwise attention, merge and block backward; see attention_block.h for the math and the masks.
#include "kernels/cpu/attention_block.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace tptune::kernels {
namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using CMap = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
using MMap = Eigen::Map<RowMat, 0, Eigen::OuterStride<>>;

constexpr int64_t kBlock = 64;  // query rows per matmul block, as attention.cc
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void check(const BlockHeads& h, SeqRows q, SeqRows kv) {
  if (h.batch < 0 || h.n_heads <= 0 || h.n_kv_heads <= 0 || h.head_dim <= 0)
    throw std::invalid_argument("attention block: dims must be positive");
  if (h.n_heads % h.n_kv_heads != 0)
    throw std::invalid_argument("attention block: n_heads (" + std::to_string(h.n_heads) +
                                ") must be a multiple of n_kv_heads (" + std::to_string(h.n_kv_heads) + ")");
  for (const SeqRows& r : {q, kv})
    if (r.begin < 0 || r.len < 0 || r.seq < 0 || r.begin + r.len > r.seq)
      throw std::invalid_argument("attention block: rows [" + std::to_string(r.begin) + ", " +
                                  std::to_string(r.begin + r.len) + ") outside a tensor of " + std::to_string(r.seq) +
                                  " rows");
}

// The rows of head `head` of batch b: (rows.len, head_dim) with the row stride of heads * head_dim.
struct RowsView {
  SeqRows rows;
  int64_t heads, head_dim;
  int64_t offset(int64_t b, int64_t head) const { return ((b * rows.seq + rows.begin) * heads + head) * head_dim; }
  CMap view(const float* p, int64_t b, int64_t head) const {
    return CMap(p + offset(b, head), rows.len, head_dim, Eigen::OuterStride<>(heads * head_dim));
  }
  MMap view(float* p, int64_t b, int64_t head) const {
    return MMap(p + offset(b, head), rows.len, head_dim, Eigen::OuterStride<>(heads * head_dim));
  }
};

// Keys of the kv block visible to query row i of the q block (a prefix of the block).
int64_t visible_keys(BlockMask mask, SeqRows q, SeqRows kv, int64_t i) {
  switch (mask) {
    case BlockMask::full:
      return kv.len;
    case BlockMask::masked_out:
      return 0;
    case BlockMask::causal:
      break;
  }
  return std::clamp<int64_t>(q.pos + i - kv.pos + 1, 0, kv.len);
}

// lse of row i of head `head` of batch b, for a (batch, n_heads, seq) lse tensor.
int64_t lse_index(const BlockHeads& h, SeqRows q, int64_t b, int64_t head, int64_t i) {
  return (b * h.n_heads + head) * q.seq + q.begin + i;
}

// log(sigmoid(x)), stable for large |x|.
float log_sigmoid(float x) { return x >= 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x)); }
float sigmoid(float x) { return x >= 0 ? 1.0f / (1.0f + std::exp(-x)) : std::exp(x) / (1.0f + std::exp(x)); }

}  // namespace

void attention_block_fwd(const BlockHeads& h, BlockMask mask, SeqRows qr, SeqRows kvr, const float* q, const float* k,
                         const float* v, float* o, float* lse) {
  check(h, qr, kvr);
  const RowsView qv{qr, h.n_heads, h.head_dim}, kvv{kvr, h.n_kv_heads, h.head_dim};
  const int64_t group = h.n_heads / h.n_kv_heads;
  const float scale = float(1.0 / std::sqrt(double(h.head_dim)));
  RowMat s;
  for (int64_t b = 0; b < h.batch; ++b) {
    for (int64_t head = 0; head < h.n_heads; ++head) {
      const CMap Q = qv.view(q, b, head), K = kvv.view(k, b, head / group), V = kvv.view(v, b, head / group);
      MMap O = qv.view(o, b, head);
      for (int64_t i0 = 0; i0 < qr.len; i0 += kBlock) {
        const int64_t ni = std::min(kBlock, qr.len - i0);
        const int64_t nk = visible_keys(mask, qr, kvr, i0 + ni - 1);  // the block's last row sees the most keys
        if (nk == 0) {
          O.middleRows(i0, ni).setZero();
          for (int64_t r = 0; r < ni; ++r) lse[lse_index(h, qr, b, head, i0 + r)] = kNegInf;
          continue;
        }
        s.noalias() = scale * (Q.middleRows(i0, ni) * K.topRows(nk).transpose());
        for (int64_t r = 0; r < ni; ++r) {
          const int64_t visible = visible_keys(mask, qr, kvr, i0 + r);
          float& lse_r = lse[lse_index(h, qr, b, head, i0 + r)];
          if (visible == 0) {
            s.row(r).setZero();
            lse_r = kNegInf;
            continue;
          }
          const float m = s.row(r).head(visible).maxCoeff();
          s.row(r).head(visible) = (s.row(r).head(visible).array() - m).exp();
          if (visible < nk) s.row(r).tail(nk - visible).setZero();
          const float l = s.row(r).head(visible).sum();
          lse_r = m + std::log(l);
          s.row(r).head(visible) /= l;
        }
        O.middleRows(i0, ni).noalias() = s * V.topRows(nk);
      }
    }
  }
}

void merge_partial(const BlockHeads& h, SeqRows qr, float* o, float* lse, const float* o_part, const float* lse_part) {
  check(h, qr, qr);
  const RowsView qv{qr, h.n_heads, h.head_dim};
  for (int64_t b = 0; b < h.batch; ++b) {
    for (int64_t head = 0; head < h.n_heads; ++head) {
      MMap O = qv.view(o, b, head);
      const CMap P = qv.view(o_part, b, head);
      for (int64_t i = 0; i < qr.len; ++i) {
        const int64_t li = lse_index(h, qr, b, head, i);
        const float a = lse[li], p = lse_part[li];
        if (p == kNegInf) continue;  // the part saw no key: nothing to add
        if (a == kNegInf) {          // nothing accumulated yet: take the part
          O.row(i) = P.row(i);
          lse[li] = p;
          continue;
        }
        // _SDPAMerger._merge_one: out = out - sigmoid(block_lse - lse) * (out - block_out),
        //                         lse = lse - logsigmoid(lse - block_lse).
        const float w = sigmoid(p - a);
        O.row(i) -= w * (O.row(i) - P.row(i));
        lse[li] = a - log_sigmoid(a - p);
      }
    }
  }
}

void attention_block_bwd(const BlockHeads& h, BlockMask mask, SeqRows qr, SeqRows kvr, const float* q, const float* k,
                         const float* v, const float* o, const float* lse, const float* d_o, float* dq, float* dk,
                         float* dv) {
  check(h, qr, kvr);
  if (mask == BlockMask::masked_out) return;
  const RowsView qv{qr, h.n_heads, h.head_dim}, kvv{kvr, h.n_kv_heads, h.head_dim};
  const int64_t group = h.n_heads / h.n_kv_heads;
  const float scale = float(1.0 / std::sqrt(double(h.head_dim)));
  RowMat p, dp;
  Eigen::VectorXf di;
  for (int64_t b = 0; b < h.batch; ++b) {
    for (int64_t head = 0; head < h.n_heads; ++head) {
      const int64_t g = head / group;
      const CMap Q = qv.view(q, b, head), K = kvv.view(k, b, g), V = kvv.view(v, b, g);
      const CMap O = qv.view(o, b, head), dO = qv.view(d_o, b, head);
      MMap dQ = qv.view(dq, b, head), dK = kvv.view(dk, b, g), dV = kvv.view(dv, b, g);
      for (int64_t i0 = 0; i0 < qr.len; i0 += kBlock) {
        const int64_t ni = std::min(kBlock, qr.len - i0);
        const int64_t nk = visible_keys(mask, qr, kvr, i0 + ni - 1);
        if (nk == 0) continue;
        const auto Qb = Q.middleRows(i0, ni);
        const auto dOb = dO.middleRows(i0, ni);
        // P = exp(scale * Q K^T - lse) with the final lse of each row; invisible entries exactly 0.
        p.noalias() = scale * (Qb * K.topRows(nk).transpose());
        for (int64_t r = 0; r < ni; ++r) {
          const int64_t visible = visible_keys(mask, qr, kvr, i0 + r);
          const float lse_r = lse[lse_index(h, qr, b, head, i0 + r)];
          if (visible > 0) p.row(r).head(visible) = (p.row(r).head(visible).array() - lse_r).exp();
          if (visible < nk) p.row(r).tail(nk - visible).setZero();
        }
        dV.topRows(nk).noalias() += p.transpose() * dOb;
        dp.noalias() = dOb * V.topRows(nk).transpose();
        di = (dOb.array() * O.middleRows(i0, ni).array()).rowwise().sum();  // D_i = rowsum(dO * O), final O
        p.array() *= (dp.colwise() - di).array();                           // dS = P * (dP - D_i)
        dQ.middleRows(i0, ni).noalias() += scale * (p * K.topRows(nk));
        dK.topRows(nk).noalias() += scale * (p.transpose() * Qb);
      }
    }
  }
}

}  // namespace tptune::kernels
