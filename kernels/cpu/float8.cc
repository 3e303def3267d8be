// Emulated float8 rounding, encoding and the tensorwise cast; see float8.h.
#include "kernels/cpu/float8.h"

#include <cmath>
#include <limits>

namespace tptune::kernels {
namespace {

struct Spec {
  int mant_bits;  // 3 (e4m3) or 2 (e5m2)
  int bias;       // 7 or 15
  int emin;       // exponent of the smallest normal: 1 - bias
  float max;      // 448 or 57344
};

Spec spec(Float8Format f) { return f == Float8Format::e4m3 ? Spec{3, 7, -6, 448.0f} : Spec{2, 15, -14, 57344.0f}; }

// Round y >= 0 to the nearest integer, ties to even, independent of the FPU rounding mode.
float round_half_even(float y) {
  const float lo = std::floor(y);
  const float frac = y - lo;  // exact: y < 2^24 here
  if (frac > 0.5f) return lo + 1.0f;
  if (frac < 0.5f) return lo;
  return std::fmod(lo, 2.0f) == 0.0f ? lo : lo + 1.0f;
}

// floor(log2(a)) for a finite a > 0.
int exponent_of(float a) {
  int e = 0;
  std::frexp(a, &e);  // a = frac * 2^e, frac in [0.5, 1)
  return e - 1;
}

}  // namespace

float float8_max(Float8Format f) { return spec(f).max; }

float round_to_float8(float x, Float8Format f) {
  if (std::isnan(x)) return std::numeric_limits<float>::quiet_NaN();
  const Spec s = spec(f);
  const float a = std::fabs(x);
  if (a >= s.max) return std::copysign(s.max, x);  // saturate (infinities too)
  if (a == 0.0f) return x;                         // keeps -0
  // The spacing of float8 values around a: 2^(E - mant_bits) with E the binade of a, or the subnormal spacing
  // 2^(emin - mant_bits) below the smallest normal. a / quantum and r * quantum are exact (powers of two).
  const int e = exponent_of(a) < s.emin ? s.emin : exponent_of(a);
  const float quantum = std::ldexp(1.0f, e - s.mant_bits);
  // Rounding up may reach the next binade (still representable) but never passes max (max is on the grid).
  const float r = round_half_even(a / quantum) * quantum;
  return std::copysign(r, x);
}

uint8_t encode_float8(float x, Float8Format f) {
  const Spec s = spec(f);
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return uint8_t(sign | (f == Float8Format::e4m3 ? 0x7F : 0x7E));
  const float r = std::fabs(round_to_float8(x, f));
  if (r == 0.0f) return sign;
  const int e = exponent_of(r);
  int exp_field = 0, mant = 0;
  if (e < s.emin) {
    mant = int(r / std::ldexp(1.0f, s.emin - s.mant_bits));  // subnormal: r = mant * 2^(emin - m)
  } else {
    exp_field = e + s.bias;
    mant = int(r / std::ldexp(1.0f, e - s.mant_bits)) - (1 << s.mant_bits);  // r = (2^m + mant) * 2^(e - m)
  }
  return uint8_t(sign | (exp_field << s.mant_bits) | mant);
}

float decode_float8(uint8_t bits, Float8Format f) {
  const Spec s = spec(f);
  const int exp_bits = 7 - s.mant_bits;
  const int exp_all_ones = (1 << exp_bits) - 1;
  const float sign = (bits & 0x80) ? -1.0f : 1.0f;
  const int exp_field = (bits >> s.mant_bits) & exp_all_ones;
  const int mant = bits & ((1 << s.mant_bits) - 1);
  if (f == Float8Format::e4m3 && exp_field == exp_all_ones && mant == (1 << s.mant_bits) - 1)
    return std::numeric_limits<float>::quiet_NaN();
  if (f == Float8Format::e5m2 && exp_field == exp_all_ones)
    return mant == 0 ? sign * std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  if (exp_field == 0) return sign * std::ldexp(float(mant), s.emin - s.mant_bits);
  return sign * std::ldexp(float((1 << s.mant_bits) + mant), exp_field - s.bias - s.mant_bits);
}

float amax(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (std::isnan(a)) return std::numeric_limits<float>::quiet_NaN();
    if (a > m) m = a;
  }
  return m;
}

float float8_multiplier(float amax_value, Float8Format f) {
  constexpr double kAmaxFloor = 1e-12;                                                 // torchao's EPS
  const double a = double(amax_value) < kAmaxFloor ? kAmaxFloor : double(amax_value);  // NaN stays NaN
  return float(double(float8_max(f)) / a);
}

float float8_scale(float amax_value, Float8Format f) { return 1.0f / float8_multiplier(amax_value, f); }

void quantize_float8(const float* x, int64_t n, float m, Float8Format f, float* q) {
  for (int64_t i = 0; i < n; ++i) q[i] = round_to_float8(x[i] * m, f);
}

float cast_to_float8(const float* x, int64_t n, float amax_value, Float8Format f, float* q) {
  const float m = float8_multiplier(amax_value, f);
  quantize_float8(x, n, m, f, q);
  return 1.0f / m;
}

}  // namespace tptune::kernels
