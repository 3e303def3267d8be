#include "kernels/cpu/bias.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace tptune::kernels {

void bias_add(const float* x, const float* b, int64_t rows, int64_t n, int split, float* y) {
  if (split < 1) throw std::invalid_argument("bias_add: split must be positive, got " + std::to_string(split));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c)
      y[r * n + c] = static_cast<float>(static_cast<double>(x[r * n + c]) + static_cast<double>(b[c]) / split);
}

void bias_grad(const float* dy, int64_t rows, int64_t n, float* db) {
  std::vector<double> sum(static_cast<size_t>(n), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c) sum[size_t(c)] += dy[r * n + c];
  for (int64_t c = 0; c < n; ++c) db[c] = static_cast<float>(sum[size_t(c)]);
}

}  // namespace tptune::kernels
