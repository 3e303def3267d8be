// Causal GQA attention: forward against an explicit double-precision softmax, backward against an independent
// double derivation (the softmax Jacobian, no D_i trick) and against finite differences; masking and GQA
// properties.
#include "kernels/cpu/attention.h"

#include <cmath>
#include <limits>
#include <stdexcept>

#include "tests/kernels/compare.h"

using namespace tptune::kernels;
using tptune::test::check_close;

namespace {

struct Ref {
  std::vector<double> o, lse;
};

// Index of element (b, s, head, d) in a (batch, seq, heads*head_dim) tensor.
size_t at(const AttentionDims& a, int64_t heads, int64_t b, int64_t s, int64_t h, int64_t d) {
  return size_t(((b * a.seq + s) * heads + h) * a.head_dim + d);
}

// Probabilities p_ij of query row i of head h: explicit softmax over the visible keys, in double.
std::vector<double> probs(const AttentionDims& a, const std::vector<double>& q, const std::vector<double>& k, int64_t b,
                          int64_t h, int64_t i, double* lse = nullptr) {
  const int64_t g = h / (a.n_heads / a.n_kv_heads), nk = a.causal ? i + 1 : a.seq;
  const double scale = 1.0 / std::sqrt(double(a.head_dim));
  std::vector<double> s(static_cast<size_t>(nk));
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < nk; ++j) {
    double dot = 0;
    for (int64_t d = 0; d < a.head_dim; ++d)
      dot += q[at(a, a.n_heads, b, i, h, d)] * k[at(a, a.n_kv_heads, b, j, g, d)];
    s[size_t(j)] = scale * dot;
    m = std::max(m, s[size_t(j)]);
  }
  double sum = 0;
  for (auto& x : s) sum += std::exp(x - m);
  for (auto& x : s) x = std::exp(x - m) / sum;
  if (lse) *lse = m + std::log(sum);
  return s;
}

Ref ref_forward(const AttentionDims& a, const std::vector<double>& q, const std::vector<double>& k,
                const std::vector<double>& v) {
  Ref r{std::vector<double>(q.size()), std::vector<double>(size_t(a.batch * a.n_heads * a.seq))};
  const int64_t group = a.n_heads / a.n_kv_heads;
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t h = 0; h < a.n_heads; ++h)
      for (int64_t i = 0; i < a.seq; ++i) {
        auto p = probs(a, q, k, b, h, i, &r.lse[size_t((b * a.n_heads + h) * a.seq + i)]);
        for (int64_t j = 0; j < int64_t(p.size()); ++j)
          for (int64_t d = 0; d < a.head_dim; ++d)
            r.o[at(a, a.n_heads, b, i, h, d)] += p[size_t(j)] * v[at(a, a.n_kv_heads, b, j, h / group, d)];
      }
  return r;
}

// Backward through the softmax Jacobian: ds_ij = p_ij (dp_ij - sum_k p_ik dp_ik).
void ref_backward(const AttentionDims& a, const std::vector<double>& q, const std::vector<double>& k,
                  const std::vector<double>& v, const std::vector<double>& dout, std::vector<double>& dq,
                  std::vector<double>& dk, std::vector<double>& dv) {
  dq.assign(q.size(), 0.0);
  dk.assign(k.size(), 0.0);
  dv.assign(v.size(), 0.0);
  const int64_t group = a.n_heads / a.n_kv_heads;
  const double scale = 1.0 / std::sqrt(double(a.head_dim));
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t h = 0; h < a.n_heads; ++h)
      for (int64_t i = 0; i < a.seq; ++i) {
        const int64_t g = h / group;
        auto p = probs(a, q, k, b, h, i);
        std::vector<double> dp(p.size());
        double pdp = 0;
        for (size_t j = 0; j < p.size(); ++j) {
          for (int64_t d = 0; d < a.head_dim; ++d)
            dp[j] += dout[at(a, a.n_heads, b, i, h, d)] * v[at(a, a.n_kv_heads, b, int64_t(j), g, d)];
          pdp += p[j] * dp[j];
        }
        for (size_t j = 0; j < p.size(); ++j) {
          const double ds = p[j] * (dp[j] - pdp);
          for (int64_t d = 0; d < a.head_dim; ++d) {
            dq[at(a, a.n_heads, b, i, h, d)] += scale * ds * k[at(a, a.n_kv_heads, b, int64_t(j), g, d)];
            dk[at(a, a.n_kv_heads, b, int64_t(j), g, d)] += scale * ds * q[at(a, a.n_heads, b, i, h, d)];
            dv[at(a, a.n_kv_heads, b, int64_t(j), g, d)] += p[j] * dout[at(a, a.n_heads, b, i, h, d)];
          }
        }
      }
}

