#pragma once
// One pp rank running its pipeline schedule on CPU: what `tp-run verify` (runtime/pipeline_verify.h) and `tp-run
// profile` (runtime/pipeline_profile.h) of a pipeline-parallel plan share.
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
// After the last action, reduce_gradients(): the optimizer phase's collectives of the rank's parameters (the tp
// all-reduce of Partial gradients) per microbatch, then the microbatches' parameter gradients summed into microbatch
// 0's Executor and divided by their number (torch's schedules scale_grads=True). The optimizer's compute (AdamW) is
// not run: each microbatch's Executor holds its own copy of the weights.
//
// Point-to-point sends are non-blocking (torch's batched isend/irecv), receives block: a schedule whose order
// deadlocks would hang, which torch's schedules (and build_schedule) never do; the backend's watchdog does not cover
// these receives. A step may be run again (profiling): every Executor recomputes its activations and gradients.
//
// Fault injection (tests): `shifted_boundary` makes every stage but the first take its input one block late (the
// received activation enters its second block, its first block never runs), a wrong stage boundary;
// `dropped_microbatch` makes every rank skip the actions of the last microbatch (a schedule that loses one).
//
// Errors: tptune::Error for a layout that does not fit the Program (stages not covering its layers in order, an
// action naming a stage or microbatch outside the layout or another rank's stage), and for a failed MPI call.

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "plans/program.h"
#include "runtime/backend.h"
#include "runtime/executor.h"

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

// "F", "B", "I", "W": torch's letters.
const char* to_letter(PipelineStep::Kind k);

enum class PipelineFault { none, shifted_boundary, dropped_microbatch };

struct PipelineRun {
  std::vector<PipelineStageSpan> stages;  // [stage], consecutive blocks covering the model
  std::vector<PipelineStep> actions;      // this pp rank's, in the order it runs them
  int pp_rank = 0;
  MPI_Comm pp = MPI_COMM_NULL;  // the pp group (the ranks of this tp rank), ranks numbered by pp index
  int microbatches = 1;
  PipelineFault fault = PipelineFault::none;  // tests only
};

class PipelineExecution {
 public:
  // Checks the layout against `microbatch` (the Program of one microbatch, this rank's tp shards) and builds one
  // Executor per microbatch, each initialised from `seed` (the same weights on every microbatch; the caller may
  // replace the inputs through microbatch(m)).
  PipelineExecution(const Program& microbatch, Backend& backend, const PipelineRun& run, uint64_t seed);

  // What one action of run.actions took, in MPI_Wtime seconds: `start` before its receive, `compute` after it
  // (the wait for the neighbour's activation or gradient is compute - start), `end` after its ops and its send.
  struct ActionTime {
    double start = 0, compute = 0, end = 0;
  };
  using ActionFn = std::function<void(size_t action, const ActionTime&)>;
  // Runs the rank's actions once, then waits for its sends. With `on_op`, every op runs one at a time
  // (Executor::run_ops' serialized mode) and reports its time: a profile's per-op times.
  void run_schedule(const ActionFn& on_action = nullptr, const Executor::OpTimeFn& on_op = nullptr);
  // The gradient reduction described in the header; collective over the tp group.
  void reduce_gradients();

  Executor& microbatch(int m) { return *executors_.at(size_t(m)); }
  int microbatches() const { return int(executors_.size()); }
  // The stage that holds a parameter or a module (full FQN): its block's, the embedding's (first) or the head's (last).
  int stage_of(const std::string& name) const;
  int owner_of(const std::string& name) const { return run_.stages[size_t(stage_of(name))].rank; }
  const PipelineRun& run() const { return run_; }

 private:
  std::function<bool(int)> stage_ops(int stage, bool forward) const;
  int act_into(Executor& e, int layer) const;
  int grad_of_act(Executor& e, int layer) const;
  PipelineStageSpan span(int stage) const;

  PipelineRun run_;
  int layers_ = 0;
  std::vector<std::unique_ptr<Executor>> executors_;
  std::vector<SegmentKind> kind_;  // of each flat op
  const LayerChain* fwd_ = nullptr;
  const LayerChain* bwd_ = nullptr;
};

}  // namespace tptune
