#pragma once
// Cross-entropy loss (mean over tokens) in stages, so that it can run vocab-parallel (CPU reference).
//
// Contract (CrossEntropyOp in plans/program/program.h). logits is (tokens, vocab_local) row-major; this rank owns the
// vocab columns [vocab_offset, vocab_offset + vocab_local). targets is (tokens) int32 class ids, held in the
// tensor's 4-byte elements (pass a reinterpret_cast<const int32_t*> of its storage).
//   row_max      {logits} -> {max}                       max_t = max_j logits[t, j]              (tokens)
//   sum_exp      {logits, max} -> {sumexp}               sumexp_t = sum_j exp(logits[t, j] - max_t) (tokens)
//   target_logit {logits, targets} -> {tlogit}           logits[t, target_t - offset], 0 if not owned (tokens)
//   loss         {max, sumexp, tlogit} -> {loss}         mean_t (log(sumexp_t) + max_t - tlogit_t)  (scalar)
//   backward     {logits, max, sumexp, targets} -> {d_logits}
//                d_logits[t, j] = (exp(logits[t, j] - max_t) / sumexp_t - [j + offset == target_t]) / tokens
// Vocab-parallel: between the stages the runtime all-reduces max (max over ranks) before sum_exp, then sumexp and
// tlogit (sum over ranks) before loss and backward, so every stage after row_max sees the global statistics.
// With one shard (offset 0, the full vocab) the stages compute plain cross entropy. Targets are not checked
// (a shard cannot know the global vocab); an out-of-range target contributes a 0 target logit.
// Sums (sumexp, the loss mean) are accumulated in double and stored as float.
// Cost (napkin): row_max and sum_exp each read the logits once (sum_exp: one exp per element), backward reads
// the logits and writes d_logits (one exp per element); target_logit and loss touch O(tokens).

#include <cstdint>

namespace tptune::kernels {

// logits (tokens, vocab_local) -> max (tokens).
void cross_entropy_row_max(const float* logits, int64_t tokens, int64_t vocab_local, float* max);

// logits (tokens, vocab_local), max (tokens, global) -> sumexp (tokens, local partial sum).
void cross_entropy_sum_exp(const float* logits, const float* max, int64_t tokens, int64_t vocab_local, float* sumexp);

// logits (tokens, vocab_local), targets (tokens) -> tlogit (tokens, 0 where the target is not owned).
void cross_entropy_target_logit(const float* logits, const int32_t* targets, int64_t tokens, int64_t vocab_local,
                                int64_t vocab_offset, float* tlogit);

// max, sumexp, tlogit (tokens, global) -> the loss summed over the tokens and divided by mean_over (`tokens` for the
// mean; the global token count when the ranks' losses are summed, CrossEntropyOp::mean_over).
float cross_entropy_loss(const float* max, const float* sumexp, const float* tlogit, int64_t tokens, int64_t mean_over);

// logits (tokens, vocab_local), max, sumexp (tokens, global), targets (tokens) -> d_logits (tokens, vocab_local).
// d_logits = (softmax - onehot) / mean_over; it may alias logits (in place).
void cross_entropy_bwd(const float* logits, const float* max, const float* sumexp, const int32_t* targets,
                       int64_t tokens, int64_t mean_over, int64_t vocab_local, int64_t vocab_offset, float* d_logits);

}  // namespace tptune::kernels
