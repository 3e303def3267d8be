#pragma once
// Gradient accumulation: a training step of `ga` microbatches (Plan::gradient_accumulation_steps), each a forward
// and backward of local_batch_size sequences, then one optimizer step (torchtitan's train_step: `for microbatch in
// range(gradient_accumulation_steps): forward_backward_step(...)`, then clip_grad_norm_ and optimizers.step()).
//
// The Program (plans/program/program.h) is one microbatch plus the optimizer, and its Timeline
// (sim/timeline/timeline.h) is that step with ga = 1. The step with ga microbatches is
//
//   step(ga) = step(1) + (ga - 1) x microbatch_us
//
// where microbatch_us is when the compute stream could start the next microbatch: the latest end over every op of
// every segment but the optimizer's ("grad_norm", "block.optimizer", "optimizer") that is not a DP-group collective
// (Group::dp, Group::dp_replicate). FSDP2 reduce-scatters (and HSDP all-reduces) each microbatch's gradients into the
// same sharded gradient buffers (it does not skip them during accumulation in torchtitan: train_step never calls
// set_requires_gradient_sync(False)), and they drain on their own streams while the next microbatch computes, so they
// do not hold the next microbatch back; the last microbatch's do hold the optimizer back, and step(1) has them.
//
// A DP stream carries each microbatch's collectives in turn, so microbatch_us is at least the busy time of each DP
// stream (dp, dp_replicate) per microbatch: the period of a pipeline is its slowest stage's. Where collectives do
// not overlap compute (Timeline::comm_overlaps_compute false: CPU ranks), the DP collectives ran on the compute
// stream and count in the latest end instead.
//
// The approximation: microbatch k+1's timeline is microbatch 1's shifted by microbatch_us (the steady state of a
// repeated step, as the timeline's block steady state). Not modelled: how the previous microbatch's draining
// reduce-scatters and the next microbatch's parameter all-gathers interleave on FSDP2's streams beyond that floor
// (the next microbatch's first all-gathers can be delayed). Memory is unchanged: FSDP2 accumulates each microbatch's
// reduce-scattered gradient into the same sharded fp32 .grad (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py
// foreach_reduce: `fsdp_param.sharded_param.grad._local_tensor += new_sharded_grad` when a gradient exists; the
// unsharded gradients are freed after the reduce-scatter copy-in), and a microbatch's
// activations are freed by its backward before the next forward, so the peak is that of one microbatch.
//
// Tokens per step are ga x local_batch_size x seq_len per data-parallel rank, so tokens/s and MFU use
// ga x tokens_per_rank / step(ga). One function computes the step time for every caller (simulate(), the search's
// reports, tp-plan explain).

#include <cstdint>

#include "plans/program/program.h"
#include "sim/timeline/timeline.h"

namespace tptune {

// "grad_norm" (gradient clipping), "block.optimizer" and "optimizer": what runs once per optimizer step, not per
// microbatch.
bool is_optimizer_segment(const Segment& s);
// The two bounds on a microbatch's period (see above), microseconds.
struct MicrobatchTimes {
  double critical_us = 0;  // when the compute stream could start the next microbatch
  double dp_busy_us = 0;   // the busier DP stream's load per microbatch (dp or dp_replicate)
  double period_us() const { return critical_us > dp_busy_us ? critical_us : dp_busy_us; }
};
MicrobatchTimes microbatch_times(const Program& p, const Timeline& tl);
// microbatch_times(p, tl).period_us().
double microbatch_us(const Program& p, const Timeline& tl);
// step(1) + (ga - 1) x microbatch_us; ga 1 (or less): tl.step_time_us itself.
double accumulated_step_us(const Program& p, const Timeline& tl, int64_t gradient_accumulation_steps);

}  // namespace tptune
