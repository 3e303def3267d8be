#pragma once
// Pipeline parallelism (plans/pipeline_parallel.h) verified on CPU: does a pp x tp mesh running a schedule compute the
// unsharded model's step?
//
// Every rank of the pp group runs its schedule's actions in order (the tool builds them: sim/pipeline_schedule.h,
// torch's order) on the Program of ONE microbatch of the whole model (its TP rank's shards), one Executor per
// microbatch so that each microbatch keeps its own activations until its backward, as torch's PipelineStage keeps them
// per microbatch. A stage is a run of that Program's ops: the embedding's (stage 0), its blocks' (by layer), the
// head's (the last stage); forward actions run the forward ops, backward actions the backward ops.
//   F of stage s, microbatch m: unless s is first, the activation entering its first block arrives from the rank of
//     stage s-1 (MPI point-to-point on the pp group) and is written where that block reads it (the layer chain,
//     plans/program.h); after the stage's forward ops, unless s is last, the activation leaving its last block goes
//     to the rank of stage s+1. Stages on the same rank (looped and V schedules) share the microbatch's Executor: the
//     hand-over is the chain itself.
//   B (or I) likewise backward: the gradient of the stage's output arrives from stage s+1, the gradient of its input
//     goes to stage s-1. W does nothing: I computed the weight gradients too (the split changes when, not what).
// Each microbatch's loss is the mean over its tokens; after the last action the microbatches' parameter gradients are
// summed and divided by the number of microbatches (torch's schedules scale_grads=True), the optimizer phase's
// collectives of the rank's parameters run (the tp all-reduce of Partial gradients), and every gradient is compared on
// the rank that owns it with the unsharded step of the whole local batch (runtime/verifier.h's comparison); the
// owners broadcast their checks so that every rank returns the same report. The loss is the mean of the
// microbatches' losses, from the rank of the last stage.
//
// Not modelled: FSDP (tp-run runs dp_shard 1), context parallelism together with PP, float8, tied embeddings.
// Point-to-point sends are non-blocking (torch's batched isend/irecv), receives block: a schedule whose order
// deadlocks would hang, which torch's schedules (and build_schedule) never do.
//
// Fault injection (tests): `shifted_boundary` makes every stage but the first take its input one block late (the
// received activation enters its second block, its first block never runs), a wrong stage boundary.
//
// Errors: tptune::Error for a layout that does not fit the Program (stages not covering its layers in order, an
// action naming a stage or microbatch outside the layout, a reference batch that is not microbatches x the
// microbatch's), and for a failed MPI call.

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "plans/program.h"
#include "runtime/backend.h"
#include "runtime/verifier.h"

namespace tptune {

struct PipelineStageSpan {
  int first_layer = 0, layers = 0;  // the stage's blocks
  int rank = 0;                     // the pp rank that holds it
};

struct PipelineStep {
  enum class Kind { forward, backward, input_grad, weight_grad };
  int stage = 0, microbatch = 0;
  Kind kind = Kind::forward;
};

enum class PipelineFault { none, shifted_boundary };

struct PipelineRun {
  std::vector<PipelineStageSpan> stages;  // [stage], consecutive blocks covering the model
  std::vector<PipelineStep> actions;      // this pp rank's, in the order it runs them
  int pp_rank = 0;
  MPI_Comm pp = MPI_COMM_NULL;  // the pp group (the ranks of this tp rank), ranks numbered by pp index
  int microbatches = 1;
  PipelineFault fault = PipelineFault::none;  // tests only
};

// `microbatch`: the Program of one microbatch (local_batch_size = the microbatch size, this rank's tp shards);
// `reference`: the unsharded model on the whole local batch. Collective over the TP group of `backend` and over
// run.pp.
VerifyReport verify_pipeline(const Program& microbatch, const Program& reference, Backend& backend,
                             Backend& reference_backend, const PipelineRun& run, uint64_t seed);

}  // namespace tptune
