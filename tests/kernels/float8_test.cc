// Emulated float8: hand-computed bit patterns, RNE ties, saturation, an exhaustive round trip over all 256
// patterns, a brute-force nearest-value check, and the tensorwise cast.
#include "kernels/cpu/float8.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "tests/kernels/compare.h"

using namespace tptune::kernels;

namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// All finite non-negative values of a format with their codes, ascending (codes 0x00.. are ascending in value).
std::vector<std::pair<float, uint8_t>> positives(Float8Format f) {
  std::vector<std::pair<float, uint8_t>> v;
  for (int c = 0; c < 0x80; ++c) {
    const float x = decode_float8(uint8_t(c), f);
    if (std::isfinite(x)) v.emplace_back(x, uint8_t(c));
  }
  return v;
}

// Brute force: the representable value nearest to x >= 0 (ties to the even code, i.e. even mantissa), saturating.
float nearest(float x, const std::vector<std::pair<float, uint8_t>>& table) {
  if (x >= table.back().first) return table.back().first;
  float best = 0;
  double best_d = INFINITY;
  int best_code = 0;
  for (const auto& [v, c] : table) {
    const double d = std::fabs(double(x) - v);
    if (d < best_d || (d == best_d && c % 2 == 0 && best_code % 2 == 1)) {
      best = v;
      best_d = d;
      best_code = c;
    }
  }
  return best;
}

}  // namespace

TEST_CASE("e4m3 bit patterns (sign.eeee.mmm, bias 7)") {
  CHECK(encode_e4m3(1.0f) == 0x38);              // 1.0 * 2^0: e = 0 + 7 = 0111, m = 000 -> 0.0111.000
  CHECK(encode_e4m3(448.0f) == 0x7E);            // 1.75 * 2^8: e = 15 = 1111, m = 110 -> 0.1111.110 (max)
  CHECK(encode_e4m3(0.001953125f) == 0x01);      // 2^-9 = 1 * 2^(1-7-3): subnormal, m = 001
  CHECK(encode_e4m3(7 * 0.001953125f) == 0x07);  // 7 * 2^-9, the largest subnormal
  CHECK(encode_e4m3(0.015625f) == 0x08);         // 2^-6, the smallest normal: e = 1, m = 000
  CHECK(encode_e4m3(3.0f) == 0x44);              // 1.5 * 2^1: e = 8 = 1000, m = 100 -> 0.1000.100
  CHECK(encode_e4m3(-2.0f) == 0xC0);             // -1.0 * 2^1: 1.1000.000
  CHECK(encode_e4m3(0.0f) == 0x00);
  CHECK(encode_e4m3(-0.0f) == 0x80);
  CHECK(decode_e4m3(0x7E) == 448.0f);
  CHECK(decode_e4m3(0xFE) == -448.0f);
  CHECK(std::isnan(decode_e4m3(0x7F)));  // S.1111.111 is the only NaN; no infinities
  CHECK(std::isnan(decode_e4m3(0xFF)));
  CHECK(decode_e4m3(0x78) == 256.0f);  // 0.1111.000 = 2^(15-7) is finite in e4m3fn
}

TEST_CASE("e4m3 rounds to nearest, ties to even, and saturates") {
  // Between 1.0 (m 000) and 1.125 (m 001) the tie 1.0625 goes to the even mantissa 000.
  CHECK(round_to_e4m3(1.0625f) == 1.0f);
  CHECK(round_to_e4m3(std::nextafter(1.0625f, 2.0f)) == 1.125f);
  // Between 1.125 (001) and 1.25 (010) the tie 1.1875 goes to 010.
  CHECK(round_to_e4m3(1.1875f) == 1.25f);
  CHECK(encode_e4m3(1.1875f) == 0x3A);
  // Subnormal ties: 2^-10 is halfway between 0 and 2^-9 -> 0 (even); 3 * 2^-10 between 1 and 2 (x 2^-9) -> 2.
  CHECK(round_to_e4m3(std::ldexp(1.0f, -10)) == 0.0f);
  CHECK(encode_e4m3(3 * std::ldexp(1.0f, -10)) == 0x02);
  // Rounding across a binade: 1.9375 = 1 + 15/16 is halfway between 1.875 (m 111) and 2.0 -> 2.0 (m 000).
  CHECK(round_to_e4m3(1.9375f) == 2.0f);
  // Saturation: 1000 -> 448 (0x7E); 464 is halfway to the (NaN) next step 480 but still saturates; inf too.
  CHECK(round_to_e4m3(1000.0f) == 448.0f);
  CHECK(encode_e4m3(1000.0f) == 0x7E);
  CHECK(round_to_e4m3(464.0f) == 448.0f);
  CHECK(round_to_e4m3(kInf) == 448.0f);
  CHECK(round_to_e4m3(-kInf) == -448.0f);
  CHECK(encode_e4m3(-1000.0f) == 0xFE);
  // 440 is halfway between 416 (1.625 * 2^8, m 101) and 448 (m 110) -> 448 (even).
  CHECK(round_to_e4m3(440.0f) == 448.0f);
  CHECK(std::isnan(round_to_e4m3(kNaN)));
  CHECK(encode_e4m3(kNaN) == 0x7F);
}

