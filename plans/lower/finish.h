#pragma once
// Finishing a lowered Program (internal to plans/lower/): what depends on the activation-checkpointing policy,
// applied to the Program lower_unfinished() made (plans/lower/incremental.h has the public entry points,
// finish_lowering(), finish_lowering_into(), prepare_async_tp(), set_ac_layers()). In order: activation
// checkpointing's recompute ops at the head of each block backward (a plan's ac_layers splits the backward in two;
// a dense-first mixture of experts pairs each block variant's backward with its own forward), async TP's rewrite,
// torch.compile's fusions, and every op's deps within its segment.
#include <cstdint>

#include "plans/lower/incremental.h"
#include "plans/program/program.h"

namespace tptune::lowering {

// Finishes `prog` under `ac` in place.
// `prepared`: prepare_async_tp() was applied to prog (its forward and whether it rewrote anything).
// `ac_layers`: the plan's (Plan::ac_layers), or -1 to keep what prog.plan holds; a policy of none checkpoints no
// block (0). With 0 < ac_layers < n_layers and recompute ops, the block backward becomes two segments: the blocks
// without recompute (layers L-1 .. ac_layers, run first), then the checkpointed ones (ac_layers-1 .. 0).
// `bwd_src`: the block backward as lowered, when prog.segments[3] is not (then it holds any earlier ops, whose
// buffers are reused: the block backward is copied from bwd_src with the recompute ops in place).
void finish_in_place(Program& prog, ActivationCheckpointing ac, const UnfinishedProgram* prepared = nullptr,
                     int64_t ac_layers = -1, const Segment* bwd_src = nullptr);

// The deps of the segments finish_in_place() does not change, once for every policy (the same deps as finishing
// computes).
void prepare_deps(Program& prog);

}  // namespace tptune::lowering
