// [cuda] tensorwise float8 amax and cast against the CPU emulation kernels/cpu/float8, BIT-IDENTICAL: e4m3 and
// e5m2 storage, fp32 and bf16 inputs, with zeros, subnormals, values that saturate, infinities and NaN.
#include "kernels/cuda/float8.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/float8.h"
#include "tests/kernels/compare.h"
#include "tests/kernels/cuda/device.h"

using namespace tptune;
using test::DeviceArray;

namespace {

std::vector<float> inputs(size_t n) {
  auto x = test::randn(n, 1, 10.0);
  const float specials[] = {0.0f,    -0.0f,    1e-30f, -1e-12f, 448.0f,
                            -464.0f, 57344.0f, 1e6f,   -3e38f,  std::numeric_limits<float>::denorm_min()};
  for (size_t i = 0; i < std::size(specials); ++i) x[i * 7] = specials[i];
  return x;
}

template <class F8>
kernels::Float8Format format() {
  return std::is_same_v<F8, __nv_fp8_e4m3> ? kernels::Float8Format::e4m3 : kernels::Float8Format::e5m2;
}

template <class T, class F8>
void check_cast(const std::vector<float>& host, float amax_value) {
  const auto x = test::rounded<T>(host);  // what the T tensor holds; the CPU casts the same values
  DeviceArray<T> dx(x);
  DeviceArray<float> damax(std::vector<float>{amax_value}), dscale(1);
  DeviceArray<F8> dq(x.size());
  cuda::fp8_cast<T, F8>(nullptr, int64_t(x.size()), dx.get(), damax.get(), dq.get(), dscale.get());
  std::vector<float> q(x.size());
  const float scale = kernels::cast_to_float8(x.data(), int64_t(x.size()), amax_value, format<F8>(), q.data());
  const float got_scale = dscale.floats()[0];
  INFO("amax " << amax_value);
  // Bit-identical except NaN: any NaN scale is the same scale (the CPU's and the device's NaN payloads may differ;
  // the codes below are still compared bit for bit).
  if (std::isnan(scale))
    CHECK(std::isnan(got_scale));
  else
    CHECK(std::memcmp(&got_scale, &scale, sizeof scale) == 0);
  const auto codes = dq.raw();
  const float m = kernels::float8_multiplier(amax_value, format<F8>());
  int64_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const uint8_t want = kernels::encode_float8(x[i] * m, format<F8>());
    if (codes[i].__x != want) {
      if (bad < 5)
        UNSCOPED_INFO("[" << i << "] x " << x[i] << ": code " << int(codes[i].__x) << ", want " << int(want));
      ++bad;
    }
  }
  CHECK(bad == 0);
}

}  // namespace

TEMPLATE_TEST_CASE("cuda fp8 amax is exact", "[cuda]", float, __nv_bfloat16) {
  TPTUNE_CUDA_TEST_OR_SKIP();
  using T = TestType;
  auto x = test::rounded<T>(inputs(1 << 20));
  DeviceArray<float> damax(1);
  {
    DeviceArray<T> dx(x);
    cuda::fp8_amax<T>(nullptr, int64_t(x.size()), dx.get(), damax.get());
    CHECK(damax.floats()[0] == kernels::amax(x.data(), int64_t(x.size())));  // 3e38 (bf16: its rounding)
  }
  x[12345] = std::numeric_limits<float>::quiet_NaN();
  {
    DeviceArray<T> dx(x);
    cuda::fp8_amax<T>(nullptr, int64_t(x.size()), dx.get(), damax.get());
    CHECK(std::isnan(damax.floats()[0]));
  }
  cuda::fp8_amax<T>(nullptr, 0, static_cast<const T*>(nullptr), damax.get());
  CHECK(damax.floats()[0] == 0.0f);
}

TEMPLATE_TEST_CASE("cuda fp8 cast is bit-identical to the CPU emulation", "[cuda]", float, __nv_bfloat16) {
  TPTUNE_CUDA_TEST_OR_SKIP();
  using T = TestType;
  auto host = inputs(1 << 20);
  host[3] = std::numeric_limits<float>::infinity();
  host[5] = std::numeric_limits<float>::quiet_NaN();
  // amax of the finite data (so most values fill the format), 0 (the multiplier of torchao's 1e-12 floor: all but
  // the tiniest values saturate), a small amax (most values saturate) and a NaN amax (every code NaN).
  for (float amax_value : {40.0f, 0.0f, 1e-3f, std::numeric_limits<float>::quiet_NaN()}) {
    check_cast<T, __nv_fp8_e4m3>(host, amax_value);
    check_cast<T, __nv_fp8_e5m2>(host, amax_value);
  }
}

// Every length from 0 to 40 (the 16-element items, the tail after them, no item at all) and a view at an odd
// element offset (the unaligned path), each against the CPU.
TEMPLATE_TEST_CASE("cuda fp8 cast: lengths around its 16-element items and an unaligned view", "[cuda]", float,
                   __nv_bfloat16) {
  TPTUNE_CUDA_TEST_OR_SKIP();
  using T = TestType;
  const auto host = inputs(64);
  for (size_t n = 0; n <= 40; ++n)
    check_cast<T, __nv_fp8_e4m3>(std::vector<float>(host.begin(), host.begin() + n), 40.0f);
  const auto x = test::rounded<T>(host);
  DeviceArray<T> dx(x);
  DeviceArray<float> damax(std::vector<float>{40.0f}), dscale(1);
  DeviceArray<__nv_fp8_e4m3> dq(x.size());
  cuda::fp8_cast<T, __nv_fp8_e4m3>(nullptr, 37, dx.get() + 1, damax.get(), dq.get() + 3, dscale.get());
  const float m = kernels::float8_multiplier(40.0f, kernels::Float8Format::e4m3);
  const auto codes = dq.raw();
  int64_t bad = 0;
  for (size_t i = 0; i < 37; ++i)
    if (codes[i + 3].__x != kernels::encode_float8(x[i + 1] * m, kernels::Float8Format::e4m3)) ++bad;
  CHECK(bad == 0);
}
