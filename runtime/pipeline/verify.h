#pragma once
// Pipeline parallelism (plans/language/pipeline_parallel.h) verified on CPU: does a pp x tp mesh running a schedule
// compute the unsharded model's step?
//
// Every pp rank runs its schedule once as runtime/pipeline/run.h describes (its stage Programs, one Executor per stage
// and microbatch, activations and gradients by the Programs' transfers, the gradients reduced and averaged over the
// microbatches), microbatch m taking rows [m mb, (m+1) mb) of the reference's seeded batch (torch's schedules split the
// batch in order). Each microbatch's loss is the mean over its tokens; every gradient is compared on the rank that
// owns it with the
// unsharded step of the whole local batch (runtime/verifier.h's comparison); the owners broadcast their checks so that
// every rank returns the same report. The loss is the mean of the microbatches' losses, from the rank of the last
// stage.
//
// Not modelled: FSDP (tp-run runs dp_shard 1), context parallelism together with PP, float8, tied embeddings.
// Errors: tptune::Error as PipelineExecution's, and for a reference batch that is not microbatches x the
// microbatch's.

#include <cstdint>

#include "plans/program/program.h"
#include "runtime/backend.h"
#include "runtime/pipeline/run.h"
#include "runtime/verifier.h"

namespace tptune {

// `microbatch`: the Program of one microbatch (local_batch_size = the microbatch size, this rank's tp shards);
// `reference`: the unsharded model on the whole local batch. Collective over the TP group of `backend` and over
// run.pp.
VerifyReport verify_pipeline(const Program& microbatch, const Program& reference, Backend& backend,
                             Backend& reference_backend, const PipelineRun& run, uint64_t seed);

}  // namespace tptune
