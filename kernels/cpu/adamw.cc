// AdamW CPU reference; see adamw.h.
#include "kernels/cpu/adamw.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace tptune::kernels {

void adamw(float* p, const float* g, float* m, float* v, int64_t n, const AdamWConfig& c, int64_t step) {
  if (step < 1) throw std::invalid_argument("adamw: step is 1-based, got " + std::to_string(step));
  const double bc1 = 1.0 - std::pow(c.beta1, double(step));
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(c.beta2, double(step)));
  const double step_size = c.lr / bc1;
  const double decay = 1.0 - c.lr * c.weight_decay;
  for (int64_t i = 0; i < n; ++i) {
    const double gi = g[i];
    const double mi = c.beta1 * m[i] + (1.0 - c.beta1) * gi;
    const double vi = c.beta2 * v[i] + (1.0 - c.beta2) * gi * gi;
    m[i] = float(mi);
    v[i] = float(vi);
    p[i] = float(double(p[i]) * decay - step_size * mi / (std::sqrt(vi) / bc2_sqrt + c.eps));
  }
}

}  // namespace tptune::kernels
