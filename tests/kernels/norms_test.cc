// RMSNorm / LayerNorm: hand-computed goldens, a double reference forward, and backward against finite
// differences of that reference.
#include "kernels/cpu/norms.h"

#include <cmath>
#include <limits>

#include "tests/kernels/compare.h"

using namespace tptune::kernels;
using tptune::test::check_close;

namespace {

// Double references (rows, dim). rmsnorm: y = x / sqrt(mean(x^2) + eps) * w.
std::vector<double> ref_rmsnorm(const std::vector<double>& x, const std::vector<double>& w, int64_t rows, int64_t dim,
                                double eps) {
  std::vector<double> y(x.size());
  for (int64_t t = 0; t < rows; ++t) {
    double ss = 0;
    for (int64_t i = 0; i < dim; ++i) ss += x[t * dim + i] * x[t * dim + i];
    const double r = 1.0 / std::sqrt(ss / dim + eps);
    for (int64_t i = 0; i < dim; ++i) y[t * dim + i] = x[t * dim + i] * r * w[i];
  }
  return y;
}

// layernorm: y = (x - mean) / sqrt(var + eps) * w + b, var biased.
std::vector<double> ref_layernorm(const std::vector<double>& x, const std::vector<double>& w,
                                  const std::vector<double>& b, int64_t rows, int64_t dim, double eps) {
  std::vector<double> y(x.size());
  for (int64_t t = 0; t < rows; ++t) {
    double s = 0, ss = 0;
    for (int64_t i = 0; i < dim; ++i) s += x[t * dim + i];
    const double mu = s / dim;
    for (int64_t i = 0; i < dim; ++i) ss += (x[t * dim + i] - mu) * (x[t * dim + i] - mu);
    const double r = 1.0 / std::sqrt(ss / dim + eps);
    for (int64_t i = 0; i < dim; ++i) y[t * dim + i] = (x[t * dim + i] - mu) * r * w[i] + b[i];
  }
  return y;
}

// Slices of a concatenated parameter vector for finite differences.
std::vector<double> part(const std::vector<double>& v, size_t from, size_t n) {
  return {v.begin() + long(from), v.begin() + long(from + n)};
}

const float kNaN = std::numeric_limits<float>::quiet_NaN();

}  // namespace

TEST_CASE("rmsnorm golden: x = (3, 4), w = (1, 2), eps = 0") {
  // mean(x^2) = (9 + 16) / 2 = 12.5, rstd = 1/sqrt(12.5) = 0.2828427, y = [3 * 0.2828427, 4 * 0.2828427 * 2]
  //           = [0.8485281, 2.2627417].
  const float x[] = {3, 4}, w[] = {1, 2};
  float y[2], rstd[1];
  rmsnorm(x, w, 1, 2, 0.0f, y, rstd);
  CHECK(rstd[0] == Approx(0.2828427).epsilon(1e-6));
  CHECK(y[0] == Approx(0.8485281).epsilon(1e-6));
  CHECK(y[1] == Approx(2.2627417).epsilon(1e-6));
}

TEST_CASE("layernorm golden: x = (1, 3), w = (1, 1), b = (0.5, 0.5), eps = 0") {
  // mean 2, var ((1-2)^2 + (3-2)^2) / 2 = 1, rstd 1, xhat = [-1, 1], y = xhat + 0.5 = [-0.5, 1.5].
  const float x[] = {1, 3}, w[] = {1, 1}, b[] = {0.5f, 0.5f};
  float y[2], mean[1], rstd[1];
  layernorm(x, w, b, 1, 2, 0.0f, y, mean, rstd);
  CHECK(mean[0] == 2.0f);
  CHECK(rstd[0] == 1.0f);
  CHECK(y[0] == -0.5f);
  CHECK(y[1] == 1.5f);
}

TEST_CASE("rmsnorm forward matches a double reference") {
  const int64_t rows = 37, dim = 96;
  const float eps = 1e-5f;
  auto x = tptune::test::randn(rows * dim, 1, 3.0, 1.0);
  auto w = tptune::test::randn(dim, 2, 0.5, 1.0);
  std::vector<float> y(x.size()), rstd(rows);
  rmsnorm(x.data(), w.data(), rows, dim, eps, y.data(), rstd.data());
  // The kernel accumulates in double and rounds once to float: error ~ 1 ulp of |y| (6e-8 relative).
  // rtol 1e-6 allows ~16 ulp; atol 1e-6 covers values near 0.
  check_close("y", y, ref_rmsnorm(tptune::test::to_double(x), tptune::test::to_double(w), rows, dim, eps), 1e-6, 1e-6);
}

TEST_CASE("layernorm forward matches a double reference, also with a large mean") {
  const int64_t rows = 29, dim = 80;
  const float eps = 1e-5f;
  // Mean 100, std 0.5: a one-pass variance in float would lose ~4 digits here; the two-pass double one does not.
  auto x = tptune::test::randn(rows * dim, 3, 0.5, 100.0);
  auto w = tptune::test::randn(dim, 4, 0.5, 1.0);
  auto b = tptune::test::randn(dim, 5, 0.5);
  std::vector<float> y(x.size()), mean(rows), rstd(rows);
  layernorm(x.data(), w.data(), b.data(), rows, dim, eps, y.data(), mean.data(), rstd.data());
  // The float input is exact in double, so the only error is the final rounding: same tolerance as rmsnorm.
  check_close(
      "y", y,
      ref_layernorm(tptune::test::to_double(x), tptune::test::to_double(w), tptune::test::to_double(b), rows, dim, eps),
      1e-6, 1e-6);
}

