// kernels/formulas/float8.h (what the CUDA float8 kernels compute) against the CPU emulation of kernels/cpu/float8.h,
// bit for bit: all 256 codes of each format, every midpoint between neighbouring values and its float neighbours,
// a stride-1021 sweep over all 2^32 float patterns (4.2 million per format) (NaNs, infinities, float subnormals,
// saturation included), and the tensorwise scale and cast.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/float8.h"
#include "kernels/formulas/float8.h"

using namespace tptune;
using formulas::Fp8;

namespace {

kernels::Float8Format cpu_format(Fp8 f) {
  return f == Fp8::e4m3 ? kernels::Float8Format::e4m3 : kernels::Float8Format::e5m2;
}

// Same float bits, or both NaN (the CPU's NaN and ours are both 0x7FC00000 for values, but NaN-ness is the contract).
bool same_value(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return formulas::float_bits(a) == formulas::float_bits(b);
}

struct Mismatches {
  int64_t count = 0;
  void add(float x, int got, int want) {
    if (count < 5)
      UNSCOPED_INFO("x = " << x << " (bits 0x" << std::hex << formulas::float_bits(x) << "): got 0x" << got
                           << ", want 0x" << want);
    ++count;
  }
};

void check_encode(float x, Fp8 f, Mismatches& m) {
  const uint8_t got = formulas::fp8_encode(x, f), want = kernels::encode_float8(x, cpu_format(f));
  if (got != want) m.add(x, got, want);
  if (!same_value(formulas::fp8_round(x, f), kernels::round_to_float8(x, cpu_format(f)))) m.add(x, -1, -1);
}

}  // namespace

TEST_CASE("float8: every code decodes as the CPU emulation decodes it", "[cuda-math]") {
  for (Fp8 f : {Fp8::e4m3, Fp8::e5m2}) {
    for (int c = 0; c < 256; ++c) {
      INFO("format " << int(f) << ", code 0x" << std::hex << c);
      CHECK(same_value(formulas::fp8_decode(uint8_t(c), f), kernels::decode_float8(uint8_t(c), cpu_format(f))));
    }
  }
  CHECK(formulas::fp8_max(Fp8::e4m3) == 448.0f);
  CHECK(formulas::fp8_max(Fp8::e5m2) == 57344.0f);
}

TEST_CASE("float8: encoding equals the CPU emulation on codes, midpoints and their neighbours", "[cuda-math]") {
  for (Fp8 f : {Fp8::e4m3, Fp8::e5m2}) {
    Mismatches m;
    std::vector<float> values;  // finite non-negative values, ascending (codes 0x00..0x7F ascend in value)
    for (int c = 0; c < 0x80; ++c) {
      const float v = formulas::fp8_decode(uint8_t(c), f);
      if (std::isfinite(v)) values.push_back(v);
    }
    values.push_back(2.0f * values.back() - values[values.size() - 2]);  // the next grid point past max (saturates)
    for (size_t i = 0; i < values.size(); ++i) {
      const float mid = i + 1 < values.size() ? float((double(values[i]) + values[i + 1]) / 2) : values[i];
      for (float x : {values[i], mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY),
                      std::nextafter(values[i], 0.0f), std::nextafter(values[i], INFINITY)}) {
        check_encode(x, f, m);
        check_encode(-x, f, m);
      }
    }
    CHECK(m.count == 0);
  }
}

