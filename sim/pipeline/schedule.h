#pragma once
// Pipeline schedules: for each pipeline rank, the ordered list of microbatch actions that
// torch.distributed.pipelining runs, for the schedules torchtitan offers.
//
// Source: torch/distributed/pipelining/schedules.py (get_schedule_class() for the names, case-insensitive;
// each class's constructor for its checks; the functions named below for the order), and torchtitan's
// torchtitan/distributed/pipeline_parallel.py (pipeline_llm(), _get_pipeline_metadata(),
// _get_pp_rank_to_stage_indices_mapping()), which passes parallelism.pipeline_parallel_schedule to
// get_schedule_class() and builds stages_per_rank stages on each of the pp ranks.
//
//   kind                   stages on rank r (pp ranks, v per rank)   order of actions, from
//   GPipe                  r                                          ScheduleGPipe._step_microbatches
//   1F1B                   r                                          Schedule1F1B._step_microbatches
//   Interleaved1F1B        r, r+pp, ..., r+(v-1)pp ("loop")           ScheduleInterleaved1F1B, _get_1f1b_rank_ops
//   LoopedBFS              r, r+pp, ... ("loop")                      ScheduleLoopedBFS._calculate_single_rank_...
//   InterleavedZeroBubble  r, r+pp, ... ("loop")                      _get_1f1b_rank_ops(enable_zero_bubble=True)
//   ZBVZeroBubble          r and 2pp-1-r ("v")                        ScheduleZBVZeroBubble._calculate_single_...
//   DualPipeV              r and 2pp-1-r ("v")                        ScheduleDualPipeV._calculate_single_rank_...
//
// The lists equal the order torch 2.15 executes (recorded per rank under gloo by tests/sim/check_pipeline_schedule.py
// into tests/sim/pipeline_schedule_torch.txt, which tests/sim/pipeline_schedule_test.cc compares).
//
// Actions: F (forward of one stage on one microbatch), B (its full backward), and for the zero-bubble schedules the
// backward split into I (gradient of the stage's input, which the previous stage waits for) and W (gradient of its
// weights, which nothing waits for). Each (stage, microbatch) gets one F and either one B or one I then one W.
//
// Simplifications, each without effect on the order of compute:
// - torch's pipeline_order pads the lists with None (idle time steps of its unit-time picture); the lists here hold
//   compute actions only, and the simulator (sim/pipeline/schedule_sim.h) derives idle time from the dependencies.
// - Communication actions (SEND_F, RECV_F, SEND_B, RECV_B, their waits), FSDP's UNSHARD / RESHARD and REDUCE_GRAD,
//   which _PipelineScheduleRuntime inserts around the compute actions, are not listed.
// - DualPipeV's OVERLAP_F_B (one action of two sub-actions: F of one stage, then B of the other) is listed as its
//   two sub-actions, F then B: _PipelineScheduleRuntime._step_microbatches runs the sub-actions one after the other
//   unless a custom function is registered for OVERLAP_F_B (torchtitan's trainer registers none).
// - ZBVZeroBubble builds its lists for max(2pp-1, m) microbatches and drops the actions of the microbatches past m
//   (replacing them by None); the lists here are the ones left.
// - 1F1B: the order is the one Schedule1F1B._step_microbatches runs (warmup min(m, pp - r) forwards, then one
//   backward and one forward until the forwards are done, then the remaining backwards).
//
// Checks (one-line tptune::Error, "pipeline schedule NAME: ..."), as torch's constructors raise ValueError:
// - 1F1B: microbatches >= pp (Schedule1F1B: "must be greater than or equal to the number of stages").
// - Interleaved1F1B, InterleavedZeroBubble: microbatches a multiple of rounds = max(1, microbatches / pp).
// - DualPipeV: microbatches >= 2 x pp (the number of stages).
// - GPipe, 1F1B: stages_per_rank 1 (single-stage schedules); ZBVZeroBubble, DualPipeV: exactly 2 ("v"); the looped
//   schedules any stages_per_rank >= 1 (torch's classes accept 1; torchtitan's _get_pipeline_metadata asks for at
//   least 2 when the user sets layers_per_stage, and defaults to 2: default_stages_per_rank()).
// - pp, stages_per_rank and microbatches in the ranges below, and pp x stages_per_rank x microbatches x 3 (actions)
//   at most kMaxPipelineActions.
//
// The schedule kinds, their names and placements, and the split of layers into stages are the plan's
// (plans/language/pipeline_parallel.h).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "plans/language/pipeline_parallel.h"

namespace tptune {

// Ranges of build_schedule()'s arguments. pp: any parallel degree (plans/util/limits.h degree). stages_per_rank: at
// most one stage per layer (limits::n_layers). microbatches: at most one sequence each of the largest local batch
// (limits::local_batch_size).
inline constexpr int64_t kMaxPipelineActions = int64_t{1} << 24;  // ~200 MiB of actions

enum class PipelineActionKind { F, B, I, W };
// "F", "B", "I", "W" (torch's _ComputationType values).
std::string_view to_string(PipelineActionKind kind);

struct PipelineAction {
  int stage = 0;  // global stage index, 0 .. pp x stages_per_rank - 1
  int microbatch = 0;
  PipelineActionKind kind = PipelineActionKind::F;
  bool operator==(const PipelineAction&) const = default;
};
// torch's _Action repr: stage, kind, microbatch, e.g. "1F0", "3I2".
std::string to_string(const PipelineAction& a);

struct PipelineSchedule {
  PipelineScheduleKind kind = PipelineScheduleKind::gpipe;
  int pp = 1;
  int stages_per_rank = 1;
  int microbatches = 1;
  std::vector<std::vector<PipelineAction>> ranks;  // [pp rank] -> actions in the order the rank runs them

  int num_stages() const { return pp * stages_per_rank; }
  // The rank that holds `stage` (0 <= stage < num_stages()).
  int rank_of_stage(int stage) const;
  // The stages rank `rank` holds, ascending (torch's generate_rank_to_stage_mapping()).
  std::vector<int> stages_of_rank(int rank) const;
};

// The schedule of `kind` for pp ranks of stages_per_rank stages each and `microbatches` microbatches; tptune::Error
// (one line) when torch would refuse the combination or a size is out of range (see above).
PipelineSchedule build_schedule(PipelineScheduleKind kind, int64_t pp, int64_t stages_per_rank, int64_t microbatches);

// The schedule of a plan whose pipeline is `split` (resolve_pipeline(model, plan)): build_schedule() of
// plan.pp_schedule, whose refusals become one line that starts with pp_schedule's origin and says where the
// microbatch count came from (Plan::provenance), as every path that runs a plan's schedule reports it:
//   "preset:sequence_parallel: pipeline schedule 1F1B: needs microbatches >= pp (the number of stages), got 2 < 4:
//    microbatches = local_batch_size 2 (config x.yaml) / pp_microbatch_size 1 = 2"
PipelineSchedule build_plan_schedule(const Plan& plan, const PipelineSplit& split);

}  // namespace tptune