TEST_CASE("rmsnorm backward matches finite differences of the double reference") {
  const int64_t rows = 6, dim = 24;
  const float eps = 1e-5f;
  auto x = tptune::test::randn(rows * dim, 6, 1.5);
  auto w = tptune::test::randn(dim, 7, 0.5, 1.0);
  auto dy = tptune::test::randn(rows * dim, 8);
  std::vector<float> y(x.size()), rstd(rows), dx(x.size()), dw(dim, kNaN);  // dw NaN: must be written, not added
  rmsnorm(x.data(), w.data(), rows, dim, eps, y.data(), rstd.data());
  rmsnorm_bwd(x.data(), w.data(), rstd.data(), dy.data(), rows, dim, dx.data(), dw.data());

  // L(x, w) = sum(dy * y(x, w)); its gradient is (dx, dw).
  const auto dyd = tptune::test::to_double(dy);
  const size_t nx = x.size();
  std::vector<double> params = tptune::test::to_double(x);
  params.insert(params.end(), w.begin(), w.end());
  auto grad = tptune::test::finite_diff(
      [&](const std::vector<double>& p) {
        return tptune::test::dot(dyd, ref_rmsnorm(part(p, 0, nx), part(p, nx, size_t(dim)), rows, dim, eps));
      },
      params);
  // Float kernel (double accumulation, one rounding) vs a finite difference accurate to ~1e-8: rtol/atol 1e-5
  // leave a wide margin over both and would still catch a missing term (O(0.1) errors).
  check_close("dx", dx, part(grad, 0, nx), 1e-5, 1e-5);
  check_close("dw", dw, part(grad, nx, size_t(dim)), 1e-5, 1e-5);
}

TEST_CASE("layernorm backward matches finite differences of the double reference") {
  const int64_t rows = 5, dim = 20;
  const float eps = 1e-5f;
  auto x = tptune::test::randn(rows * dim, 9, 2.0, 0.5);
  auto w = tptune::test::randn(dim, 10, 0.5, 1.0);
  auto b = tptune::test::randn(dim, 11, 0.5);
  auto dy = tptune::test::randn(rows * dim, 12);
  std::vector<float> y(x.size()), mean(rows), rstd(rows), dx(x.size()), dw(dim, kNaN), db(dim, kNaN);
  layernorm(x.data(), w.data(), b.data(), rows, dim, eps, y.data(), mean.data(), rstd.data());
  layernorm_bwd(x.data(), w.data(), mean.data(), rstd.data(), dy.data(), rows, dim, dx.data(), dw.data(), db.data());

  const auto dyd = tptune::test::to_double(dy);
  const size_t nx = x.size(), nd = size_t(dim);
  std::vector<double> params = tptune::test::to_double(x);
  params.insert(params.end(), w.begin(), w.end());
  params.insert(params.end(), b.begin(), b.end());
  auto grad = tptune::test::finite_diff(
      [&](const std::vector<double>& p) {
        return tptune::test::dot(dyd,
                                 ref_layernorm(part(p, 0, nx), part(p, nx, nd), part(p, nx + nd, nd), rows, dim, eps));
      },
      params);
  // Same reasoning as for rmsnorm.
  check_close("dx", dx, part(grad, 0, nx), 1e-5, 1e-5);
  check_close("dw", dw, part(grad, nx, nd), 1e-5, 1e-5);
  check_close("db", db, part(grad, nx + nd, nd), 1e-5, 1e-5);
}

TEST_CASE("fused norms of a compiled Program equal the eager ops they replace, bit for bit", "[compile]") {
  // add_rmsnorm = add, then rmsnorm of the sum; rmsnorm_bwd_add = rmsnorm_bwd, then the residual gradient's add.
  // The same fp32 and double operations in the same order: equality, not a tolerance.
  const int64_t rows = 5, dim = 12;
  std::vector<float> a(rows * dim), b(rows * dim), w(dim), dy(rows * dim), dres(rows * dim);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = std::sin(0.37f * float(i)) * 1.7f;
    b[i] = std::cos(0.11f * float(i) + 0.5f);
    dy[i] = std::sin(0.23f * float(i) + 1.0f) * 0.3f;
    dres[i] = std::cos(0.19f * float(i)) * 0.7f;
  }
  for (int64_t i = 0; i < dim; ++i) w[size_t(i)] = 0.5f + 0.05f * float(i);
  std::vector<float> h_eager(a.size()), y_eager(a.size()), rstd_eager(rows);
  for (size_t i = 0; i < a.size(); ++i) h_eager[i] = a[i] + b[i];
  rmsnorm(h_eager.data(), w.data(), rows, dim, 1e-5f, y_eager.data(), rstd_eager.data());
  std::vector<float> h(a.size()), y(a.size()), rstd(rows);
  add_rmsnorm(a.data(), b.data(), w.data(), rows, dim, 1e-5f, h.data(), y.data(), rstd.data());
  CHECK(h == h_eager);
  CHECK(y == y_eager);
  CHECK(rstd == rstd_eager);

  std::vector<float> dx_eager(a.size()), dw_eager(dim);
  rmsnorm_bwd(h.data(), w.data(), rstd.data(), dy.data(), rows, dim, dx_eager.data(), dw_eager.data());
  for (size_t i = 0; i < a.size(); ++i) dx_eager[i] = dres[i] + dx_eager[i];
  std::vector<float> dx(a.size()), dw(dim);
  rmsnorm_bwd_add(h.data(), w.data(), rstd.data(), dy.data(), dres.data(), rows, dim, dx.data(), dw.data());
  CHECK(dx == dx_eager);
  CHECK(dw == dw_eager);
}
