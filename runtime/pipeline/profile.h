#pragma once
// `tp-run profile` of a pipeline-parallel plan on CPU: every pp rank runs its schedule (runtime/pipeline/run.h) and
// the Profile records what calibration and `tp-plan accuracy` need of it (plans/program/profile_format.h, "pipeline").
//
// Method, after `warmup` untimed steps (each the schedule and the gradient reduction):
//   op times     `iters` steps with every op run one at a time (serialized, as runtime/profiler.h does): an op's
//                sample is its mean over the microbatches on the pp rank that runs it, the maximum over its tp group.
//                The optimizer phase is not timed (its compute, AdamW, is not run: see run.h), so its records
//                say "measured": false.
//   the schedule `iters` steps with the overlap the Program allows, all ranks starting together (a barrier over
//                pp and tp): each action's start, its wait for the neighbour's activation or gradient, and its end,
//                in us from the rank's start (one machine's clock: ranks of one node), the median over the steps;
//                the step's wall time is the slowest rank's end, gradient reduction included.
//   p2p          after the steps, each pair of neighbouring pp ranks (stage order) exchanges a message of 1/4, 1/2
//                and 1 x the activation one microbatch sends (this rank's tp shard, fp32 on CPU), `iters` round trips
//                each after one untimed: one way is half a round trip; the maximum over the tp group (its ranks
//                exchange theirs at the same time, as the pipeline's sends do). Its "bytes" are the Program's count
//                (elements x the training dtype's size), as its collectives' records state theirs, whatever the
//                backend stores (the CPU's fp32).
// The loss is the mean of the microbatches' losses on the last stage's rank, broadcast over pp. Collective over the tp
// group of `backend` and over run.pp; every rank returns the whole Profile.

#include "plans/program/profile_format.h"
#include "plans/program/program.h"
#include "runtime/backend.h"
#include "runtime/pipeline/run.h"
#include "runtime/profiler.h"

namespace tptune {

// `microbatch`: the Program of one microbatch (this rank's tp shards); the caller fills the profile's config and plan
// YAML and the pipeline block's schedule name and microbatch size.
Profile profile_pipeline(const Program& microbatch, Backend& backend, const PipelineRun& run,
                         const ProfileOptions& options);

}  // namespace tptune
