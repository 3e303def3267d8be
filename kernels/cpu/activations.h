#pragma once
// SwiGLU and GELU (tanh approximation), forward and backward (CPU reference).
//
// Contract (ElementwiseOp):
//   swiglu      {a, b} -> {y = silu(a) * b}          swiglu_bwd {a, b, dy} -> {da, db}
//   gelu        {a} -> {y} (tanh approximation)      gelu_bwd   {a, dy} -> {da}
// All arrays hold n elements (any shape, elementwise). Outputs are written, never accumulated into. Computed in
// double, stored as float; outputs may alias inputs of the same element.
//
// Math, with sig(a) = 1/(1+exp(-a)):
//   silu(a) = a sig(a),  silu'(a) = sig(a) (1 + a (1 - sig(a)))
//   swiglu_bwd: da = dy * b * silu'(a), db = dy * silu(a)
//   gelu(a) = 0.5 a (1 + tanh(u)), u = k (a + 0.044715 a^3), k = sqrt(2/pi)
//   gelu'(a) = 0.5 (1 + tanh u) + 0.5 a (1 - tanh^2 u) k (1 + 3 * 0.044715 a^2)
// Cost (napkin): swiglu reads 2n and writes n elements; backward reads 3n, writes 2n. ~10-20 FLOPs per element
// (exp/tanh counted as a few).

#include <cstdint>

namespace tptune::kernels {

// a, b (n) -> y (n) = silu(a) * b.
void swiglu(const float* a, const float* b, int64_t n, float* y);
// a, b, dy (n) -> da, db (n).
void swiglu_bwd(const float* a, const float* b, const float* dy, int64_t n, float* da, float* db);

// a (n) -> y (n) = gelu_tanh(a).
void gelu(const float* a, int64_t n, float* y);
// a, dy (n) -> da (n) = dy * gelu_tanh'(a).
void gelu_bwd(const float* a, const float* dy, int64_t n, float* da);

}  // namespace tptune::kernels
