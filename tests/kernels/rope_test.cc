// RoPE: hand-computed rotations, the adjacent-pair convention, sequence-shard offsets, and the backward as the
// transpose (adjoint) of the forward.
#include "kernels/cpu/rope.h"

#include <cmath>
#include <stdexcept>

#include "tests/kernels/compare.h"

using namespace tptune::kernels;
using tptune::test::check_close;

namespace {

// Double reference written from the definition: pair (x[2i], x[2i+1]) of head h at position offset + s times
// exp(i * angle) as a complex number.
std::vector<double> ref_rope(const std::vector<float>& x, int64_t batch, int64_t seq, int64_t heads, int64_t hd,
                             int64_t offset, double theta) {
  std::vector<double> y(x.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < hd / 2; ++i) {
          const int64_t j = ((b * seq + s) * heads + h) * hd + 2 * i;
          const double angle = double(offset + s) / std::pow(theta, double(2 * i) / double(hd));
          const double re = x[size_t(j)], im = x[size_t(j + 1)];
          y[size_t(j)] = re * std::cos(angle) - im * std::sin(angle);
          y[size_t(j + 1)] = re * std::sin(angle) + im * std::cos(angle);
        }
  return y;
}

}  // namespace

TEST_CASE("rope golden: head_dim 4, theta 10000, position 1") {
  // Pair 0 turns by 1 * 10000^(-0/4) = 1 rad, pair 1 by 1 * 10000^(-2/4) = 0.01 rad.
  // x = [1, 0 | 0, 1]: (1 + 0i) e^{i} = (cos 1, sin 1); (0 + 1i) e^{0.01i} = (-sin 0.01, cos 0.01).
  // This also pins the ADJACENT pairing: the "rotate half" convention pairs (x0, x2) and (x1, x3) and would give
  // y = [cos 1, -sin 0.01, sin 1, cos 0.01].
  const float x[] = {1, 0, 0, 1};
  float y[4];
  rope(x, 1, 1, 1, 4, /*offset=*/1, 10000.0, y);
  CHECK(y[0] == Approx(std::cos(1.0)).margin(1e-7));
  CHECK(y[1] == Approx(std::sin(1.0)).margin(1e-7));
  CHECK(y[2] == Approx(-std::sin(0.01)).margin(1e-7));
  CHECK(y[3] == Approx(std::cos(0.01)).margin(1e-7));
}

TEST_CASE("rope leaves position 0 unchanged and turns position 2 by 2 rad") {
  // Position 0: every angle is 0. Position 2 with head_dim 2 (one pair, inv_freq 1): (1, 0) -> (cos 2, sin 2).
  const float x[] = {0.5f, -1.5f, 1, 0, 1, 0};  // (batch 1, seq 3, 1 head of 2)
  float y[6];
  rope(x, 1, 3, 1, 2, 0, 500000.0, y);
  CHECK(y[0] == 0.5f);
  CHECK(y[1] == -1.5f);
  CHECK(y[4] == Approx(std::cos(2.0)).margin(1e-7));
  CHECK(y[5] == Approx(std::sin(2.0)).margin(1e-7));
}

TEST_CASE("rope matches a double reference (Llama 3 theta, shard offset)") {
  const int64_t batch = 2, seq = 5, heads = 3, hd = 8, offset = 7;
  const double theta = 500000.0;
  auto x = tptune::test::randn(size_t(batch * seq * heads * hd), 21);
  std::vector<float> y(x.size());
  rope(x.data(), batch, seq, heads, hd, offset, theta, y.data());
  // Double angles and rotation, one rounding to float: |error| <= 1 ulp of |x| ~ 1e-7 * |x|, |x| < 5.
  check_close("rope", y, ref_rope(x, batch, seq, heads, hd, offset, theta), 1e-6, 1e-6);
}

TEST_CASE("rope on sequence shards with offsets equals rope on the full sequence") {
  const int64_t batch = 1, seq = 8, heads = 2, hd = 6, tp = 4, local = seq / tp;
  auto x = tptune::test::randn(size_t(batch * seq * heads * hd), 22);
  std::vector<float> full(x.size());
  rope(x.data(), batch, seq, heads, hd, 0, 10000.0, full.data());
  const int64_t row = heads * hd;
  for (int64_t r = 0; r < tp; ++r) {
    std::vector<float> shard(x.begin() + r * local * row, x.begin() + (r + 1) * local * row), y(shard.size());
    rope(shard.data(), batch, local, heads, hd, /*offset=*/r * local, 10000.0, y.data());
    // Same positions, same arithmetic: bit-identical.
    CHECK(y == std::vector<float>(full.begin() + r * local * row, full.begin() + (r + 1) * local * row));
  }
}

TEST_CASE("rope_bwd is the transpose of rope and undoes it") {
  const int64_t batch = 2, seq = 4, heads = 2, hd = 4, offset = 3;
  auto x = tptune::test::randn(size_t(batch * seq * heads * hd), 23);
  auto dy = tptune::test::randn(x.size(), 24);
  std::vector<float> y(x.size()), dx(x.size()), back(x.size());
  rope(x.data(), batch, seq, heads, hd, offset, 500000.0, y.data());
  rope_bwd(dy.data(), batch, seq, heads, hd, offset, 500000.0, dx.data());
  // <rope(x), dy> = <x, rope_bwd(dy)>: the definition of the gradient of a linear map. Both sides are sums of 64
  // products of O(1) float values: agreement to 1e-5 relative.
  const double lhs = tptune::test::dot(tptune::test::to_double(y), tptune::test::to_double(dy));
  const double rhs = tptune::test::dot(tptune::test::to_double(x), tptune::test::to_double(dx));
  CHECK(lhs == Approx(rhs).epsilon(1e-5));
  // A rotation's transpose is its inverse: two float roundings, ~2 ulp.
  rope_bwd(y.data(), batch, seq, heads, hd, offset, 500000.0, back.data());
  check_close("rope_bwd(rope(x))", back, x, 1e-6, 1e-6);
}

TEST_CASE("rope works in place") {
  auto x = tptune::test::randn(2 * 3 * 8, 25);
  std::vector<float> y(x.size()), inplace = x;
  rope(x.data(), 2, 3, 2, 4, 1, 10000.0, y.data());
  rope(inplace.data(), 2, 3, 2, 4, 1, 10000.0, inplace.data());
  CHECK(inplace == y);
}

TEST_CASE("rope rejects an odd head_dim") {
  float x[3] = {}, y[3];
  CHECK_THROWS_AS(rope(x, 1, 1, 1, 3, 0, 10000.0, y), std::invalid_argument);
}
