// [cuda] copy2d (strided) and convert between fp32, bf16 and float8 storages: exact copies, and conversions
// bit-identical to the CPU emulation (float8) and to cuda_bf16.h's __float2bfloat16_rn (bf16).
#include "kernels/cuda/copy.h"

#include <cstring>
#include <limits>

#include "kernels/cpu/float8.h"
#include "tests/kernels/compare.h"
#include "tests/kernels/cuda/device.h"

using namespace tptune;
using test::DeviceArray;

TEMPLATE_TEST_CASE("cuda copy2d copies a strided block", "[cuda]", float, __nv_bfloat16, __nv_fp8_e4m3, int32_t) {
  TPTUNE_CUDA_TEST_OR_SKIP();
  using T = TestType;
  // src (rows, 100) -> columns [10, 10 + 37) of dst (rows, 64) at dst column 5: a gather-like rearrangement.
  const int64_t rows = 33, src_ld = 100, dst_ld = 64, cols = 37;
  std::vector<T> src(size_t(rows * src_ld)), dst(size_t(rows * dst_ld));
  for (size_t i = 0; i < src.size(); ++i) std::memset(static_cast<void*>(&src[i]), int(i % 251), sizeof(T));
  DeviceArray<T> dsrc(src.size()), ddst(dst.size());
  test::cuda_ok(cudaMemcpy(dsrc.get(), src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice), "H2D");
  cuda::copy2d<T>(nullptr, ddst.get() + 5, dst_ld, dsrc.get() + 10, src_ld, rows, cols);
  const auto got = ddst.raw();
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < dst_ld; ++c) {
      const bool inside = c >= 5 && c < 5 + cols;
      T want;
      std::memset(static_cast<void*>(&want), 0, sizeof(T));
      if (inside) want = src[size_t(r * src_ld + 10 + c - 5)];
      if (std::memcmp(&got[size_t(r * dst_ld + c)], &want, sizeof(T)) != 0) ++bad;
    }
  CHECK(bad == 0);
}

TEST_CASE("cuda convert narrows and widens bit-exactly", "[cuda]") {
  TPTUNE_CUDA_TEST_OR_SKIP();
  // A sweep of float patterns (stride 65599 over 2^32: all exponents, both signs, NaN, inf, subnormals).
  std::vector<float> x;
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 65599) x.push_back(formulas::bits_float(uint32_t(u)));
  DeviceArray<float> dx(x);
  DeviceArray<__nv_bfloat16> dbf(x.size());
  DeviceArray<__nv_fp8_e4m3> d43(x.size());
  DeviceArray<__nv_fp8_e5m2> d52(x.size());
  cuda::convert<float, __nv_bfloat16>(nullptr, int64_t(x.size()), dx.get(), dbf.get());
  cuda::convert<float, __nv_fp8_e4m3>(nullptr, int64_t(x.size()), dx.get(), d43.get());
  cuda::convert<float, __nv_fp8_e5m2>(nullptr, int64_t(x.size()), dx.get(), d52.get());
  const auto bf = dbf.raw();
  const auto e43 = d43.raw();
  const auto e52 = d52.raw();
  int64_t bad_bf = 0, bad_43 = 0, bad_52 = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const uint16_t got = __nv_bfloat16_raw(bf[i]).x, want = __nv_bfloat16_raw(__float2bfloat16_rn(x[i])).x;
    // A NaN stays a NaN (NVIDIA's canonical NaN is 0x7FFF, ours keeps the sign: conversions_host_test.cc).
    if (std::isnan(x[i]) ? !std::isnan(formulas::bf16_bits_to_float(got)) : got != want) ++bad_bf;
    if (e43[i].__x != kernels::encode_e4m3(x[i])) ++bad_43;
    if (e52[i].__x != kernels::encode_e5m2(x[i])) ++bad_52;
  }
  CHECK(bad_bf == 0);
  CHECK(bad_43 == 0);
  CHECK(bad_52 == 0);
  // Widening back: exact values.
  DeviceArray<float> back(x.size());
  cuda::convert<__nv_fp8_e4m3, float>(nullptr, int64_t(x.size()), d43.get(), back.get());
  const auto w = back.floats();
  int64_t bad_w = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = kernels::round_to_e4m3(x[i]);
    if (!(w[i] == want || (std::isnan(w[i]) && std::isnan(want)))) ++bad_w;
  }
  CHECK(bad_w == 0);
  cuda::convert<__nv_bfloat16, float>(nullptr, int64_t(x.size()), dbf.get(), back.get());
  const auto wb = back.floats();
  for (size_t i = 0; i < x.size(); ++i)
    if (!std::isnan(x[i])) REQUIRE(formulas::float_bits(wb[i]) == uint32_t(__nv_bfloat16_raw(bf[i]).x) << 16);
}
