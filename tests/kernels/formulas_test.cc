// The per-element formulas the CUDA kernels share with the host (kernels/formulas/{activation,rope,adamw,
// cross_entropy,norm}.h), run here in the CPU reference's loop order and compared BIT FOR BIT with the reference:
// these tests prove the formulas were transcribed with the reference's operations and their order. The CPU kernels
// of activations, AdamW and RoPE call the formulas themselves, so they are compared with the math written out here
// (namespace reference, and in the RoPE case); cross-entropy and the norms with kernels/cpu. (On the device
// the reductions add in another order and the transcendentals come from CUDA's libm; the [cuda] tests bound that.)
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <numbers>
#include <random>
#include <utility>
#include <vector>

#include "kernels/cpu/activations.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/norms.h"
#include "kernels/cpu/rope.h"
#include "kernels/formulas/activation.h"
#include "kernels/formulas/adamw.h"
#include "kernels/formulas/cross_entropy.h"
#include "kernels/formulas/norm.h"
#include "kernels/formulas/rope.h"
#include "tests/kernels/compare.h"

using namespace tptune;

namespace {

// Bitwise equality of two float arrays (NaN == NaN only when the bits match); reports the first mismatches.
void check_bits(const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      if (bad < 5) UNSCOPED_INFO(what << "[" << i << "]: got " << got[i] << ", want " << want[i]);
      ++bad;
    }
  }
  INFO(what << ": " << bad << " of " << got.size() << " differ");
  CHECK(bad == 0);
}

// The math written out in the reference's operations and order, apart from kernels/formulas/ (which the CPU kernels
// call): what the formulas must reproduce bit for bit.
namespace reference {

constexpr double kGeluC = 0.044715;
const double kSqrt2OverPi = std::sqrt(2.0 / std::numbers::pi);

double sigmoid(double a) { return 1.0 / (1.0 + std::exp(-a)); }
double swiglu(double x, double b) { return x * sigmoid(x) * b; }
std::pair<double, double> swiglu_bwd(double x, double b, double g) {
  const double s = sigmoid(x);
  return {g * b * s * (1.0 + x * (1.0 - s)), g * x * s};
}
double gelu(double x) { return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + kGeluC * x * x * x))); }
double gelu_bwd(double x, double dy) {
  const double t = std::tanh(kSqrt2OverPi * (x + kGeluC * x * x * x));
  const double d = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * kGeluC * x * x);
  return dy * d;
}

void adamw(float* p, const float* g, float* m, float* v, int64_t n, const kernels::AdamWConfig& c, int64_t step) {
  const double bc1 = 1.0 - std::pow(c.beta1, double(step));
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(c.beta2, double(step)));
  const double step_size = c.lr / bc1;
  const double decay = 1.0 - c.lr * c.weight_decay;
  for (int64_t i = 0; i < n; ++i) {
    const double gi = g[i];
    const double mi = c.beta1 * m[i] + (1.0 - c.beta1) * gi;
    const double vi = c.beta2 * v[i] + (1.0 - c.beta2) * gi * gi;
    m[i] = float(mi);
    v[i] = float(vi);
    p[i] = float(double(p[i]) * decay - step_size * mi / (std::sqrt(vi) / bc2_sqrt + c.eps));
  }
}

}  // namespace reference

// Activation inputs: a fine grid over [-40, 40] (exp/tanh saturation on both sides), N(0, 3) samples, and
// specials (zeros, tiny, huge, infinities).
std::vector<float> activation_inputs() {
  std::vector<float> x;
  for (int i = -400000; i <= 400000; ++i) x.push_back(float(i) * 1e-4f);
  const auto r = test::randn(200000, 11, 3.0);
  x.insert(x.end(), r.begin(), r.end());
  for (float s :
       {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-3f, 80.0f, -80.0f, 700.0f, -700.0f, 1e30f, -1e30f, INFINITY, -INFINITY})
    x.push_back(s);
  return x;
}

}  // namespace

