// AdamW: a hand-computed first step and several steps against a double reference.
#include "kernels/cpu/adamw.h"

#include <cmath>
#include <stdexcept>

#include "tests/kernels/compare.h"

using namespace tptune::kernels;
using tptune::test::check_close;

TEST_CASE("adamw first step by hand") {
  // p = 1, g = 0.5, lr 0.1, wd 0.1, beta1 0.9, beta2 0.999, eps 1e-8, step 1:
  //   m = 0.1 * 0.5 = 0.05, v = 0.001 * 0.25 = 0.00025
  //   m_hat = 0.05 / (1 - 0.9) = 0.5, sqrt(v_hat) = sqrt(0.00025 / 0.001) = 0.5
  //   p = 1 * (1 - 0.1 * 0.1) - 0.1 * 0.5 / (0.5 + 1e-8) = 0.99 - 0.0999999980 = 0.8900000020
  float p = 1.0f, g = 0.5f, m = 0.0f, v = 0.0f;
  adamw(&p, &g, &m, &v, 1, {.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1}, 1);
  CHECK(m == Approx(0.05).epsilon(1e-7));
  CHECK(v == Approx(0.00025).epsilon(1e-7));
  CHECK(p == Approx(0.89).epsilon(1e-7));
}

TEST_CASE("adamw over five steps matches a double reference") {
  const size_t n = 500;
  const AdamWConfig c{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  auto p = tptune::test::randn(n, 141);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  std::vector<double> rp = tptune::test::to_double(p), rm(n, 0.0), rv(n, 0.0);
  for (int64_t step = 1; step <= 5; ++step) {
    const auto g = tptune::test::randn(n, 150 + uint32_t(step), 0.1);
    adamw(p.data(), g.data(), m.data(), v.data(), int64_t(n), c, step);
    for (size_t i = 0; i < n; ++i) {
      rp[i] *= 1.0 - c.lr * c.weight_decay;
      rm[i] = c.beta1 * rm[i] + (1 - c.beta1) * g[i];
      rv[i] = c.beta2 * rv[i] + (1 - c.beta2) * double(g[i]) * g[i];
      const double mhat = rm[i] / (1 - std::pow(c.beta1, double(step)));
      const double vhat = rv[i] / (1 - std::pow(c.beta2, double(step)));
      rp[i] -= c.lr * mhat / (std::sqrt(vhat) + c.eps);
    }
  }
  // The kernel rounds p, m, v to float once per step: after 5 steps ~5 ulp of |p| ~ 1 (6e-7). Updates are
  // ~lr = 1e-3 per step, so a wrong bias correction or decay shows up at >1e-5.
  check_close("p", p, rp, 1e-6, 1e-6);
  check_close("m", m, rm, 1e-9, 1e-6);
  check_close("v", v, rv, 1e-12, 1e-6);
}

TEST_CASE("adamw rejects step 0 (steps are 1-based)") {
  float p = 0, g = 0, m = 0, v = 0;
  CHECK_THROWS_AS(adamw(&p, &g, &m, &v, 1, {}, 0), std::invalid_argument);
}
