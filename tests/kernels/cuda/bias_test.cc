// [cuda] bias_add and bias_grad: the CUDA kernels against kernels/cpu/bias on random inputs.
#include "kernels/cuda/bias.h"

#include "kernels/cpu/bias.h"
#include "tests/kernels/compare.h"
#include "tests/kernels/cuda/device.h"

using namespace tptune;
using test::DeviceArray;

TEMPLATE_TEST_CASE("cuda bias_add and bias_grad match the CPU", "[cuda]", float, __nv_bfloat16) {
  TPTUNE_CUDA_TEST_OR_SKIP();
  using T = TestType;
  // 1,031 rows (tokens) of 777 features: ragged against the 256-thread blocks.
  const int64_t rows = 1031, n = 777;
  const auto x = test::rounded<T>(test::randn(size_t(rows * n), 11)), b = test::rounded<T>(test::randn(size_t(n), 12));
  DeviceArray<T> dx(x), db(b), dy(static_cast<size_t>(rows * n)), dgrad(static_cast<size_t>(n));
  for (int split : {1, 2}) {
    cuda::bias_add<T>(nullptr, rows, n, split, dx.get(), db.get(), dy.get());
    std::vector<float> y(static_cast<size_t>(rows * n));
    kernels::bias_add(x.data(), b.data(), rows, n, split, y.data());
    // Both compute x + b / split in double and round once (to T on the device).
    test::check_close("bias_add", dy.floats(), y, 0.0, std::is_same_v<T, float> ? 0.0 : 4e-3);
  }
  cuda::bias_grad<T>(nullptr, rows, n, dx.get(), dgrad.get());
  std::vector<float> g(static_cast<size_t>(n));
  kernels::bias_grad(x.data(), rows, n, g.data());
  // The same column sums in double in row order, rounded once.
  test::check_close("bias_grad", dgrad.floats(), g, 0.0, std::is_same_v<T, float> ? 0.0 : 4e-3);
}