TEST_CASE("activation formulas in double (what the CPU kernels compute) equal the written-out math bit for bit",
          "[cuda-math]") {
  CHECK(formulas::kSqrt2OverPi == std::sqrt(2.0 / std::numbers::pi));
  const std::vector<float> a = activation_inputs();
  const size_t n = a.size();
  std::vector<float> b = test::randn(n, 12), dy = test::randn(n, 13);
  std::vector<float> want(n), want2(n), got(n), got2(n);

  kernels::swiglu(a.data(), b.data(), int64_t(n), got.data());
  for (size_t i = 0; i < n; ++i) want[i] = float(reference::swiglu(a[i], b[i]));
  check_bits("swiglu", got, want);

  kernels::swiglu_bwd(a.data(), b.data(), dy.data(), int64_t(n), got.data(), got2.data());
  for (size_t i = 0; i < n; ++i) {
    const auto [da, db] = reference::swiglu_bwd(a[i], b[i], dy[i]);
    want[i] = float(da);
    want2[i] = float(db);
  }
  check_bits("swiglu_bwd da", got, want);
  check_bits("swiglu_bwd db", got2, want2);

  kernels::gelu(a.data(), int64_t(n), got.data());
  for (size_t i = 0; i < n; ++i) want[i] = float(reference::gelu(a[i]));
  check_bits("gelu", got, want);

  kernels::gelu_bwd(a.data(), dy.data(), int64_t(n), got.data());
  for (size_t i = 0; i < n; ++i) want[i] = float(reference::gelu_bwd(a[i], dy[i]));
  check_bits("gelu_bwd", got, want);
}

TEST_CASE("activation formulas in float (the bf16 kernels' compute type) are within float rounding", "[cuda-math]") {
  // Inputs in [-12, 12] with b, dy ~ N(0, 1). Float exp/tanh are within ~2 ulp, each formula chains <= 8 roundings:
  // rtol 2e-6 (~16 float ulps). The absolute term covers the zero of 1 + a (1 - sigmoid(a)) near a = -1.28 and
  // the tails where the results underflow towards 0: 1e-6 is one bf16 ulp of 1e-4, far below what bf16 keeps.
  std::vector<float> a;
  for (int i = -120000; i <= 120000; ++i) a.push_back(float(i) * 1e-4f);
  const size_t n = a.size();
  const std::vector<float> b = test::randn(n, 21), dy = test::randn(n, 22);
  std::vector<float> got(n), got_db(n);
  std::vector<double> want(n), want_db(n);
  for (size_t i = 0; i < n; ++i) {
    got[i] = formulas::swiglu_fwd_elem<float>(a[i], b[i]);
    want[i] = formulas::swiglu_fwd_elem<double>(a[i], b[i]);
  }
  test::check_close("swiglu<float>", got, want, 1e-6, 2e-6);
  for (size_t i = 0; i < n; ++i) {
    const auto g = formulas::swiglu_bwd_elem<float>(a[i], b[i], dy[i]);
    const auto w = formulas::swiglu_bwd_elem<double>(a[i], b[i], dy[i]);
    got[i] = g.da, got_db[i] = g.db, want[i] = w.da, want_db[i] = w.db;
  }
  test::check_close("swiglu_bwd<float> da", got, want, 1e-6, 2e-6);
  test::check_close("swiglu_bwd<float> db", got_db, want_db, 1e-6, 2e-6);
  for (size_t i = 0; i < n; ++i) {
    got[i] = formulas::gelu_fwd_elem<float>(a[i]);
    want[i] = formulas::gelu_fwd_elem<double>(a[i]);
  }
  test::check_close("gelu<float>", got, want, 1e-6, 2e-6);
  for (size_t i = 0; i < n; ++i) {
    got[i] = formulas::gelu_bwd_elem<float>(a[i], dy[i]);
    want[i] = formulas::gelu_bwd_elem<double>(a[i], dy[i]);
  }
  // gelu' in float: for a < -5, tanh(u) rounds to -1 in float, so 1 + t and 1 - t^2 cancel to 0 while the true
  // derivative is ~1e-6: an absolute error of ulp(1) = 1.2e-7 times the factor 0.5 |a| k (1 + 3c a^2) <= 40 on
  // [-12, 12], i.e. <= 5e-6 |dy|; atol 2e-5 (|dy| <= ~4 here). PyTorch's bf16 gelu backward computes the same
  // float formula.
  test::check_close("gelu_bwd<float>", got, want, 2e-5, 2e-6);
}

