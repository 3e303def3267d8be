#pragma once
// SwiGLU and GELU (tanh approximation) per element, forward and backward, in a compute type C.
//
// The formulas and their operation order are those of kernels/cpu/activations.cc (see activations.h there for the
// math). C = double reproduces the CPU reference bit-for-bit on the host (the host test checks it over a sweep of
// inputs) and is what the fp32 CUDA kernels use; C = float is what the bf16 kernels use (the result is rounded to
// bf16, 8 bits of mantissa, so float's 24 bits are ample; the device test's bf16 tolerance covers both roundings).

#include <cmath>
#include <cstdint>

#include "kernels/formulas/host_device.h"

namespace tptune::formulas {

// sqrt(2/pi) as std::sqrt(2.0 / std::numbers::pi) rounds it (the host test checks the constant).
constexpr double kSqrt2OverPi = 0x1.9884533d43651p-1;
constexpr double kGeluC = 0.044715;

// 1/(1+exp(-a)); exp(-a) overflows to inf for very negative a, giving 0 as it should.
template <class C>
TPTUNE_HD C sigmoid(C a) {
  return C(1) / (C(1) + math_exp(-a));
}

// y = silu(a) * b.
template <class C>
TPTUNE_HD C swiglu_fwd_elem(C a, C b) {
  return a * sigmoid(a) * b;
}

// da = dy * b * silu'(a), db = dy * silu(a); silu'(a) = s (1 + a (1 - s)).
template <class C>
struct SwigluGrad {
  C da, db;
};
template <class C>
TPTUNE_HD SwigluGrad<C> swiglu_bwd_elem(C a, C b, C dy) {
  const C s = sigmoid(a);
  return {dy * b * s * (C(1) + a * (C(1) - s)), dy * a * s};
}

// y = 0.5 a (1 + tanh(k (a + 0.044715 a^3))).
template <class C>
TPTUNE_HD C gelu_fwd_elem(C a) {
  return C(0.5) * a * (C(1) + math_tanh(C(kSqrt2OverPi) * (a + C(kGeluC) * a * a * a)));
}

// da = dy * (0.5 (1 + t) + 0.5 a (1 - t^2) k (1 + 3 * 0.044715 a^2)), t = tanh(k (a + 0.044715 a^3)).
template <class C>
TPTUNE_HD C gelu_bwd_elem(C a, C dy) {
  const C t = math_tanh(C(kSqrt2OverPi) * (a + C(kGeluC) * a * a * a));
  const C d = C(0.5) * (C(1) + t) + C(0.5) * a * (C(1) - t * t) * C(kSqrt2OverPi) * (C(1) + C(3.0 * kGeluC) * a * a);
  return dy * d;
}

}  // namespace tptune::formulas
