#pragma once
// One pp rank running its pipeline schedule on CPU: what `tp-run verify` (runtime/pipeline/verify.h) and `tp-run
// profile` (runtime/pipeline/profile.h) of a pipeline-parallel plan share.
//
// Every rank of the pp group runs its schedule's actions in order (the tool builds them: sim/pipeline/schedule.h,
// torch's order) on the Programs of its stages (plans/lower/rewrite/pipeline_stage.h: each stage's ops of the Program
// of ONE microbatch of the whole model, this TP rank's shards, with its transfers on the pp group), one Executor per
// stage and microbatch, so that each microbatch keeps its own activations until its backward, as torch's PipelineStage
// keeps them per microbatch.
//   F of stage s, microbatch m: the stage's pp.recv_fwd (unless s is first: the activation entering its first block,
//     from the rank of stage s-1), then its forward ops (embedding, blocks, and on the last stage the head's forward
//     and loss) and its pp.send_fwd (unless s is last: the activation leaving its last block, to stage s+1's rank).
//     Stages on the same rank (a V schedule's middle) pass it through the backend's transfer to this rank itself.
//   B (or I) likewise backward: pp.recv_bwd (the gradient of the stage's output, from stage s+1), the backward ops,
//     pp.send_bwd (the gradient of its input, to stage s-1). W does nothing: I computed the weight gradients too (the
//     split changes when, not what).
// Transfers are the Executors' (runtime/executor.h): receives complete before the action's compute starts (its wait),
// sends stay in flight until the schedule's end (torch's batched isend), so no order of actions can deadlock on them.
// After the last action, reduce_gradients(): per stage, the optimizer phase's collectives of its parameters (the tp
// all-reduce of Partial gradients; not the gradient norm's) per microbatch, then the microbatches' parameter gradients
// summed into microbatch 0's Executor and divided by their number (torch's schedules scale_grads=True). The
// optimizer's compute (AdamW) is not run: each microbatch's Executor holds its own copy of the weights.
//
// A step may be run again (profiling): every Executor recomputes its activations and gradients. The backend's pipeline
// group (Group::pp) must be `run.pp`'s ranks in pp order (checked by size); transfers wait under the backend's
// watchdog like any collective.
//
// Fault injection (tests): `shifted_boundary` lowers every stage but the first without its first block (the received
// activation enters the block after it, which never runs), a wrong stage boundary; `dropped_microbatch` makes every
// rank skip the actions of the last microbatch (a schedule that loses one).
//
// Errors: tptune::Error for a layout that does not fit the Program (stages not covering its layers in order, an
// action naming a stage or microbatch outside the layout or another rank's stage, a backend whose pipeline group is
// not the layout's), and for a failed transfer or MPI call.

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "plans/lower/rewrite/pipeline_stage.h"
#include "plans/program/program.h"
#include "runtime/backend.h"
#include "runtime/executor.h"

namespace tptune {

struct PipelineStep {
  enum class Kind { forward, backward, input_grad, weight_grad };
  int stage = 0, microbatch = 0;
  Kind kind = Kind::forward;
};

// "F", "B", "I", "W": torch's letters.
std::string_view to_letter(PipelineStep::Kind k);

enum class PipelineFault { none, shifted_boundary, dropped_microbatch };

struct PipelineRun {
  std::vector<PipelineStageSpan>
      stages;  // [stage], consecutive blocks covering the model (plans/lower/rewrite/pipeline_stage.h)
  std::vector<PipelineStep> actions;  // this pp rank's, in the order it runs them
  int pp_rank = 0;
  MPI_Comm pp = MPI_COMM_NULL;  // the pp group (the ranks of this tp rank), ranks numbered by pp index
  int microbatches = 1;
  PipelineFault fault = PipelineFault::none;  // tests only
};

class PipelineExecution {
 public:
  // Checks the layout against `microbatch` (the Program of one microbatch of the whole model, this rank's tp shards),
  // lowers this rank's stages and builds one Executor per stage and microbatch, each initialised from `seed` (the same
  // weights on every microbatch; the caller may replace the inputs through executor()).
  PipelineExecution(const Program& microbatch, Backend& backend, const PipelineRun& run, uint64_t seed);

  // What one action of run.actions took, in MPI_Wtime seconds: `start` before its receive, `compute` after it
  // (the wait for the neighbour's activation or gradient is compute - start), `end` after its ops and its send.
  struct ActionTime {
    double start = 0, compute = 0, end = 0;
  };
  using ActionFn = std::function<void(size_t action, const ActionTime&)>;
  // Runs the rank's actions once, then waits for its sends. With `on_op`, every op runs one at a time
  // (Executor::run_ops' serialized mode) and reports its time, the op named by its index in the microbatch
  // Program's flat ops (microbatch_flat()): a profile's per-op times. Transfers are not reported (the action's wait
  // holds the receive; a send is issued, not waited for).
  void run_schedule(const ActionFn& on_action = nullptr, const Executor::OpTimeFn& on_op = nullptr);
  // The gradient reduction described in the header; collective over the tp group.
  void reduce_gradients();

  // The Executor of `stage` for microbatch `m`, nullptr when another rank holds the stage.
  Executor* executor(int stage, int m);
  // This rank's stages, in stage order.
  const std::vector<int>& local_stages() const { return local_stages_; }
  int microbatches() const { return run_.microbatches; }
  // The stage that holds a parameter or a module (full FQN): its block's, the embedding's (first) or the head's (last).
  int stage_of(const std::string& name) const;
  int owner_of(const std::string& name) const { return run_.stages[size_t(stage_of(name))].rank; }
  const PipelineRun& run() const { return run_; }
  // The whole-model microbatch Program the stages were taken from, and its flat ops (what a profile records).
  const Program& microbatch_program() const { return microbatch_; }
  const FlatProgram& microbatch_flat() const { return microbatch_flat_; }

 private:
  struct LocalStage {
    int stage = 0;
    std::vector<std::unique_ptr<Executor>> executors;  // [microbatch]
    std::vector<SegmentKind> kind;                     // of each flat op of the stage's Program
    std::vector<int> microbatch_op;                    // its index among microbatch_flat_'s ops, -1 for a transfer
  };
  LocalStage& local(int stage);
  std::function<bool(int)> ops_of(const LocalStage& ls, bool forward, bool receive) const;

  PipelineRun run_;
  Program microbatch_;
  FlatProgram microbatch_flat_;
  std::vector<int> local_stages_;
  std::vector<LocalStage> locals_;  // in local_stages_' order
};

}  // namespace tptune