TEST_CASE("rope formulas (what the CPU kernel computes) equal the written-out math bit for bit", "[cuda-math]") {
  // Llama 3 (theta 500000, head_dim 128) at a sequence-shard offset, and a small odd case (theta 10000, hd 6).
  struct Case {
    int64_t batch, seq, heads, hd, offset;
    double theta;
  };
  for (const Case c : {Case{2, 64, 3, 128, 8128, 500000.0}, Case{1, 7, 2, 6, 0, 10000.0}}) {
    const int64_t n = c.batch * c.seq * c.heads * c.hd, half = c.hd / 2;
    const std::vector<float> x = test::randn(size_t(n), 31);
    for (double sign : {1.0, -1.0}) {
      std::vector<float> got(static_cast<size_t>(n)), want(static_cast<size_t>(n));
      if (sign > 0)
        kernels::rope(x.data(), c.batch, c.seq, c.heads, c.hd, c.offset, c.theta, got.data());
      else
        kernels::rope_bwd(x.data(), c.batch, c.seq, c.heads, c.hd, c.offset, c.theta, got.data());
      for (int64_t t = 0; t < c.batch * c.seq; ++t) {
        for (int64_t i = 0; i < half; ++i) {
          // The written-out math: theta^(-2i/hd) at the global position, the pair rotated in double.
          const double inv_freq = std::pow(c.theta, -2.0 * double(i) / double(c.hd));
          const double a = double(c.offset + t % c.seq) * inv_freq;
          const double cs = std::cos(a), sn = sign * std::sin(a);
          for (int64_t h = 0; h < c.heads; ++h) {
            const int64_t j = (t * c.heads + h) * c.hd + 2 * i;
            const double x0 = x[size_t(j)], x1 = x[size_t(j + 1)];
            want[size_t(j)] = float(x0 * cs - x1 * sn);
            want[size_t(j + 1)] = float(x0 * sn + x1 * cs);
          }
        }
      }
      check_bits(sign > 0 ? "rope" : "rope_bwd", want, got);
    }
  }
}

TEST_CASE("adamw formula (what the CPU kernel computes) equals the written-out update bit for bit", "[cuda-math]") {
  const size_t n = 50000;
  kernels::AdamWConfig cfg;
  cfg.lr = 3e-4, cfg.beta1 = 0.9, cfg.beta2 = 0.95, cfg.eps = 1e-8, cfg.weight_decay = 0.1;
  for (int64_t step : {1, 2, 10, 1000}) {
    std::vector<float> p = test::randn(n, 41), g = test::randn(n, 42, 1e-2), m = test::randn(n, 43, 1e-3);
    std::vector<float> v = test::randn(n, 44, 1e-4);
    for (auto& x : v) x = std::fabs(x);
    if (step == 1) std::fill(m.begin(), m.end(), 0.0f), std::fill(v.begin(), v.end(), 0.0f);
    std::vector<float> p2 = p, m2 = m, v2 = v;
    kernels::adamw(p2.data(), g.data(), m2.data(), v2.data(), int64_t(n), cfg, step);  // the formula's update
    reference::adamw(p.data(), g.data(), m.data(), v.data(), int64_t(n), cfg, step);
    INFO("step " << step);
    check_bits("adamw p", p2, p);
    check_bits("adamw m", m2, m);
    check_bits("adamw v", v2, v);
  }
}

