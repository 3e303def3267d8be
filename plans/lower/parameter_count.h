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
//
// Pipeline parallelism (plans/language/pipeline_parallel.h): a GPU holds only its pp rank's stages, so per_rank is a pp
// rank's count, the largest (per_pp_rank has each). A rank's count is that of its stages' Programs
// (plans/lower/rewrite/pipeline_stage.h): a block's parameters once per block it holds, the embedding's on stage 0, the
// final norm's and the output's on the last stage, each sharded as above. A stage's Program (Program::stage.index >= 0)
// counts its own blocks only.

#include <cstdint>
#include <string>
#include <vector>

#include "plans/language/pipeline_parallel.h"
#include "plans/program/program.h"

namespace tptune {

struct ParameterCount {
  int64_t total = 0;
  int64_t per_rank = 0;  // under PP: the largest pp rank's
  // Under PP: [pp rank] what each rank's GPUs hold; per_rank is per_pp_rank[pp_rank]. Empty without PP.
  std::vector<int64_t> per_pp_rank;
  int pp_rank = 0;
};

// Throws tptune::Error when a count overflows 64-bit integers (plans/util/checked_math.h). A Program of the whole model
// whose plan has pp_degree > 1 is counted per pp rank: pipeline_parameter_count() on resolve_pipeline() of its plan.
ParameterCount parameter_count(const Program& p);
// The pp ranks' counts of a pipeline whose stages are `split`'s under `schedule`'s placement (pipeline_stage_spans()),
// from `whole`, a Program of the whole model (stage -1: the microbatch Program the stages are taken from).
ParameterCount pipeline_parameter_count(const Program& whole, const PipelineSplit& split,
                                        PipelineScheduleKind schedule);

// How one GPU's share is cut, for the reports: "its tp 8 shard, chunked over dp_shard 4 by FSDP", "all of them".
// With context parallelism FSDP's group is dp_shard x cp: "..., chunked over dp_shard 2 x cp 8 by FSDP". Under PP
// (c.per_pp_rank) the share is a pp rank's first: "pp rank 7's stages (the most of 8 pp ranks; the least holds
// 390,118,400), its tp 8 shard, chunked over dp_shard 2 by FSDP".
std::string shard_text(const ParameterCount& c, int tp, int dp_shard, int cp = 1);

// "8,030,261,248": a count with thousands separators, as the reports print it.
std::string with_thousands(int64_t v);

}  // namespace tptune