TEST_CASE("e5m2 bit patterns (sign.eeeee.mm, bias 15), ties and saturation") {
  CHECK(encode_e5m2(1.0f) == 0x3C);                   // e = 15 = 01111, m = 00 -> 0.01111.00
  CHECK(encode_e5m2(57344.0f) == 0x7B);               // 1.75 * 2^15: e = 30 = 11110, m = 11 (max)
  CHECK(encode_e5m2(std::ldexp(1.0f, -16)) == 0x01);  // 2^-16 = 1 * 2^(1-15-2), smallest subnormal
  CHECK(encode_e5m2(std::ldexp(1.0f, -14)) == 0x04);  // smallest normal: e = 1, m = 00
  CHECK(encode_e5m2(3.0f) == 0x42);                   // 1.5 * 2^1: e = 16 = 10000, m = 10
  CHECK(encode_e5m2(-0.5f) == 0xB8);                  // -1.0 * 2^-1: 1.01110.00
  CHECK(decode_e5m2(0x7C) == kInf);                   // S.11111.00 is infinity ...
  CHECK(decode_e5m2(0xFC) == -kInf);
  CHECK(std::isnan(decode_e5m2(0x7D)));         // ... S.11111.{01,10,11} NaN
  CHECK(round_to_e5m2(1.125f) == 1.0f);         // tie between 1.0 (m 00) and 1.25 (m 01) -> 00
  CHECK(encode_e5m2(1.375f) == 0x3E);           // tie between 1.25 (01) and 1.5 (10) -> 10
  CHECK(round_to_e5m2(100000.0f) == 57344.0f);  // saturates (the format has inf; the cast does not)
  CHECK(round_to_e5m2(kInf) == 57344.0f);
  CHECK(round_to_e5m2(-1e30f) == -57344.0f);
  CHECK(std::isnan(round_to_e5m2(kNaN)));
}