TEST_CASE("cross-entropy pieces equal the CPU reference stages bit for bit", "[cuda-math]") {
  // A vocab shard [1000, 1000 + 300) of tokens whose targets fall inside, before and after the shard.
  const int64_t tokens = 97, vocab = 300, offset = 1000;
  const std::vector<float> logits = test::randn(size_t(tokens * vocab), 51, 4.0);
  std::vector<int32_t> targets(static_cast<size_t>(tokens));
  std::mt19937 gen(52);
  for (auto& t : targets) t = int32_t(std::uniform_int_distribution<int>(900, 1400)(gen));
  std::vector<float> max(static_cast<size_t>(tokens)), sumexp(static_cast<size_t>(tokens)),
      tlogit(static_cast<size_t>(tokens));
  kernels::cross_entropy_row_max(logits.data(), tokens, vocab, max.data());
  kernels::cross_entropy_sum_exp(logits.data(), max.data(), tokens, vocab, sumexp.data());
  kernels::cross_entropy_target_logit(logits.data(), targets.data(), tokens, vocab, offset, tlogit.data());
  std::vector<float> got_sum(static_cast<size_t>(tokens)), got_t(static_cast<size_t>(tokens));
  double total = 0.0;
  for (int64_t t = 0; t < tokens; ++t) {
    double s = 0.0;
    for (int64_t j = 0; j < vocab; ++j)
      s += formulas::ce_exp_term<double>(logits[size_t(t * vocab + j)], max[size_t(t)]);
    got_sum[size_t(t)] = float(s);
    const int64_t col = formulas::ce_local_column(targets[size_t(t)], vocab, offset);
    got_t[size_t(t)] = col < 0 ? 0.0f : logits[size_t(t * vocab + col)];
    total += formulas::ce_token_loss(max[size_t(t)], sumexp[size_t(t)], tlogit[size_t(t)]);
  }
  check_bits("sumexp", got_sum, sumexp);
  check_bits("tlogit", got_t, tlogit);
  const float loss = kernels::cross_entropy_loss(max.data(), sumexp.data(), tlogit.data(), tokens, tokens);
  CHECK(float(total / double(tokens)) == loss);
  std::vector<float> want(logits.size()), got(logits.size());
  kernels::cross_entropy_bwd(logits.data(), max.data(), sumexp.data(), targets.data(), tokens, tokens, vocab, offset,
                             want.data());
  for (int64_t t = 0; t < tokens; ++t) {
    const double inv_sum = 1.0 / double(sumexp[size_t(t)]), inv_tokens = 1.0 / double(tokens);
    const int64_t col = formulas::ce_local_column(targets[size_t(t)], vocab, offset);
    for (int64_t j = 0; j < vocab; ++j)
      got[size_t(t * vocab + j)] = float(
          formulas::ce_grad<double>(logits[size_t(t * vocab + j)], max[size_t(t)], inv_sum, j == col, inv_tokens));
  }
  check_bits("d_logits", got, want);
}

TEST_CASE("cross-entropy pieces in float (the bf16 kernels' compute type) are within float rounding", "[cuda-math]") {
  // logit - max in [-40, 0] (exp down to 4e-18) and max up to 30: float subtraction (exact or half an ulp of the
  // difference) then expf (<= 2 ulp): relative error <= |logit - max| * 6e-8 + 2.4e-7 <= 2.7e-6 here; rtol 3e-6.
  // The gradient adds two float roundings (x inv_sum, x inv_tokens) and p - 1 (absolute, 1.2e-7): atol 2e-7 on the
  // unscaled gradient.
  std::vector<float> got, got_g;
  std::vector<double> want, want_g;
  const auto maxes = test::randn(400, 71, 10.0);
  for (size_t k = 0; k < maxes.size(); ++k) {
    for (int i = 0; i <= 400; ++i) {
      const float m = maxes[k], logit = m - float(i) * 0.1f;
      got.push_back(formulas::ce_exp_term<float>(logit, m));
      want.push_back(formulas::ce_exp_term<double>(logit, m));
      const bool target = i % 7 == 0;
      got_g.push_back(formulas::ce_grad<float>(logit, m, 0.5f, target, 1.0f));
      want_g.push_back(formulas::ce_grad<double>(logit, m, 0.5, target, 1.0));
    }
  }
  test::check_close("ce_exp_term<float>", got, want, 0.0, 3e-6);
  test::check_close("ce_grad<float>", got_g, want_g, 2e-7, 3e-6);
}

