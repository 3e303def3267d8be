#pragma once
// Per-element and per-token pieces of the staged (vocab-parallel) cross-entropy, numerically stable: every exp is of
// (logit - row max) <= 0, so it never overflows; the log is of a sum >= 1 (the max term contributes exp(0)).
//
// In C = double, exactly the arithmetic of kernels/cpu/cross_entropy.cc (see cross_entropy.h there for the stages;
// the fp32 kernels use it); C = float is what the bf16 kernels use (as PyTorch's bf16 cross-entropy computes in
// float: the exps are the costly part, and double exps would make the bf16 kernels compute-bound). The
// row max is exact on any device (max is associative); the sums (sumexp over the vocab, the loss mean over
// tokens) are reductions, so a parallel kernel adds in a different order than the CPU loop: those differ by
// rounding only, which the device tests' tolerances cover.

#include <cmath>
#include <cstdint>

#include "kernels/formulas/host_device.h"

namespace tptune::formulas {

// One addend of sumexp_t: exp(logit - max_t).
template <class C>
TPTUNE_HD C ce_exp_term(float logit, float max) {
  return math_exp(C(logit) - C(max));
}

// The local column of target id `target`, or -1 when another vocab shard owns it.
TPTUNE_HD int64_t ce_local_column(int32_t target, int64_t vocab_local, int64_t vocab_offset) {
  const int64_t j = int64_t(target) - vocab_offset;
  return (j >= 0 && j < vocab_local) ? j : -1;
}

// One token's loss: log(sumexp) + max - tlogit.
TPTUNE_HD double ce_token_loss(float max, float sumexp, float tlogit) {
  return ::log(double(sumexp)) + double(max) - double(tlogit);
}

// d_logits[t, j] = (softmax - [j is the target]) / tokens, given inv_sum = 1/sumexp_t and inv_tokens = 1/tokens.
template <class C>
TPTUNE_HD C ce_grad(float logit, float max, C inv_sum, bool is_target, C inv_tokens) {
  const C p = math_exp(C(logit) - C(max)) * inv_sum;
  return (is_target ? p - C(1) : p) * inv_tokens;
}

}  // namespace tptune::formulas
