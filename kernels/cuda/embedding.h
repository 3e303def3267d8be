#pragma once
// Vocab-parallel embedding lookup and its backward on CUDA.
//
// Contract: the Backend's embedding_fwd/bwd (runtime/backend.h) and the CPU reference kernels/cpu/embedding.h:
// ids (tokens) int32; weight, d_weight (vocab_local, dim) of T (float or __nv_bfloat16); out, d_out (tokens, dim).
// This rank owns ids [vocab_offset, vocab_offset + vocab_local); a row of out is the owned id's weight row, ZERO
// for an id another shard owns. Ids are never used to address memory unless they are in range.
// An out-of-range id when !vocab_sharded is an error the CPU reference throws for; a kernel cannot throw, so here
// it gives a zero row: the CUDA backend must check the ids on the host when it uploads them (they come from a
// host tokens file), as the CPU backend's reference does.
// Backward: d_weight is overwritten with the scatter-add of d_out rows, DETERMINISTIC: token indices are sorted by
// local row (CUB's stable radix sort), then each owned row sums its tokens' d_out rows in token order (float
// accumulation, as the CPU reference does; with T = float the result equals the CPU's bit-for-bit). The sort's
// scratch (keys, values, CUB temp storage; ~16 bytes per token) comes from `scratch` (kernels/cuda/device/scratch.h).
// Cost (napkin): forward moves tokens*dim elements twice; backward writes the table (vocab_local*dim) once and reads
// tokens*dim elements of d_out.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/device/scratch.h"

namespace tptune::cuda {

template <class T>
void embedding_fwd(cudaStream_t stream, int64_t tokens, int64_t vocab_local, int64_t dim, int64_t vocab_offset,
                   bool vocab_sharded, const int32_t* ids, const T* weight, T* out);
template <class T>
void embedding_bwd(cudaStream_t stream, int64_t tokens, int64_t vocab_local, int64_t dim, int64_t vocab_offset,
                   bool vocab_sharded, const int32_t* ids, const T* d_out, T* d_weight,
                   const ScratchAllocator& scratch = {});

}  // namespace tptune::cuda