TEST_CASE("norm formulas equal the CPU reference bit for bit", "[cuda-math]") {
  const int64_t rows = 33, dim = 257;
  const float eps = 1e-5f;
  const std::vector<float> x = test::randn(size_t(rows * dim), 61, 2.0, 0.5), w = test::randn(size_t(dim), 62),
                           b = test::randn(size_t(dim), 63), dy = test::randn(size_t(rows * dim), 64);
  const size_t nd = size_t(rows * dim);
  // RMSNorm forward and backward.
  std::vector<float> y(nd), rstd(static_cast<size_t>(rows)), gy(nd), grstd(static_cast<size_t>(rows));
  kernels::rmsnorm(x.data(), w.data(), rows, dim, eps, y.data(), rstd.data());
  std::vector<float> dx(nd), dw(static_cast<size_t>(dim)), gdx(nd), gdw(static_cast<size_t>(dim));
  kernels::rmsnorm_bwd(x.data(), w.data(), rstd.data(), dy.data(), rows, dim, dx.data(), dw.data());
  std::vector<double> dw_acc(size_t(dim), 0.0);
  for (int64_t t = 0; t < rows; ++t) {
    double ss = 0.0;
    for (int64_t i = 0; i < dim; ++i) ss += double(x[size_t(t * dim + i)]) * x[size_t(t * dim + i)];
    const double r = formulas::norm_rstd(ss, dim, eps);
    grstd[size_t(t)] = float(r);
    for (int64_t i = 0; i < dim; ++i)
      gy[size_t(t * dim + i)] = float(formulas::rmsnorm_y(x[size_t(t * dim + i)], r, w[size_t(i)]));
    const double rb = rstd[size_t(t)];
    double dot = 0.0;
    for (int64_t i = 0; i < dim; ++i) {
      const size_t k = size_t(t * dim + i);
      dot += formulas::rmsnorm_dot_term(x[k], w[size_t(i)], dy[k], rb);
      dw_acc[size_t(i)] += formulas::rmsnorm_dw_term(x[k], dy[k], rb);
    }
    const double c = dot / double(dim);
    for (int64_t i = 0; i < dim; ++i) {
      const size_t k = size_t(t * dim + i);
      gdx[k] = float(formulas::rmsnorm_dx(x[k], w[size_t(i)], dy[k], rb, c));
    }
  }
  for (int64_t i = 0; i < dim; ++i) gdw[size_t(i)] = float(dw_acc[size_t(i)]);
  check_bits("rmsnorm y", gy, y);
  check_bits("rmsnorm rstd", grstd, rstd);
  check_bits("rmsnorm dx", gdx, dx);
  check_bits("rmsnorm dw", gdw, dw);

  // LayerNorm forward and backward.
  std::vector<float> mean(static_cast<size_t>(rows)), gmean(static_cast<size_t>(rows)), db(static_cast<size_t>(dim)),
      gdb(static_cast<size_t>(dim));
  kernels::layernorm(x.data(), w.data(), b.data(), rows, dim, eps, y.data(), mean.data(), rstd.data());
  kernels::layernorm_bwd(x.data(), w.data(), mean.data(), rstd.data(), dy.data(), rows, dim, dx.data(), dw.data(),
                         db.data());
  std::vector<double> db_acc(size_t(dim), 0.0);
  std::fill(dw_acc.begin(), dw_acc.end(), 0.0);
  for (int64_t t = 0; t < rows; ++t) {
    double s = 0.0;
    for (int64_t i = 0; i < dim; ++i) s += x[size_t(t * dim + i)];
    const double mu = s / double(dim);
    double ss = 0.0;
    for (int64_t i = 0; i < dim; ++i) ss += (x[size_t(t * dim + i)] - mu) * (x[size_t(t * dim + i)] - mu);
    const double r = formulas::norm_rstd(ss, dim, eps);
    gmean[size_t(t)] = float(mu);
    grstd[size_t(t)] = float(r);
    for (int64_t i = 0; i < dim; ++i)
      gy[size_t(t * dim + i)] = float(formulas::layernorm_y(x[size_t(t * dim + i)], mu, r, w[size_t(i)], b[size_t(i)]));
    const double mb = mean[size_t(t)], rb = rstd[size_t(t)];
    double sg = 0.0, sgx = 0.0;
    for (int64_t i = 0; i < dim; ++i) {
      const size_t k = size_t(t * dim + i);
      const double xhat = formulas::layernorm_xhat(x[k], mb, rb), g = double(dy[k]) * w[size_t(i)];
      sg += g;
      sgx += g * xhat;
      dw_acc[size_t(i)] += double(dy[k]) * xhat;
      db_acc[size_t(i)] += dy[k];
    }
    const double mg = sg / double(dim), mgx = sgx / double(dim);
    for (int64_t i = 0; i < dim; ++i) {
      const size_t k = size_t(t * dim + i);
      gdx[k] = float(formulas::layernorm_dx(w[size_t(i)], dy[k], formulas::layernorm_xhat(x[k], mb, rb), rb, mg, mgx));
    }
  }
  for (int64_t i = 0; i < dim; ++i)
    gdw[size_t(i)] = float(dw_acc[size_t(i)]), gdb[size_t(i)] = float(db_acc[size_t(i)]);
  check_bits("layernorm y", gy, y);
  check_bits("layernorm mean", gmean, mean);
  check_bits("layernorm rstd", grstd, rstd);
  check_bits("layernorm dx", gdx, dx);
  check_bits("layernorm dw", gdw, dw);
  check_bits("layernorm db", gdb, db);
}
