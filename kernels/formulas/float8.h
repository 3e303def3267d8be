#pragma once
// Float8 (OCP e4m3fn / e5m2) encode, decode and the tensorwise cast, on bit patterns, host and device.
//
// Bit-identical to the CPU emulation in kernels/cpu/float8.{h,cc} (the host test checks every one of the 256 codes
// of each format and a sweep of fp32 inputs: all exponents and mantissas near ties, subnormals, saturation,
// infinities, NaN, -0). The semantics, restated: round to nearest, ties to even; SATURATING (|x| >= max finite,
// infinities included, gives +-max finite: e4m3 448 = 0x7E, e5m2 57344 = 0x7B); NaN -> sign|0x7F (e4m3),
// sign|0x7E (e5m2); -0 -> 0x80. We do not use cuda_fp8.h's __nv_cvt_float_to_fp8: its NaN is always 0x7F (sign
// dropped) and its behaviour must match the CPU emulation by construction, not by hope.
//
// How the rounding works (integer only, so it cannot depend on a rounding mode or on FMA contraction): a finite
// |x| = M * 2^(E-23) with M the 24-bit significand. The float8 grid around |x| has spacing 2^qe, qe = max(E, emin)
// - m (m mantissa bits, emin the smallest normal exponent); r = RNE(M / 2^(23 + qe - E)) is |x| in units of the
// spacing, and the code is ((max(E, emin) - emin) << m) + r: in the subnormal range the code is r itself, and a
// round-up to 2^(m+1) carries into the exponent field. |x| < max finite never rounds past max (max is on the grid).
//
// The cast (CastFp8Op), as torchao's tensorwise dynamic scaling computes it (float8_utils.amax_to_scale, then
// float8_training_tensor's `tensor.to(torch.float32) * scale` and to_fp8_saturated): the multiplier
// m = float(max_finite / max(amax, 1e-12)) divided in double (NaN when amax is NaN, 0 when it is inf), stored =
// the code of the float product x * m (one IEEE multiply: nothing to contract), and the scale the float8 tensor
// carries for its GEMM, real = stored * scale, is torchao's `_scale.reciprocal()`: 1 / m in float. The device
// spells the divisions and the product __ddiv_rn / __fdiv_rn / __fmul_rn, so that no compiler flag can change them.

#include <cstdint>

#include "kernels/formulas/bf16.h"
#include "kernels/formulas/host_device.h"

namespace tptune::formulas {

enum class Fp8 { e4m3, e5m2 };

struct Fp8Spec {
  int mant_bits;     // 3 (e4m3) or 2 (e5m2)
  int bias;          // 7 or 15
  int emin;          // 1 - bias: the exponent of the smallest normal
  uint8_t max_code;  // 0x7E (448) or 0x7B (57344)
  uint8_t nan_code;  // 0x7F or 0x7E (sign bit added)
  float max;         // 448 or 57344
};

TPTUNE_HD Fp8Spec fp8_spec(Fp8 f) {
  return f == Fp8::e4m3 ? Fp8Spec{3, 7, -6, 0x7E, 0x7F, 448.0f} : Fp8Spec{2, 15, -14, 0x7B, 0x7E, 57344.0f};
}

TPTUNE_HD float fp8_max(Fp8 f) { return fp8_spec(f).max; }

// x -> its float8 code (RNE, saturating, NaN -> sign|nan_code).
TPTUNE_HD uint8_t fp8_encode(float x, Fp8 f) {
  const Fp8Spec s = fp8_spec(f);
  const uint32_t u = float_bits(x);
  const uint8_t sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t abs_bits = u & 0x7FFFFFFFu;
  if (abs_bits > 0x7F800000u) return uint8_t(sign | s.nan_code);
  if (bits_float(abs_bits) >= s.max) return uint8_t(sign | s.max_code);  // infinities too
  const uint32_t exp_field = abs_bits >> 23;
  if (exp_field == 0) return sign;  // zero or a float subnormal (< 2^-126): below half the float8 minimum
  const int e = int(exp_field) - 127;
  const uint32_t mant = (abs_bits & 0x7FFFFFu) | 0x800000u;  // 24-bit significand: |x| = mant * 2^(e - 23)
  const int e_eff = e < s.emin ? s.emin : e;
  const int shift = 23 + (e_eff - s.mant_bits) - e;  // >= 23 - mant_bits >= 20
  uint32_t r = 0;
  if (shift <= 25) {  // beyond 25, mant / 2^shift < 1/2: rounds to 0
    r = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
  }
  if (r == 0) return sign;
  return uint8_t(sign | (uint32_t((e_eff - s.emin) << s.mant_bits) + r));
}

// code -> its value (e4m3: S.1111.111 NaN; e5m2: S.11111.00 +-inf, S.11111.{01,10,11} NaN).
TPTUNE_HD float fp8_decode(uint8_t code, Fp8 f) {
  const Fp8Spec s = fp8_spec(f);
  const uint32_t sign = uint32_t(code & 0x80) << 24;
  const int exp_all_ones = (1 << (7 - s.mant_bits)) - 1;
  const int exp_field = (code >> s.mant_bits) & exp_all_ones;
  const uint32_t mant = code & ((1u << s.mant_bits) - 1u);
  if (f == Fp8::e4m3 && exp_field == exp_all_ones && mant == (1u << s.mant_bits) - 1u) return bits_float(0x7FC00000u);
  if (f == Fp8::e5m2 && exp_field == exp_all_ones)
    return mant == 0 ? bits_float(sign | 0x7F800000u) : bits_float(0x7FC00000u);
  if (exp_field == 0) {  // zero or subnormal: mant * 2^(emin - m), exact in float
    const float unit = bits_float(uint32_t(127 + s.emin - s.mant_bits) << 23);
    return bits_float(sign | float_bits(float(mant) * unit));
  }
  return bits_float(sign | (uint32_t(exp_field - s.bias + 127) << 23) | (mant << (23 - s.mant_bits)));
}

// The float8 value nearest to x, as a float (what the CPU backend stores for a float8 tensor).
TPTUNE_HD float fp8_round(float x, Fp8 f) { return fp8_decode(fp8_encode(x, f), f); }

// torchao's EPS: the amax below which the multiplier stops growing (an all-zero tensor gets max_finite / 1e-12).
inline constexpr double kFp8AmaxFloor = 1e-12;

// The tensorwise multiplier for a (global) amax: float(max_finite / max(amax, 1e-12)), divided in double.
TPTUNE_HD float fp8_multiplier(float amax, Fp8 f) {
  const double a = double(amax) < kFp8AmaxFloor ? kFp8AmaxFloor : double(amax);  // torch.clamp: NaN stays NaN
#if defined(__CUDA_ARCH__)
  return __double2float_rn(__ddiv_rn(double(fp8_max(f)), a));
#else
  return float(double(fp8_max(f)) / a);
#endif
}

// The scale a float8 tensor carries (real = stored * scale) for a multiplier: 1 / m in float.
TPTUNE_HD float fp8_scale_of_multiplier(float m) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(1.0f, m);
#else
  return 1.0f / m;
#endif
}

// The tensorwise scale for a (global) amax.
TPTUNE_HD float fp8_scale(float amax, Fp8 f) { return fp8_scale_of_multiplier(fp8_multiplier(amax, f)); }

// One element of the cast: the code of x * m (m = fp8_multiplier).
TPTUNE_HD uint8_t fp8_quantize(float x, float m, Fp8 f) {
#if defined(__CUDA_ARCH__)
  return fp8_encode(__fmul_rn(x, m), f);
#else
  return fp8_encode(x * m, f);
#endif
}

}  // namespace tptune::formulas
