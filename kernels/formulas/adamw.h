#pragma once
// AdamW (decoupled weight decay, torch.optim.AdamW) per element, in double, as kernels/cpu/adamw.cc computes it.
//
// The step-dependent constants (bias corrections, step size, decay factor) are computed once per step on the host
// (adamw_constants); the per-element update then does exactly the CPU reference's double operations in the same
// order, so with FMA contraction off (kernels/CMakeLists.txt builds the CUDA kernels with --fmad=false) the device
// result equals the CPU's bit-for-bit (sqrt and division are IEEE-exact in double on both).

#include <cmath>
#include <cstdint>

#include "kernels/formulas/host_device.h"

namespace tptune::formulas {

struct AdamWConstants {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double step_size = 0.0;  // lr / (1 - beta1^step)
  double bc2_sqrt = 1.0;   // sqrt(1 - beta2^step)
  double decay = 1.0;      // 1 - lr * weight_decay
};

// For the 1-based `step` (the caller checks step >= 1).
inline AdamWConstants adamw_constants(double lr, double beta1, double beta2, double eps, double weight_decay,
                                      int64_t step) {
  AdamWConstants c;
  c.beta1 = beta1;
  c.beta2 = beta2;
  c.eps = eps;
  const double bc1 = 1.0 - std::pow(beta1, double(step));
  c.bc2_sqrt = std::sqrt(1.0 - std::pow(beta2, double(step)));
  c.step_size = lr / bc1;
  c.decay = 1.0 - lr * weight_decay;
  return c;
}

// One parameter: p, m, v updated in place from the gradient g.
TPTUNE_HD void adamw_elem(const AdamWConstants& c, float& p, double g, float& m, float& v) {
  const double mi = c.beta1 * double(m) + (1.0 - c.beta1) * g;
  const double vi = c.beta2 * double(v) + (1.0 - c.beta2) * g * g;
  m = float(mi);
  v = float(vi);
  p = float(double(p) * c.decay - c.step_size * mi / (::sqrt(vi) / c.bc2_sqrt + c.eps));
}

}  // namespace tptune::formulas
