// SwiGLU / GELU CPU reference; see activations.h for the math.
#include "kernels/cpu/activations.h"

#include <cmath>
#include <numbers>

namespace tptune::kernels {
namespace {

constexpr double kGeluC = 0.044715;
const double kSqrt2OverPi = std::sqrt(2.0 / std::numbers::pi);

// 1/(1+exp(-a)); exp(-a) overflows to inf for a < -709, giving 0 as it should.
double sigmoid(double a) { return 1.0 / (1.0 + std::exp(-a)); }

}  // namespace

void swiglu(const float* a, const float* b, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const double x = a[i];
    y[i] = float(x * sigmoid(x) * b[i]);
  }
}

void swiglu_bwd(const float* a, const float* b, const float* dy, int64_t n, float* da, float* db) {
  for (int64_t i = 0; i < n; ++i) {
    const double x = a[i], bv = b[i], g = dy[i];  // read before writing: da/db may alias inputs
    const double s = sigmoid(x);
    da[i] = float(g * bv * s * (1.0 + x * (1.0 - s)));
    db[i] = float(g * x * s);
  }
}

void gelu(const float* a, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const double x = a[i];
    y[i] = float(0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + kGeluC * x * x * x))));
  }
}

void gelu_bwd(const float* a, const float* dy, int64_t n, float* da) {
  for (int64_t i = 0; i < n; ++i) {
    const double x = a[i];
    const double t = std::tanh(kSqrt2OverPi * (x + kGeluC * x * x * x));
    const double d = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * kGeluC * x * x);
    da[i] = float(double(dy[i]) * d);
  }
}

}  // namespace tptune::kernels