struct Inputs {
  std::vector<float> q, k, v, dout;
};

Inputs make_inputs(const AttentionDims& a, uint32_t seed) {
  const size_t nq = size_t(a.batch * a.seq * a.n_heads * a.head_dim);
  const size_t nkv = size_t(a.batch * a.seq * a.n_kv_heads * a.head_dim);
  // q has std 2, k std 1: scores scale * q.k have std ~2, so softmax rows are peaked, not uniform.
  return {tptune::test::randn(nq, seed, 2.0), tptune::test::randn(nkv, seed + 1), tptune::test::randn(nkv, seed + 2),
          tptune::test::randn(nq, seed + 3)};
}

struct Outputs {
  std::vector<float> o, lse, dq, dk, dv;
};

Outputs run(const AttentionDims& a, const Inputs& in) {
  Outputs out{std::vector<float>(in.q.size()), std::vector<float>(size_t(a.batch * a.n_heads * a.seq)),
              std::vector<float>(in.q.size()), std::vector<float>(in.k.size(), std::nanf("")),
              std::vector<float>(in.v.size(), std::nanf(""))};  // dk, dv NaN: must be zeroed by the kernel
  attention(a, in.q.data(), in.k.data(), in.v.data(), out.o.data(), out.lse.data());
  attention_bwd(a, in.q.data(), in.k.data(), in.v.data(), out.o.data(), out.lse.data(), in.dout.data(), out.dq.data(),
                out.dk.data(), out.dv.data());
  return out;
}

void check_against_reference(const AttentionDims& a, uint32_t seed) {
  const Inputs in = make_inputs(a, seed);
  const Outputs out = run(a, in);
  const auto q = tptune::test::to_double(in.q), k = tptune::test::to_double(in.k), v = tptune::test::to_double(in.v);
  const Ref ref = ref_forward(a, q, k, v);
  // Float kernel vs double: scores are float dot products of head_dim terms (relative error ~head_dim * 6e-8 of
  // |q||k| ~ 1e-5 absolute on scores of size ~10), which moves p and o by about as much; o sums up to seq
  // float products. Observed worst errors are ~2e-6 (TPTUNE_SHOW_WORST=1); atol 2e-5 + rtol 1e-4 leaves a margin of
  // >10x while any masking or indexing error is O(0.1).
  check_close("o", out.o, ref.o, 2e-5, 1e-4);
  check_close("lse", out.lse, ref.lse, 2e-5, 1e-5);
  std::vector<double> dq, dk, dv;
  ref_backward(a, q, k, v, tptune::test::to_double(in.dout), dq, dk, dv);
  // Backward: the same float error sources, plus dk/dv summing seq * (n_heads / n_kv_heads) float terms.
  // Observed worst ~6e-6 (dk); 1e-4 + 1e-4 |ref| keeps a >10x margin.
  check_close("dq", out.dq, dq, 1e-4, 1e-4);
  check_close("dk", out.dk, dk, 1e-4, 1e-4);
  check_close("dv", out.dv, dv, 1e-4, 1e-4);
}

}  // namespace

TEST_CASE("attention: causal GQA at seq 256 matches double references") {
  check_against_reference({.batch = 2, .seq = 256, .n_heads = 8, .n_kv_heads = 2, .head_dim = 32}, 41);
}

TEST_CASE("attention: causal MHA with seq not a multiple of the block") {
  check_against_reference({.batch = 1, .seq = 100, .n_heads = 4, .n_kv_heads = 4, .head_dim = 16}, 51);
}

TEST_CASE("attention: non-causal, one kv head (MQA)") {
  check_against_reference({.batch = 2, .seq = 70, .n_heads = 3, .n_kv_heads = 1, .head_dim = 8, .causal = false}, 61);
}

