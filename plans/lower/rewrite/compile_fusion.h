#pragma once
// torch.compile's fusions of a block's memory-bound work, as a rewrite of a lowered Program (training.compile, implied
// by async TP): the kernels Inductor generates for a torchtitan Llama block (bench/inductor_fusions.py reads them;
// docs/cost-model.md lists which fusions belong to which mode). Within one segment (torchtitan compiles each block
// apart, so nothing fuses across blocks or into the head):
//  * a residual add whose sum is next read by an RMSNorm: one add_rmsnorm at the norm's place (the add removed);
//  * an RMSNorm backward whose input gradient only feeds a gradient sum with the residual's: one rmsnorm_bwd_add at
//    the norm backward's place (the sum removed);
//  * two rope ops (q and k; likewise two rope_bwd): one rope_qk at the second's place;
//  * a tensorwise float8 amax (CastFp8Op amax stage) of a tensor an elementwise op of the segment wrote: folded into
//    that op (ElementwiseOp::amax_of, the amax its last output), the amax op removed.
// Each fused op lists the eager ops it replaces in Op::fused (program.h says in what order). Fusion runs after the
// recompute ops are copied from the eager forward (selective checkpointing's choices are made on eager ops) and after
// async TP (chunked ops never fuse); ops are renumbered, deps are left to the caller (finalize them).
#include <vector>

#include "plans/program/program.h"

namespace tptune {

// Rewrites the block segments of `p` from segment `from` on (torch.compile's units are the blocks; the segments before
// `from` are fused already: the search finishes a Program into one it finished before); element i of the result says
// whether segment i changed. Idempotent.
std::vector<bool> apply_compile_fusion(Program& p, size_t from = 0);

}  // namespace tptune
