// RoPE CPU reference; see rope.h for the convention. The angle and the rotation are the CUDA kernel's formulas
// (kernels/formulas/rope.h); cos and sin once per (token, pair), as there.
#include "kernels/cpu/rope.h"

#include <cmath>
#include <stdexcept>
#include <vector>

#include "kernels/formulas/rope.h"

namespace tptune::kernels {
namespace {

// sign = +1 rotates by +angle (forward), -1 by -angle (backward).
void rotate(const float* x, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, int64_t offset, double theta,
            double sign, float* y) {
  if (head_dim <= 0 || head_dim % 2 != 0)
    throw std::invalid_argument("rope: head_dim must be even and positive, got " + std::to_string(head_dim));
  if (!(theta > 0.0)) throw std::invalid_argument("rope: theta must be positive");
  const int64_t half = head_dim / 2;
  // cos/sin table (seq, half): pair i of local token s at global position offset + s.
  std::vector<double> cs(size_t(seq * half)), sn(size_t(seq * half));
  for (int64_t s = 0; s < seq; ++s) {
    for (int64_t i = 0; i < half; ++i) {
      const double a = formulas::rope_angle(offset + s, i, head_dim, theta);
      cs[size_t(s * half + i)] = std::cos(a);
      sn[size_t(s * half + i)] = sign * std::sin(a);
    }
  }
  const int64_t row = heads * head_dim;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s < seq; ++s) {
      const double* c = cs.data() + s * half;
      const double* sv = sn.data() + s * half;
      const float* xr = x + (b * seq + s) * row;
      float* yr = y + (b * seq + s) * row;
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t i = 0; i < half; ++i) {
          const int64_t j = h * head_dim + 2 * i;
          const auto p = formulas::rope_rotate(xr[j], xr[j + 1], c[i], sv[i]);  // both read first: y may alias x
          yr[j] = float(p.y0);
          yr[j + 1] = float(p.y1);
        }
      }
    }
  }
}

}  // namespace

void rope(const float* x, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, int64_t offset, double theta,
          float* y) {
  rotate(x, batch, seq, heads, head_dim, offset, theta, +1.0, y);
}

void rope_bwd(const float* dy, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, int64_t offset,
              double theta, float* dx) {
  rotate(dy, batch, seq, heads, head_dim, offset, theta, -1.0, dx);
}

}  // namespace tptune::kernels