TEST_CASE("attention backward matches finite differences of the double forward") {
  // seq 66 crosses the 64-row block boundary of the kernel.
  const AttentionDims a{.batch = 1, .seq = 66, .n_heads = 2, .n_kv_heads = 1, .head_dim = 4};
  const Inputs in = make_inputs(a, 71);
  const Outputs out = run(a, in);
  const auto q = tptune::test::to_double(in.q), k = tptune::test::to_double(in.k), v = tptune::test::to_double(in.v);
  const auto dout = tptune::test::to_double(in.dout);
  // L(q, k, v) = sum(dout * o); one finite difference per input tensor.
  auto loss = [&](const std::vector<double>& qq, const std::vector<double>& kk, const std::vector<double>& vv) {
    return tptune::test::dot(dout, ref_forward(a, qq, kk, vv).o);
  };
  const auto gq = tptune::test::finite_diff([&](const std::vector<double>& x) { return loss(x, k, v); }, q);
  const auto gk = tptune::test::finite_diff([&](const std::vector<double>& x) { return loss(q, x, v); }, k);
  const auto gv = tptune::test::finite_diff([&](const std::vector<double>& x) { return loss(q, k, x); }, v);
  // Finite differences are accurate to ~1e-8 here; the tolerance is the float kernel's, as above.
  check_close("dq vs finite differences", out.dq, gq, 1e-4, 1e-4);
  check_close("dk vs finite differences", out.dk, gk, 1e-4, 1e-4);
  check_close("dv vs finite differences", out.dv, gv, 1e-4, 1e-4);
}

TEST_CASE("attention is causal: later keys and values do not change earlier outputs") {
  const AttentionDims a{.batch = 1, .seq = 80, .n_heads = 2, .n_kv_heads = 2, .head_dim = 8};
  Inputs in = make_inputs(a, 81);
  const Outputs before = run(a, in);
  const int64_t cut = 50, row = a.n_kv_heads * a.head_dim;
  for (size_t i = size_t(cut * row); i < in.k.size(); ++i) {
    in.k[i] += 3.0f;
    in.v[i] -= 5.0f;
  }
  const Outputs after = run(a, in);
  const size_t keep = size_t(cut * a.n_heads * a.head_dim);
  // Rows < cut never see the changed keys; the arithmetic on them is identical (the kernel's blocks only shrink
  // the key range, never reorder it), so they are bit-identical.
  CHECK(std::vector<float>(before.o.begin(), before.o.begin() + long(keep)) ==
        std::vector<float>(after.o.begin(), after.o.begin() + long(keep)));
  CHECK(before.o != after.o);
}

TEST_CASE("attention: GQA equals MHA with the kv heads repeated") {
  const AttentionDims gqa{.batch = 1, .seq = 40, .n_heads = 4, .n_kv_heads = 2, .head_dim = 8};
  AttentionDims mha = gqa;
  mha.n_kv_heads = 4;
  const Inputs in = make_inputs(gqa, 91);
  // Query head h uses kv head h / 2: repeat each kv head twice, interleaved as [g0, g0, g1, g1].
  Inputs rep = in;
  rep.k.clear();
  rep.v.clear();
  for (int64_t s = 0; s < gqa.seq; ++s)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t d = 0; d < 8; ++d) {
        const size_t src = size_t((s * 2 + h / 2) * 8 + d);
        rep.k.push_back(in.k[src]);
        rep.v.push_back(in.v[src]);
      }
  const Outputs g = run(gqa, in), m = run(mha, rep);
  // Same math on the same values; only the memory strides differ, which may change float summation order.
  check_close("o", g.o, m.o, 1e-6, 1e-6);
  check_close("dq", g.dq, m.dq, 1e-6, 1e-6);
  // The GQA dk of kv head g is the sum of the MHA dk of heads 2g and 2g + 1.
  std::vector<float> summed(g.dk.size());
  for (int64_t s = 0; s < gqa.seq; ++s)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t d = 0; d < 8; ++d) summed[size_t((s * 2 + h / 2) * 8 + d)] += m.dk[size_t((s * 4 + h) * 8 + d)];
  check_close("dk", g.dk, summed, 1e-6, 1e-6);
}

TEST_CASE("attention rejects n_heads not a multiple of n_kv_heads") {
  const AttentionDims a{.batch = 1, .seq = 2, .n_heads = 3, .n_kv_heads = 2, .head_dim = 4};
  std::vector<float> q(24), kv(16), o(24), lse(6);
  CHECK_THROWS_AS(attention(a, q.data(), kv.data(), kv.data(), o.data(), lse.data()), std::invalid_argument);
}
