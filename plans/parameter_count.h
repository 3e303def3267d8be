#pragma once
// How many parameters a plan trains, and how many of them one rank holds.
//
//   total     Model::total_parameters(): every parameter of the model once (a weight two modules share counts once).
//   per_rank  the elements one rank stores between steps: each parameter tensor of the lowered Program (role
//             TensorRole::parameter, counted once per TensorId and once per layer for per-layer ones) at its local
//             shape, i.e. after TP sharding, then sharded over dp_shard as FSDP2 does: fully_shard chunks the local
//             tensor along dim 0 with torch.chunk (_chunk_with_empty in torch/distributed/fsdp/_fully_shard/
//             _fsdp_param.py, padded to the first chunk's size), so rank 0 holds ceil(dim0 / dp_shard) rows. That
//             largest shard is what is counted. dp_replicate (HSDP) replicates and does not divide it.
// Whatever the lowering makes a parameter (a bias, a tied weight held by one tensor) is counted without this code
// knowing about it. The counts are elements, not bytes (the bytes are sim/memory.h's).

#include <cstdint>
#include <string>

#include "plans/program.h"

namespace tptune {

struct ParameterCount {
  int64_t total = 0;
  int64_t per_rank = 0;
};

// Throws tptune::Error when a count overflows 64-bit integers (plans/checked_math.h).
ParameterCount parameter_count(const Program& p);

// How one GPU's share is cut, for the reports: "its tp 8 shard, chunked over dp_shard 4 by FSDP", "all of them".
// With context parallelism FSDP's group is dp_shard x cp: "..., chunked over dp_shard 2 x cp 8 by FSDP".
std::string shard_text(int tp, int dp_shard, int cp = 1);

// "8,030,261,248": a count with thousands separators, as the reports print it.
std::string with_thousands(int64_t v);

}  // namespace tptune
