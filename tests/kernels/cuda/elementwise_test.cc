// [cuda] add, accumulate, fill, SwiGLU, GELU: the CUDA kernels against kernels/cpu/activations on random inputs.
#include "kernels/cuda/elementwise.h"

#include "kernels/cpu/activations.h"
#include "tests/kernels/compare.h"
#include "tests/kernels/cuda/device.h"

using namespace tptune;
using test::DeviceArray;
using test::Tol;

namespace {
// An odd size larger than one grid pass of 65536 x 256 would be too slow for a test; 1,000,003 covers many
// blocks and a ragged tail.
constexpr size_t kN = 1000003;
}  // namespace

TEMPLATE_TEST_CASE("cuda add, accumulate and fill match the CPU", "[cuda]", float, __nv_bfloat16) {
  TPTUNE_CUDA_TEST_OR_SKIP();
  using T = TestType;
  const auto a = test::rounded<T>(test::randn(kN, 1)), b = test::rounded<T>(test::randn(kN, 2));
  DeviceArray<T> da(a), db(b), dy(kN);
  cuda::add<T>(nullptr, int64_t(kN), da.get(), db.get(), dy.get());
  std::vector<double> want(kN);
  for (size_t i = 0; i < kN; ++i) want[i] = double(float(a[i] + b[i]));
  // One rounding of a float sum to T: exact for float, half a bf16 ulp for bf16.
  test::check_close("add", dy.floats(), want, 0.0, std::is_same_v<T, float> ? 0.0 : 4e-3);
  cuda::accumulate<T>(nullptr, int64_t(kN), da.get(), dy.get());  // y = (a + b) + a
  const auto y = dy.floats();
  for (size_t i = 0; i < kN; ++i) want[i] = double(float(test::rounded<T>({float(want[i])})[0] + a[i]));
  test::check_close("accumulate", y, want, 0.0, std::is_same_v<T, float> ? 0.0 : 4e-3);
  cuda::fill<T>(nullptr, dy.get(), int64_t(kN), 0.1f);
  const float tenth = test::rounded<T>({0.1f})[0];
  test::check_close("fill", dy.floats(), std::vector<double>(kN, tenth), 0.0, 0.0);
}

TEMPLATE_TEST_CASE("cuda swiglu forward and backward match the CPU", "[cuda]", float, __nv_bfloat16) {
  TPTUNE_CUDA_TEST_OR_SKIP();
  using T = TestType;
  const auto a = test::rounded<T>(test::randn(kN, 3, 3.0)), b = test::rounded<T>(test::randn(kN, 4));
  const auto g = test::rounded<T>(test::randn(kN, 5));
  DeviceArray<T> da(a), db(b), dg(g), dy(kN), dda(kN), ddb(kN);
  cuda::swiglu_fwd<T>(nullptr, int64_t(kN), da.get(), db.get(), dy.get());
  cuda::swiglu_bwd<T>(nullptr, int64_t(kN), da.get(), db.get(), dg.get(), dda.get(), ddb.get());
  std::vector<float> y(kN), ga(kN), gb(kN);
  kernels::swiglu(a.data(), b.data(), int64_t(kN), y.data());
  kernels::swiglu_bwd(a.data(), b.data(), g.data(), int64_t(kN), ga.data(), gb.data());
  test::check_close("swiglu", dy.floats(), y, Tol<T>::atol, Tol<T>::rtol);
  test::check_close("swiglu_bwd da", dda.floats(), ga, Tol<T>::atol, Tol<T>::rtol);
  test::check_close("swiglu_bwd db", ddb.floats(), gb, Tol<T>::atol, Tol<T>::rtol);
  // In place (outputs aliasing inputs), as the Backend allows.
  cuda::swiglu_bwd<T>(nullptr, int64_t(kN), da.get(), db.get(), dg.get(), da.get(), db.get());
  test::check_close("swiglu_bwd in place da", da.floats(), ga, Tol<T>::atol, Tol<T>::rtol);
  test::check_close("swiglu_bwd in place db", db.floats(), gb, Tol<T>::atol, Tol<T>::rtol);
}

TEMPLATE_TEST_CASE("cuda gelu forward and backward match the CPU", "[cuda]", float, __nv_bfloat16) {
  TPTUNE_CUDA_TEST_OR_SKIP();
  using T = TestType;
  const auto a = test::rounded<T>(test::randn(kN, 6, 3.0)), g = test::rounded<T>(test::randn(kN, 7));
  DeviceArray<T> da(a), dg(g), dy(kN), dda(kN);
  cuda::gelu_fwd<T>(nullptr, int64_t(kN), da.get(), dy.get());
  cuda::gelu_bwd<T>(nullptr, int64_t(kN), da.get(), dg.get(), dda.get());
  std::vector<float> y(kN), ga(kN);
  kernels::gelu(a.data(), int64_t(kN), y.data());
  kernels::gelu_bwd(a.data(), g.data(), int64_t(kN), ga.data());
  test::check_close("gelu", dy.floats(), y, Tol<T>::atol, Tol<T>::rtol);
  test::check_close("gelu_bwd", dda.floats(), ga, Tol<T>::atol, Tol<T>::rtol);
}

// A view at an odd element offset cannot take 16-byte packs: the kernels fall back to one element per access and
// compute the same values.
TEMPLATE_TEST_CASE("cuda add and swiglu on unaligned views match the aligned result", "[cuda]", float, __nv_bfloat16) {
  TPTUNE_CUDA_TEST_OR_SKIP();
  using T = TestType;
  const size_t n = 4099;
  const auto a = test::rounded<T>(test::randn(n + 1, 8)), b = test::rounded<T>(test::randn(n + 1, 9));
  DeviceArray<T> da(a), db(b), dy(n + 1), dz(n + 1);
  cuda::add<T>(nullptr, int64_t(n), da.get() + 1, db.get() + 1, dy.get() + 1);  // the element path
  cuda::add<T>(nullptr, int64_t(n + 1), da.get(), db.get(), dz.get());          // the packed path
  auto y = dy.floats(), z = dz.floats();
  for (size_t i = 1; i <= n; ++i) REQUIRE(y[i] == z[i]);
  cuda::swiglu_fwd<T>(nullptr, int64_t(n), da.get() + 1, db.get() + 1, dy.get() + 1);
  cuda::swiglu_fwd<T>(nullptr, int64_t(n + 1), da.get(), db.get(), dz.get());
  y = dy.floats();
  z = dz.floats();
  for (size_t i = 1; i <= n; ++i) REQUIRE(y[i] == z[i]);
}
