#pragma once
// Token embedding lookup and its backward (CPU reference), vocab-parallel capable.
//
// Contract (EmbeddingOp in plans/program/program.h): forward {tokens, weight} -> {out}; backward {tokens, d_out} ->
// {d_weight}.
//   tokens is (n_tokens) int32 token ids. The runtime's tensors hold int32 ids in their 4-byte elements (the
//   TensorRole::input convention), so it passes a reinterpret_cast<const int32_t*> of the tensor's storage.
//   weight and d_weight are this rank's table (vocab_local, dim_local) row-major; out and d_out are
//   (n_tokens, dim_local).
//   This rank owns ids [vocab_offset, vocab_offset + vocab_local) (vocab_offset = r * vocab_local when the vocab
//   is sharded, 0 otherwise). Row t of out is weight[id - vocab_offset] for an owned id and ZERO otherwise, so
//   the sum of out over the vocab shards is the full lookup (out is a partial sum, placement P).
//   When vocab_sharded is false every id must be owned: an id outside [0, vocab_local) throws
//   std::invalid_argument naming the token index (a bad tokens file, not a silent zero row).
//   backward: d_weight is zeroed, then d_weight[id - vocab_offset] += d_out[t] for every owned id (float
//   accumulation, in token order, so repeated ids sum deterministically).
// Cost (napkin): forward reads n_tokens*dim_local weights and writes as many; backward writes the whole table
// (vocab_local*dim_local zeros) plus n_tokens*dim_local read-modify-writes.

#include <cstdint>

namespace tptune::kernels {

// tokens (n_tokens), weight (vocab_local, dim_local) -> out (n_tokens, dim_local).
void embedding(const int32_t* tokens, int64_t n_tokens, const float* weight, int64_t vocab_local, int64_t dim_local,
               int64_t vocab_offset, bool vocab_sharded, float* out);

// tokens (n_tokens), d_out (n_tokens, dim_local) -> d_weight (vocab_local, dim_local).
void embedding_bwd(const int32_t* tokens, int64_t n_tokens, const float* d_out, int64_t vocab_local, int64_t dim_local,
                   int64_t vocab_offset, bool vocab_sharded, float* d_weight);

}  // namespace tptune::kernels
