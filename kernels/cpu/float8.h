#pragma once
// Emulated float8 (OCP FP8 formats) and the tensorwise float8 cast (CPU reference).
//
// Formats, bit-exact to the OCP 8-bit floating point spec (torch.float8_e4m3fn / torch.float8_e5m2):
//   e4m3 ("e4m3fn"): 1 sign, 4 exponent (bias 7), 3 mantissa bits. Max finite 448 = 1.75 * 2^8 (0x7E); no
//                    infinities; S.1111.111 is NaN. Smallest normal 2^-6, subnormals m * 2^-9, m = 1..7.
//   e5m2:            1 sign, 5 exponent (bias 15), 2 mantissa bits. Max finite 57344 = 1.75 * 2^15 (0x7B);
//                    S.11111.00 is infinity, S.11111.{01,10,11} NaN. Smallest normal 2^-14, subnormals m * 2^-16.
// Rounding: round to nearest, ties to even (on the mantissa), SATURATING: |x| >= max finite (infinities
// included) gives +-max finite, as the float8 training casts do (torchao clamps to +-max before casting).
// NaN stays NaN; -0 stays -0. Rounding never depends on the FPU rounding mode.
//
// How the CPU backend stores float8 tensors: as float arrays whose every element is exactly representable in the
// tensor's float8 format (the value round_to_float8 returns); encode/decode exist so that tests can check the
// 8-bit patterns. A float8 tensor comes with an fp32 scale: real value = stored value * scale.
//
// Tensorwise cast (CastFp8Op in plans/program/program.h):
//   amax {x} -> {amax}:         amax = max |x| (NaN if any element is NaN); all-reduced (max) by the runtime
//                               when x is sharded, so every rank uses the same scale.
//   cast {x, amax} -> {xq, scale}: torchao's tensorwise cast (float8_utils.amax_to_scale and
//                               float8_training_tensor's `tensor.to(torch.float32) * scale`): the multiplier
//                               m = float(max_finite / max(amax, 1e-12)) divided in double, xq = round(x * m) (the
//                               product in float, then the float8 rounding above), scale = 1 / m in float
//                               (torchao's `_scale.reciprocal()`, what the float8 GEMM multiplies by).
// Cost (napkin): amax reads n floats; cast reads n and writes n (one byte each on a GPU).

#include <cstdint>

namespace tptune::kernels {

enum class Float8Format { e4m3, e5m2 };

// Largest finite value: e4m3 448, e5m2 57344.
float float8_max(Float8Format f);

// The float8 value nearest to x (RNE, saturating, NaN -> NaN), as a float.
float round_to_float8(float x, Float8Format f);
inline float round_to_e4m3(float x) { return round_to_float8(x, Float8Format::e4m3); }
inline float round_to_e5m2(float x) { return round_to_float8(x, Float8Format::e5m2); }

// The 8-bit pattern of round_to_float8(x). NaN encodes as sign|0x7F (e4m3) or sign|0x7E (e5m2).
uint8_t encode_float8(float x, Float8Format f);
// The value of an 8-bit pattern (e4m3: 0x7F/0xFF NaN; e5m2: 0x7C/0xFC +-inf, 0x7D..0x7F/0xFD..0xFF NaN).
float decode_float8(uint8_t bits, Float8Format f);
inline uint8_t encode_e4m3(float x) { return encode_float8(x, Float8Format::e4m3); }
inline uint8_t encode_e5m2(float x) { return encode_float8(x, Float8Format::e5m2); }
inline float decode_e4m3(uint8_t b) { return decode_float8(b, Float8Format::e4m3); }
inline float decode_e5m2(uint8_t b) { return decode_float8(b, Float8Format::e5m2); }

// max |x[i]| over n elements; 0 for n == 0; NaN if any element is NaN.
float amax(const float* x, int64_t n);

// The tensorwise multiplier for a (global) amax: float(float8_max(f) / max(amax, 1e-12)), divided in double (NaN
// for a NaN amax, 0 for an infinite one).
float float8_multiplier(float amax, Float8Format f);

// The scale of the float8 tensor (real = stored * scale): 1 / float8_multiplier(amax, f), in float.
float float8_scale(float amax, Float8Format f);

// x (n) -> q (n) = round_to_float8(x * m): the stored values of the float8 tensor for multiplier m.
void quantize_float8(const float* x, int64_t n, float m, Float8Format f, float* q);

// The cast stage: q = quantize_float8(x, float8_multiplier(amax, f)). Returns the scale, float8_scale(amax, f).
float cast_to_float8(const float* x, int64_t n, float amax, Float8Format f, float* q);

}  // namespace tptune::kernels
