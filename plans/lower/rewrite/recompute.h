#pragma once
// Activation checkpointing in the lowering: which forward ops the block backward re-runs (torchtitan's full and
// selective policies) and how each re-run op is made from its forward op. lower.cc's finishing step inserts them at
// the start of the block backward, after the block's FSDP all-gathers.
#include <cstddef>
#include <vector>

#include "plans/language/config.h"
#include "plans/program/program.h"

namespace tptune {

// An FSDP all-gather of a block's parameters (dp's, or the routed experts' on efsdp).
bool is_fsdp_gather(const Op& op);

// The indices in fwd of the forward ops to re-run, ascending, go into `out` (emptied first); recompute_op() makes
// each. Policies as recompute.cc states them.
void recompute_ops(const Segment& fwd, const Segment& bwd, ActivationCheckpointing ac, bool early_stop, bool saves_rs,
                   std::vector<size_t>& out);

// `op` (any Op: its buffers are reused) set to the recompute op of forward op `f`.
void recompute_op(const Op& f, Op& op);

}  // namespace tptune
