// Staged cross-entropy CPU reference; see cross_entropy.h for the stages.
#include "kernels/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace tptune::kernels {

void cross_entropy_row_max(const float* logits, int64_t tokens, int64_t vocab_local, float* max) {
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = logits + t * vocab_local;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < vocab_local; ++j) m = std::max(m, row[j]);
    max[t] = m;
  }
}

void cross_entropy_sum_exp(const float* logits, const float* max, int64_t tokens, int64_t vocab_local, float* sumexp) {
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = logits + t * vocab_local;
    const double m = max[t];
    double s = 0.0;
    for (int64_t j = 0; j < vocab_local; ++j) s += std::exp(double(row[j]) - m);
    sumexp[t] = float(s);
  }
}

void cross_entropy_target_logit(const float* logits, const int32_t* targets, int64_t tokens, int64_t vocab_local,
                                int64_t vocab_offset, float* tlogit) {
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t j = int64_t(targets[t]) - vocab_offset;
    tlogit[t] = (j >= 0 && j < vocab_local) ? logits[t * vocab_local + j] : 0.0f;
  }
}

float cross_entropy_loss(const float* max, const float* sumexp, const float* tlogit, int64_t tokens,
                         int64_t mean_over) {
  if (tokens <= 0 || mean_over <= 0) return 0.0f;
  double total = 0.0;
  for (int64_t t = 0; t < tokens; ++t) total += std::log(double(sumexp[t])) + double(max[t]) - double(tlogit[t]);
  return float(total / double(mean_over));
}

void cross_entropy_bwd(const float* logits, const float* max, const float* sumexp, const int32_t* targets,
                       int64_t tokens, int64_t mean_over, int64_t vocab_local, int64_t vocab_offset, float* d_logits) {
  if (mean_over <= 0) throw std::invalid_argument("cross_entropy_bwd: mean_over must be positive");
  const double inv_tokens = 1.0 / double(mean_over);
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = logits + t * vocab_local;
    float* drow = d_logits + t * vocab_local;
    const double m = max[t], inv_sum = 1.0 / double(sumexp[t]);
    const int64_t target = int64_t(targets[t]) - vocab_offset;  // local column, or outside [0, vocab_local)
    for (int64_t j = 0; j < vocab_local; ++j) {
      const double p = std::exp(double(row[j]) - m) * inv_sum;  // softmax; row is read before drow is written
      drow[j] = float((j == target ? p - 1.0 : p) * inv_tokens);
    }
  }
}

}  // namespace tptune::kernels
