// The Linear bias kernels (kernels/cpu/bias.h): bias_add broadcasts over rows and divides by split, bias_grad is the
// column sum; hand-computed values.
#include "kernels/cpu/bias.h"

#include <catch2/catch.hpp>
#include <vector>

using namespace tptune;

TEST_CASE("bias: bias_add broadcasts the bias over the rows, divided by split", "[bias]") {
  // x (2, 3), b (3).
  const std::vector<float> x = {1, 2, 3, 4, 5, 6}, b = {10, 20, 30};
  std::vector<float> y(6);
  kernels::bias_add(x.data(), b.data(), 2, 3, 1, y.data());
  CHECK(y == std::vector<float>{11, 22, 33, 14, 25, 36});
  // split 2 (a Partial output at tp 2): each rank adds half; two ranks' partial sums then hold b once.
  kernels::bias_add(x.data(), b.data(), 2, 3, 2, y.data());
  CHECK(y == std::vector<float>{6, 12, 18, 9, 15, 21});
  // In place (y aliasing x).
  std::vector<float> z = x;
  kernels::bias_add(z.data(), b.data(), 2, 3, 1, z.data());
  CHECK(z == std::vector<float>{11, 22, 33, 14, 25, 36});
  CHECK_THROWS(kernels::bias_add(x.data(), b.data(), 2, 3, 0, y.data()));
}

TEST_CASE("bias: bias_grad sums dy over the rows", "[bias]") {
  // dy (3, 2): columns 1 + 3 + 5 = 9 and 2 + 4 + 6 = 12.
  const std::vector<float> dy = {1, 2, 3, 4, 5, 6};
  std::vector<float> db(2, -1.0f);
  kernels::bias_grad(dy.data(), 3, 2, db.data());
  CHECK(db == std::vector<float>{9, 12});
  // No rows: a zero gradient (written, not left as it was).
  kernels::bias_grad(dy.data(), 0, 2, db.data());
  CHECK(db == std::vector<float>{0, 0});
}
