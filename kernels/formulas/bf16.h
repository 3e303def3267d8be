#pragma once
// bfloat16 as a bit pattern: float -> bf16 round to nearest, ties to even; bf16 -> float exact.
//
// bf16 is the top 16 bits of an IEEE float (1 sign, 8 exponent, 7 mantissa bits), so widening is a shift and
// narrowing rounds the low 16 bits away: add 0x7FFF plus the lowest kept bit (ties go to the even kept mantissa),
// which carries into the exponent when the mantissa overflows (1.11111111 -> 2.0; the largest finite floats round
// to infinity, as torch.bfloat16 and __float2bfloat16_rn do). NaN stays a NaN of the same sign: the payload's top
// bits are kept and the quiet bit (0x0040) is set, so a NaN whose payload lives in the low 16 bits does not become
// infinity. Subnormal floats round like any other pattern (bf16 has the same subnormal range as float).
// For every non-NaN float this is exactly __float2bfloat16_rn (tests/kernels/cuda/conversions_host_test.cc checks
// it against cuda_bf16.h); NVIDIA's NaN is the canonical 0x7FFF instead. The CUDA kernels use these functions.

#include <cstdint>
#include <cstring>

#include "kernels/formulas/host_device.h"

namespace tptune::formulas {

TPTUNE_HD uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

TPTUNE_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// float -> bf16 bits, round to nearest even (NaN -> quiet NaN of the same sign).
TPTUNE_HD uint16_t float_to_bf16_bits(float x) {
  const uint32_t u = float_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x0040u);  // NaN: keep sign, force quiet
  const uint32_t lsb = (u >> 16) & 1u;
  return uint16_t((u + 0x7FFFu + lsb) >> 16);
}

// bf16 bits -> float (exact).
TPTUNE_HD float bf16_bits_to_float(uint16_t b) { return bits_float(uint32_t(b) << 16); }

// The float nearest to x that bf16 represents (what storing x in a bf16 tensor keeps).
TPTUNE_HD float round_to_bf16(float x) { return bf16_bits_to_float(float_to_bf16_bits(x)); }

}  // namespace tptune::formulas
