#pragma once
// What a segment of the Program is (plans/program/program.h, "Structure"): the identity that the lowering, the
// simulator, the reports and the runtime match on. The name (to_string) is for printing only: the "segment" of trace
// and profile JSON, reports and error messages. A profile file names segments by it (sim/calibrate/measurements.h).

#include <cstdint>
#include <string_view>

#include "plans/util/enum_names.h"

namespace tptune {

// In Program order (a Program holds each kind once, except block_bwd: a plan's ac_layers splits it in two; and a
// dense-first mixture of experts holds block_fwd, block_bwd and block_optimizer once per block variant,
// plans/program/program.h "Structure"). The pp_*
// kinds are a pipeline stage's transfers (plans/lower/rewrite/pipeline_stage.h), named after torch's PipelineStage ops
// (get_fwd_recv_ops, get_fwd_send_ops, get_bwd_recv_ops, get_bwd_send_ops); a Program of the whole model has none.
enum class SegmentKind : uint8_t {
  pp_recv_fwd,      // pp.recv_fwd: receive the stage's input activation from the previous stage
  embed_fwd,        // embed.fwd: token embedding forward
  block_fwd,        // block.fwd: one block's forward, repeated per layer
  pp_send_fwd,      // pp.send_fwd: send the stage's output activation to the next stage
  head,             // head: final norm, output projection, loss, and their backward
  pp_recv_bwd,      // pp.recv_bwd: receive the gradient of the stage's output from the next stage
  block_bwd,        // block.bwd: one block's backward, repeated per layer (layers in reverse)
  pp_send_bwd,      // pp.send_bwd: send the gradient of the stage's input to the previous stage
  embed_bwd,        // embed.bwd: embedding backward
  grad_norm,        // grad_norm: gradient norm and clip (Plan::clip_grad_norm only)
  block_optimizer,  // block.optimizer: AdamW on the block's local parameter shards, repeated per layer
  optimizer,        // optimizer: reduction of non-block gradients, AdamW on every local parameter shard
};

// SegmentKind's enumerators, in declaration order.
inline constexpr std::string_view kSegmentKindNames[] = {"pp.recv_fwd", "embed.fwd",   "block.fwd",       "pp.send_fwd",
                                                         "head",        "pp.recv_bwd", "block.bwd",       "pp.send_bwd",
                                                         "embed.bwd",   "grad_norm",   "block.optimizer", "optimizer"};
static_assert(std::size(kSegmentKindNames) == enum_count(SegmentKind::optimizer));

constexpr std::string_view to_string(SegmentKind k) { return name_of(kSegmentKindNames, k); }

// The block segments: templates repeated once per layer (is_per_layer_segment(), plans/program/program.h).
constexpr bool is_block(SegmentKind k) {
  return k == SegmentKind::block_fwd || k == SegmentKind::block_bwd || k == SegmentKind::block_optimizer;
}

// A pipeline stage's transfer to or from its neighbour.
constexpr bool is_pipeline_transfer(SegmentKind k) {
  return k == SegmentKind::pp_recv_fwd || k == SegmentKind::pp_send_fwd || k == SegmentKind::pp_recv_bwd ||
         k == SegmentKind::pp_send_bwd;
}

// What runs once per optimizer step, not once per micro-batch (gradient accumulation, sim/accumulation.h).
constexpr bool is_optimizer_step(SegmentKind k) {
  return k == SegmentKind::grad_norm || k == SegmentKind::block_optimizer || k == SegmentKind::optimizer;
}

}  // namespace tptune
