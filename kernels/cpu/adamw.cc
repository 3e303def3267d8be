// AdamW CPU reference; see adamw.h. The per-element update is the one the CUDA kernel computes
// (kernels/formulas/adamw.h).
#include "kernels/cpu/adamw.h"

#include <stdexcept>
#include <string>

#include "kernels/formulas/adamw.h"

namespace tptune::kernels {

void adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWConfig& c, int64_t step) {
  if (step < 1) throw std::invalid_argument("adamw: step is 1-based, got " + std::to_string(step));
  const formulas::AdamWConstants k = formulas::adamw_constants(c.lr, c.beta1, c.beta2, c.eps, c.weight_decay, step);
  for (int64_t i = 0; i < n; ++i) formulas::adamw_elem(k, p[i], g[i], m[i], v[i]);
}

}  // namespace tptune::kernels
