#pragma once
// A pipeline schedule (sim/pipeline/schedule.h) on a timeline: when each rank runs each of its actions, given each
// stage's compute times and the time of one point-to-point hop between pipeline ranks.
//
// Rules:
// - A rank runs its actions one at a time, in its list's order, each as early as its dependencies allow.
// - F of stage s, microbatch m waits for F of stage s-1, microbatch m (the activation) to end.
// - B or I of stage s, microbatch m waits for F of stage s, microbatch m, and for B or I of stage s+1, microbatch m
//   (the gradient of s's output; the last stage has none and starts from its loss).
// - W of stage s, microbatch m waits for I of stage s, microbatch m.
// - A dependency produced on another rank arrives p2p_us after it ends (one hop: send and receive of the activation
//   or gradient). Sends are asynchronous: the producing rank does not wait for them (as torch's batched isend), so
//   point-to-point overlaps compute; two stages on the same rank (the V schedules' turn at rank pp-1) hand over with
//   no hop.
// - F costs fwd_us, B bwd_us, I bwd_us - bwd_weight_us, W bwd_weight_us of its stage.
//
// Results: per rank, each action's start and end; busy time (the sum of its actions); idle (bubble) time, the step
// minus busy (a rank idles from 0 until it starts and from its end until the step ends); and the peak number of
// (stage, microbatch) activations it holds: an F adds one, the B or (for split backward) the W of the same
// (stage, microbatch) releases it; counted along the rank's list, which is its order in time. A rank with v stages
// counts each stage's microbatch separately (each holds the activations of its 1/v of the layers). The step time is
// when the last rank ends.
//
// Not modelled here: compute/communication contention, FSDP's all-gathers and gradient reduction, the optimizer.
//
// tptune::Error (one line) when the costs do not fit the schedule (one StageCost per stage; finite, non-negative
// times; bwd_weight_us <= bwd_us) or when the schedule cannot run to its end (a rank waits for an action that never
// runs: a schedule no generator of build_schedule() produces).

#include <vector>

#include "sim/pipeline/schedule.h"

namespace tptune {

struct StageCost {
  double fwd_us = 0;
  double bwd_us = 0;         // the full backward: input and weight gradients
  double bwd_weight_us = 0;  // the part of bwd_us that is the weight gradient (W of split backward; I is the rest)
};

struct TimedPipelineAction {
  PipelineAction action;
  double start_us = 0;
  double end_us = 0;
};

struct PipelineRankTimeline {
  std::vector<TimedPipelineAction> actions;  // in the rank's order
  double busy_us = 0;
  double idle_us = 0;        // step_us - busy_us
  double idle_fraction = 0;  // idle_us / step_us (0 for an empty step)
  int peak_activations = 0;  // (stage, microbatch) pairs whose forward ran and whose backward has not completed
};

struct PipelineTimeline {
  std::vector<PipelineRankTimeline> ranks;  // [pp rank]
  double step_us = 0;                       // the latest end over every rank
  // The mean over ranks of idle_fraction (equal on every rank when every rank has the same busy time).
  double bubble_fraction() const;
};

// stage_costs[stage] for each of schedule.num_stages() stages.
PipelineTimeline simulate_schedule(const PipelineSchedule& schedule, const std::vector<StageCost>& stage_costs,
                                   double p2p_us);

}  // namespace tptune
