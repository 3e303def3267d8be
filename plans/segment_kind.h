#pragma once
// What a segment of the Program is (plans/program.h, "Structure"): the identity that the lowering, the simulator,
// the reports and the runtime match on. The name (to_string) is for printing only: the "segment" of trace and
// profile JSON, reports and error messages. A profile file names segments by it (sim/calibrate/measurements.h).

#include <cstdint>
#include <string_view>

#include "plans/enum_names.h"

namespace tptune {

// In Program order (a Program holds each kind once, except block_bwd: a plan's ac_layers splits it in two).
enum class SegmentKind : uint8_t {
  embed_fwd,        // embed.fwd: token embedding forward
  block_fwd,        // block.fwd: one block's forward, repeated per layer
  head,             // head: final norm, output projection, loss, and their backward
  block_bwd,        // block.bwd: one block's backward, repeated per layer (layers in reverse)
  embed_bwd,        // embed.bwd: embedding backward
  grad_norm,        // grad_norm: gradient norm and clip (Plan::clip_grad_norm only)
  block_optimizer,  // block.optimizer: AdamW on the block's local parameter shards, repeated per layer
  optimizer,        // optimizer: reduction of non-block gradients, AdamW on every local parameter shard
};

// SegmentKind's enumerators, in declaration order.
inline constexpr std::string_view kSegmentKindNames[] = {
    "embed.fwd", "block.fwd", "head", "block.bwd", "embed.bwd", "grad_norm", "block.optimizer", "optimizer"};
static_assert(std::size(kSegmentKindNames) == enum_count(SegmentKind::optimizer));

constexpr std::string_view to_string(SegmentKind k) { return name_of(kSegmentKindNames, k); }

// The block segments: templates repeated once per layer (is_per_layer_segment(), plans/program.h).
constexpr bool is_block(SegmentKind k) {
  return k == SegmentKind::block_fwd || k == SegmentKind::block_bwd || k == SegmentKind::block_optimizer;
}

// What runs once per optimizer step, not once per micro-batch (gradient accumulation, sim/accumulation.h).
constexpr bool is_optimizer_step(SegmentKind k) {
  return k == SegmentKind::grad_norm || k == SegmentKind::block_optimizer || k == SegmentKind::optimizer;
}

}  // namespace tptune
