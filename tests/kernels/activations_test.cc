// SwiGLU / GELU: hand goldens, a double reference, backward against finite differences.
#include "kernels/cpu/activations.h"

#include <cmath>
#include <numbers>

#include "tests/kernels/compare.h"

using namespace tptune::kernels;
using tptune::test::check_close;

namespace {

double ref_silu(double a) { return a / (1.0 + std::exp(-a)); }
double ref_gelu(double a) {
  return 0.5 * a * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (a + 0.044715 * a * a * a)));
}

// Central difference of a scalar function, h = 1e-6: error ~1e-10 for these smooth O(1) functions.
double deriv(double (*f)(double), double a) { return (f(a + 1e-6) - f(a - 1e-6)) / 2e-6; }

}  // namespace

TEST_CASE("swiglu and gelu goldens") {
  // swiglu(1, 2) = 2 * silu(1) = 2 / (1 + e^-1) = 2 * 0.7310586 = 1.4621172; silu(0) = 0.
  // gelu(1) = 0.5 (1 + tanh(0.7978846 * 1.044715)) = 0.5 (1 + tanh(0.8335620)) = 0.5 * 1.6823840 = 0.8411920.
  // gelu(-2) = -1 (1 + tanh(0.7978846 * (-2.35772))) = -(1 - 0.9545977) = -0.0454023.
  const float a[] = {1, 0}, b[] = {2, 5};
  float y[2];
  swiglu(a, b, 2, y);
  CHECK(y[0] == Approx(1.4621172).epsilon(1e-6));
  CHECK(y[1] == 0.0f);
  const float g[] = {1, -2, 0};
  float gy[3];
  gelu(g, 3, gy);
  CHECK(gy[0] == Approx(0.8411920).epsilon(1e-6));
  CHECK(gy[1] == Approx(-0.0454023).epsilon(1e-5));
  CHECK(gy[2] == 0.0f);
}

TEST_CASE("swiglu forward and backward against double references") {
  const size_t n = 1000;
  auto a = tptune::test::randn(n, 31, 3.0);
  auto b = tptune::test::randn(n, 32);
  auto dy = tptune::test::randn(n, 33);
  a[0] = -100.0f;  // exp(100) is huge: silu must be -0-ish, not NaN
  a[1] = 60.0f;
  std::vector<float> y(n), da(n), db(n);
  swiglu(a.data(), b.data(), n, y.data());
  swiglu_bwd(a.data(), b.data(), dy.data(), n, da.data(), db.data());
  std::vector<double> ry(n), rda(n), rdb(n);
  for (size_t i = 0; i < n; ++i) {
    ry[i] = ref_silu(a[i]) * b[i];
    rdb[i] = dy[i] * ref_silu(a[i]);
    rda[i] = dy[i] * b[i] * deriv(ref_silu, a[i]);
  }
  // Forward: double math, one rounding (1e-7 relative); 1e-6 gives margin. Backward vs a finite difference
  // (~1e-9 absolute): 1e-6 absolute + relative.
  check_close("swiglu y", y, ry, 1e-6, 1e-6);
  check_close("swiglu db", db, rdb, 1e-6, 1e-6);
  check_close("swiglu da", da, rda, 1e-6, 1e-6);
}

TEST_CASE("gelu forward and backward against double references") {
  const size_t n = 1000;
  auto a = tptune::test::randn(n, 34, 3.0);
  auto dy = tptune::test::randn(n, 35);
  a[0] = -30.0f;
  a[1] = 30.0f;
  std::vector<float> y(n), da(n);
  gelu(a.data(), n, y.data());
  gelu_bwd(a.data(), dy.data(), n, da.data());
  std::vector<double> ry(n), rda(n);
  for (size_t i = 0; i < n; ++i) {
    ry[i] = ref_gelu(a[i]);
    rda[i] = dy[i] * deriv(ref_gelu, a[i]);
  }
  // Same reasoning as swiglu.
  check_close("gelu y", y, ry, 1e-6, 1e-6);
  check_close("gelu da", da, rda, 1e-6, 1e-6);
}