TEST_CASE("every finite float8 pattern round-trips, and values round to the brute-force nearest") {
  for (auto f : {Float8Format::e4m3, Float8Format::e5m2}) {
    INFO((f == Float8Format::e4m3 ? "e4m3" : "e5m2"));
    size_t finite = 0;
    for (int c = 0; c < 256; ++c) {
      const float x = decode_float8(uint8_t(c), f);
      if (!std::isfinite(x)) continue;
      ++finite;
      INFO("code " << c << " value " << x);
      CHECK(encode_float8(x, f) == c);
      CHECK(round_to_float8(x, f) == x);
    }
    // e4m3: 256 - 2 NaNs = 254; e5m2: 256 - 2 inf - 6 NaN = 248.
    CHECK(finite == (f == Float8Format::e4m3 ? 254u : 248u));

    const auto table = positives(f);
    CHECK(table.back().first == float8_max(f));
    // Every midpoint between neighbours goes to the even code; points just off it go to the nearer one.
    for (size_t i = 0; i + 1 < table.size(); ++i) {
      const float lo = table[i].first, hi = table[i + 1].first, mid = (lo + hi) / 2;  // exact in float
      const float even = table[i].second % 2 == 0 ? lo : hi;
      INFO("between " << lo << " and " << hi);
      CHECK(round_to_float8(mid, f) == even);
      CHECK(round_to_float8(std::nextafter(mid, 0.0f), f) == lo);
      CHECK(round_to_float8(std::nextafter(mid, kInf), f) == hi);
      CHECK(round_to_float8(-mid, f) == -even);
    }
    // Random values across the whole range (log-uniform magnitudes) against the brute-force search.
    std::mt19937 gen(7);
    std::uniform_real_distribution<float> log2_mag(-20.0f, 17.0f);
    size_t bad = 0;
    for (int i = 0; i < 20000; ++i) {
      const float x = std::exp2(log2_mag(gen));
      if (round_to_float8(x, f) != nearest(x, table) && bad++ < 3) FAIL_CHECK("x = " << x);
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("amax and the tensorwise cast") {
  const std::vector<float> x = {1, -2, 4, 0.5f, -0.0f};
  CHECK(amax(x.data(), int64_t(x.size())) == 4.0f);
  CHECK(amax(x.data(), 0) == 0.0f);
  const std::vector<float> with_nan = {1, kNaN, 2};
  CHECK(std::isnan(amax(with_nan.data(), 3)));

  // multiplier m = 448 / 4 = 112 (exact in double and float); q = x * 112 = [112, -224, 448, 56, -0]: 112 = 1.75 * 2^6,
  // 224 = 1.75 * 2^7, 448 = 1.75 * 2^8, 56 = 1.75 * 2^5 are all e4m3 values; scale = 1 / 112 rounded to float.
  std::vector<float> q(x.size());
  const float scale = cast_to_float8(x.data(), int64_t(x.size()), 4.0f, Float8Format::e4m3, q.data());
  CHECK(float8_multiplier(4.0f, Float8Format::e4m3) == 112.0f);
  CHECK(scale == 1.0f / 112.0f);
  CHECK(q == std::vector<float>{112, -224, 448, 56, 0});

  // amax == 0: torchao clamps the amax to 1e-12, so m = float(57344 / 1e-12) = float(5.7344e16) (no division by
  // zero), scale = 1 / that, and q = 0 * m = 0.
  const std::vector<float> zeros(3, 0.0f);
  std::vector<float> qz(3, -1.0f);
  CHECK(float8_multiplier(0.0f, Float8Format::e5m2) == float(57344.0 / 1e-12));
  CHECK(cast_to_float8(zeros.data(), 3, 0.0f, Float8Format::e5m2, qz.data()) == 1.0f / float(57344.0 / 1e-12));
  CHECK(qz == std::vector<float>(3, 0.0f));
  // A NaN amax gives a NaN multiplier (torch.clamp keeps NaN), an infinite one a multiplier of 0.
  CHECK(std::isnan(float8_multiplier(kNaN, Float8Format::e4m3)));
  CHECK(float8_multiplier(std::numeric_limits<float>::infinity(), Float8Format::e4m3) == 0.0f);
}

// The case where dividing by amax / 448 and multiplying by 448 / amax part ways, found by a search over 10 M
// uniform values under 40 random amaxes (2 codes differed), and what torchao 0.18 computes for it:
// `hp_tensor_and_scale_to_float8(x, tensor_to_scale(x, torch.float8_e4m3fn), torch.float8_e4m3fn)` gives code 0x63
// and the scale tensor 0x42e92ed0, whose reciprocal is 0x3c0c8660.
//   amax = 0x4075eb29 (3.842478), m = float(448 / 3.842478...) = 0x42e92ed0 (116.59143);
//   x = 0x3eb8705f (0.36023232): x * m = 42.0000019... -> float 42.000004, above the tie at 42 between the e4m3
//   values 40 (0x62) and 44 (0x63): 44. The old rule, x / float(amax / 448) = x / 0.00857696, is 41.99999891... ->
//   float 42.0 exactly, the tie, to even: 40 (0x62).
TEST_CASE("tensorwise cast: torchao's multiplier, not a division by amax / max") {
  const auto from_bits = [](uint32_t b) {
    float f;
    std::memcpy(&f, &b, sizeof f);
    return f;
  };
  const auto bits_of = [](float f) {
    uint32_t b;
    std::memcpy(&b, &f, sizeof b);
    return b;
  };
  const float a = from_bits(0x4075eb29u), x = from_bits(0x3eb8705fu);
  CHECK(bits_of(float8_multiplier(a, Float8Format::e4m3)) == 0x42e92ed0u);
  float q = 0;
  const float scale = cast_to_float8(&x, 1, a, Float8Format::e4m3, &q);
  CHECK(bits_of(scale) == 0x3c0c8660u);
  CHECK(q == 44.0f);
  CHECK(encode_float8(q, Float8Format::e4m3) == 0x63);
}

TEST_CASE("tensorwise cast: stored values are float8 values and q * scale is within half an ulp of x") {
  for (auto f : {Float8Format::e4m3, Float8Format::e5m2}) {
    auto x = tptune::test::randn(4096, 131, 3.0);
    const float a = amax(x.data(), int64_t(x.size()));
    std::vector<float> q(x.size());
    const float scale = cast_to_float8(x.data(), int64_t(x.size()), a, f, q.data());
    // Relative spacing of float8 normals is 2^-3 (e4m3) or 2^-2 (e5m2): half an ulp is 2^-4 or 2^-3 of |x|.
    // Values below the smallest normal (times scale) have the absolute subnormal spacing instead.
    const double half_ulp = f == Float8Format::e4m3 ? 0.0625 : 0.125;
    const double sub = double(scale) * (f == Float8Format::e4m3 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -17));
    size_t not_float8 = 0, bad = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (round_to_float8(q[i], f) != q[i]) ++not_float8;
      if (std::fabs(double(q[i]) * scale - x[i]) > half_ulp * std::fabs(x[i]) * 1.0001 + sub) ++bad;
    }
    CHECK(not_float8 == 0);
    CHECK(bad == 0);
    CHECK(*std::max_element(q.begin(), q.end(), [](float l, float r) { return std::fabs(l) < std::fabs(r); }) != 0);
  }
}
