#pragma once
// Vocab-parallel cross-entropy stages on CUDA (CrossEntropyOp in plans/program/program.h).
//
// Contract: the Backend's ce_* calls (runtime/backend.h) and the CPU reference kernels/cpu/cross_entropy.h.
// logits, d_logits (tokens, vocab_local) of T (float or __nv_bfloat16), column 0 is vocab id vocab_offset;
// targets (tokens) int32; max, sumexp, tlogit (tokens) and loss (a device scalar) fp32. Between the stages the
// runtime all-reduces max (max), then sumexp and tlogit (sum), exactly as on CPU.
//   ce_row_max       max_t = max_j logits[t, j]  (exact: max is associative)
//   ce_sum_exp       sumexp_t = sum_j exp(logits[t, j] - max_t), double accumulation, one block per row (the exps
//                    in double for fp32 logits, in float for bf16 logits, as PyTorch's bf16 cross-entropy)
//   ce_target_logit  logits[t, target_t - offset], 0 where another shard owns the target
//   ce_loss          mean_t (log sumexp_t + max_t - tlogit_t), double, one block (fixed reduction order)
//   ce_backward      d_logits = (softmax - onehot) / tokens; d_logits may alias logits
// All reductions are deterministic (fixed tree order); they differ from the CPU loops' order by rounding only.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace tptune::cuda {

template <class T>
void ce_row_max(cudaStream_t stream, int64_t tokens, int64_t vocab_local, const T* logits, float* max);
template <class T>
void ce_sum_exp(cudaStream_t stream, int64_t tokens, int64_t vocab_local, const T* logits, const float* max,
                float* sumexp);
template <class T>
void ce_target_logit(cudaStream_t stream, int64_t tokens, int64_t vocab_local, int64_t vocab_offset, const T* logits,
                     const int32_t* targets, float* tlogit);
void ce_loss(cudaStream_t stream, int64_t tokens, const float* max, const float* sumexp, const float* tlogit,
             float* loss);
template <class T>
void ce_backward(cudaStream_t stream, int64_t tokens, int64_t vocab_local, int64_t vocab_offset, const T* logits,
                 const float* max, const float* sumexp, const int32_t* targets, T* d_logits);

}  // namespace tptune::cuda
