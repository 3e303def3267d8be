// kernels/formulas/bf16.h on the host (no CUDA toolkit needed): every one of the 65536 bf16 patterns widens and
// narrows back to itself, and float -> bf16 rounding matches a brute-force nearest-value oracle on every tie,
// near-tie and truncation point of every bf16 value (6 x 65536 floats) plus a stride sweep of 2^32 / 1021 (4.2 million)
// floats.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/formulas/bf16.h"

using namespace tptune::formulas;

namespace {

// The value of a bf16 pattern, with the pattern above the largest finite (0x7F7F / 0xFF7F) taken as +-2^128, the
// value round-to-nearest would have there if the exponent did not run out (so ties at the top go to infinity,
// the even pattern 0x7F80, as IEEE's overflow rule says).
double bf16_value_unbounded(uint32_t b) {
  if ((b & 0x7FFFu) == 0x7F80u) return (b & 0x8000u) ? -std::ldexp(1.0, 128) : std::ldexp(1.0, 128);
  return double(bits_float(b << 16));
}

// Brute force: of the two bf16 patterns that bracket a finite x (truncation and the next one away from zero), the
// nearer; ties to the even pattern.
uint16_t oracle(float x) {
  const uint32_t u = float_bits(x);
  const uint32_t lo = u >> 16, hi = lo + 1;  // same sign; hi is one step further from zero
  const double dlo = std::fabs(double(x) - bf16_value_unbounded(lo));
  const double dhi = std::fabs(double(x) - bf16_value_unbounded(hi));
  if ((u & 0xFFFFu) == 0) return uint16_t(lo);  // exactly representable
  if (dlo < dhi) return uint16_t(lo);
  if (dhi < dlo) return uint16_t(hi);
  return uint16_t((lo & 1u) ? hi : lo);
}

bool is_nan_bits(uint16_t b) { return (b & 0x7F80u) == 0x7F80u && (b & 0x007Fu) != 0; }

void check_rounding(uint32_t u, int64_t& bad) {
  const float x = bits_float(u);
  const uint16_t got = float_to_bf16_bits(x);
  if (std::isnan(x)) {
    if (!is_nan_bits(got) || (got & 0x8000u) != ((u >> 16) & 0x8000u) || !(got & 0x0040u)) ++bad;
    return;
  }
  if (std::isinf(x)) {
    if (got != uint16_t(u >> 16)) ++bad;
    return;
  }
  if (got != oracle(x)) {
    if (bad < 5) UNSCOPED_INFO("float bits 0x" << std::hex << u << ": got 0x" << got << ", want 0x" << oracle(x));
    ++bad;
  }
}

}  // namespace

TEST_CASE("bf16: all 65536 patterns widen exactly and narrow back to themselves", "[cuda-math]") {
  int64_t bad = 0;
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const float x = bf16_bits_to_float(uint16_t(b));
    CHECK(float_bits(x) == (b << 16));  // widening is the 16-bit shift
    const uint16_t back = float_to_bf16_bits(x);
    if (is_nan_bits(uint16_t(b))) {
      // A NaN stays a NaN of the same sign, quieted (signalling NaNs gain the quiet bit, as on the GPU).
      if (!is_nan_bits(back) || (back & 0x8000u) != (b & 0x8000u) || back != uint16_t(b | 0x0040u)) ++bad;
    } else if (back != b) {
      ++bad;
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("bf16: float rounding is round-to-nearest-even on every tie and near-tie", "[cuda-math]") {
  int64_t bad = 0;
  for (uint32_t b = 0; b < 0x10000u; ++b)
    for (uint32_t low : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) check_rounding((b << 16) | low, bad);
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 1021) check_rounding(uint32_t(u), bad);
  CHECK(bad == 0);
}

TEST_CASE("bf16: hand-checked roundings", "[cuda-math]") {
  // 1 + 2^-8 is halfway between 1 (0x3F80, even) and 1 + 2^-7 (0x3F81): ties to 0x3F80.
  CHECK(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);
  // 1 + 3 * 2^-8 is halfway between 0x3F81 (odd) and 0x3F82: ties to 0x3F82.
  CHECK(float_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3F82);
  CHECK(float_to_bf16_bits(-2.0f) == 0xC000);
  CHECK(float_to_bf16_bits(-0.0f) == 0x8000);
  // FLT_MAX is above the top bf16 (0x7F7F = 3.3895e38) by more than half its ulp: overflows to +inf.
  CHECK(float_to_bf16_bits(std::numeric_limits<float>::max()) == 0x7F80);
  CHECK(float_to_bf16_bits(-std::numeric_limits<float>::infinity()) == 0xFF80);
  CHECK(round_to_bf16(3.14159265f) == 3.140625f);  // 0x4049: 1.5703125 * 2
}
