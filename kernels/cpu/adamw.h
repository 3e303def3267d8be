#pragma once
// AdamW optimizer step, in place (CPU reference), as torch.optim.AdamW computes it (decoupled weight decay).
//
// Contract (ElementwiseOp adamw {p, g, m, v} -> {p, m, v}): p, g, m, v hold n elements each; p, m, v are updated
// in place. `step` is the 1-based number of this step (1 on the first call; m and v start at zero).
//   p <- p * (1 - lr * weight_decay)
//   m <- beta1 * m + (1 - beta1) * g
//   v <- beta2 * v + (1 - beta2) * g^2
//   p <- p - lr / (1 - beta1^step) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
// Computed in double per element, stored as float. Preconditions (std::invalid_argument otherwise): step >= 1.
// Cost (napkin): reads 4n and writes 3n floats (28 bytes per parameter), ~15 FLOPs per element.

#include <cstdint>

namespace tptune::kernels {

struct AdamWConfig {
  double lr = 3e-4;
  double beta1 = 0.9, beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

// p, g, m, v (n); updates p, m, v in place for the 1-based `step`.
void adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWConfig& config, int64_t step);

}  // namespace tptune::kernels