TEST_CASE("float8: encoding equals the CPU emulation over a sweep of all float patterns", "[cuda-math]") {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> special = {0.0f,
                                      -0.0f,
                                      inf,
                                      -inf,
                                      std::numeric_limits<float>::quiet_NaN(),
                                      -std::numeric_limits<float>::quiet_NaN(),
                                      formulas::bits_float(0x7F800001u),
                                      formulas::bits_float(0xFFBFFFFFu),
                                      std::numeric_limits<float>::max(),
                                      std::numeric_limits<float>::min(),
                                      std::numeric_limits<float>::denorm_min(),
                                      448.0f,
                                      464.0f,
                                      480.0f,
                                      57344.0f,
                                      61440.0f,
                                      65536.0f,
                                      std::ldexp(1.0f, -10),
                                      std::ldexp(1.0f, -17),
                                      std::ldexp(3.0f, -18)};
  for (Fp8 f : {Fp8::e4m3, Fp8::e5m2}) {
    Mismatches m;
    for (float x : special) check_encode(x, f, m);
    for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 1021) check_encode(formulas::bits_float(uint32_t(u)), f, m);
    CHECK(m.count == 0);
  }
}

TEST_CASE("float8: hand-checked codes", "[cuda-math]") {
  CHECK(formulas::fp8_encode(448.0f, Fp8::e4m3) == 0x7E);
  CHECK(formulas::fp8_encode(1e9f, Fp8::e4m3) == 0x7E);  // saturates
  CHECK(formulas::fp8_encode(-INFINITY, Fp8::e4m3) == 0xFE);
  CHECK(formulas::fp8_encode(-NAN, Fp8::e4m3) == 0xFF);  // NaN keeps its sign: S.1111.111
  CHECK(formulas::fp8_encode(NAN, Fp8::e5m2) == 0x7E);
  CHECK(formulas::fp8_encode(57344.0f, Fp8::e5m2) == 0x7B);
  CHECK(formulas::fp8_encode(-0.0f, Fp8::e5m2) == 0x80);
  // 2^-10 is half the smallest e4m3 subnormal 2^-9: a tie between 0 (even) and 0x01 -> 0.
  CHECK(formulas::fp8_encode(std::ldexp(1.0f, -10), Fp8::e4m3) == 0x00);
  // 3 * 2^-10 is halfway between 0x01 (odd) and 0x02 -> 0x02.
  CHECK(formulas::fp8_encode(3 * std::ldexp(1.0f, -10), Fp8::e4m3) == 0x02);
  // 1.0625 is halfway between 1.0 (0x38) and 1.125 (0x39) -> 0x38; 1.1875 between 0x39 and 0x3A -> 0x3A.
  CHECK(formulas::fp8_encode(1.0625f, Fp8::e4m3) == 0x38);
  CHECK(formulas::fp8_encode(1.1875f, Fp8::e4m3) == 0x3A);
  // 15/16 rounds up across the binade to 1.0 (0x38): the carry from mantissa 111 + 1 into the exponent.
  CHECK(formulas::fp8_encode(0.96875f, Fp8::e4m3) == 0x38);
}

TEST_CASE("float8: tensorwise scale and cast equal the CPU's", "[cuda-math]") {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(20000);
  for (auto& v : x) v = normal(gen);
  x[0] = 0.0f;
  x[1] = -0.0f;
  x[2] = 1e-30f;
  for (Fp8 f : {Fp8::e4m3, Fp8::e5m2}) {
    const kernels::Float8Format cf = cpu_format(f);
    for (float amax : {kernels::amax(x.data(), int64_t(x.size())), 0.0f, 1.0f, 3e-5f, 1e20f, NAN}) {
      const float m = formulas::fp8_multiplier(amax, f), scale = formulas::fp8_scale(amax, f);
      CHECK(same_value(m, kernels::float8_multiplier(amax, cf)));
      CHECK(same_value(scale, kernels::float8_scale(amax, cf)));
      std::vector<float> q(x.size());
      const float cpu_scale = kernels::cast_to_float8(x.data(), int64_t(x.size()), amax, cf, q.data());
      CHECK(same_value(cpu_scale, scale));
      int64_t bad = 0;
      for (size_t i = 0; i < x.size(); ++i)
        if (!same_value(formulas::fp8_decode(formulas::fp8_quantize(x[i], m, f), f), q[i])) ++bad;
      INFO("amax " << amax);
      CHECK(bad == 0);
    }
  }
}
