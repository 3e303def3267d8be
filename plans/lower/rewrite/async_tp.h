#pragma once
// Async TP (micro-pipelined TP), as torch's `_micro_pipeline_tp` inductor pass and symmetric-memory ops do it:
// a rewrite of a lowered Program that
//  * replaces every TP all-gather along the sequence dim whose result only feeds matmuls by a ring of tp p2p steps,
//    each matmul split into tp chunk matmuls that consume one slot while the next slot is in flight
//    (fused_all_gather_matmul; wq/wk/wv or w1/w3 share one gathered input);
//  * replaces every TP reduce-scatter along the sequence dim whose input is produced by matmuls (and sums of
//    matmuls) by tp chunk matmuls whose partial sums travel a ring (fused_matmul_reduce_scatter).
// The chunk semantics are ChunkRef's (plans/program/program.h). Applies in forward, backward and recompute alike.
//
// float8: a matmul's scales are inputs of its chunk matmuls. Tensorwise casts before the redistribution
// (Float8ColwiseParallel), so the all-gather moves float8 data and feeds the matmuls: both sides are pipelined
// (fused_all_gather_scaled_matmul, fused_scaled_matmul_reduce_scatter). Rowwise (torchao's Float8Linear under plain
// ColwiseParallel/RowwiseParallel) gathers the bf16 input and casts it after the gather, one scale per row: the
// gathered tensor feeds the cast, not a matmul, so that all-gather stays a collective, as inductor leaves it
// (pytorch/pytorch#149990: with rowwise scales the all-gather-matmuls do not fuse); the matmul -> reduce-scatter
// side is pipelined, each chunk matmul taking its rows' scales (fused_scaled_matmul_reduce_scatter's rowwise mode,
// pytorch/pytorch#149247). torchtitan's June 2025 async TP benchmark ran float8 rowwise this way.
#include <cstddef>
#include <vector>

#include "plans/program/program.h"

namespace tptune {

void apply_async_tp(Program& p);
// The rewrite of segments [from, to) only (each segment's rewrite reads only its own ops and the tensors, and appends
// tensors: rewriting [0, k) and then [k, n) is apply_async_tp()); true when it rewrote anything. apply_async_tp()
// is this over every segment, throwing when nothing was rewritten (see there).
bool rewrite_async_tp(Program& p, size_t from, size_t to);
// The error apply_async_tp() throws when no segment had anything to rewrite.
[[noreturn]] void throw_no_async_tp(const Program& p);
// Shrinks `ops` to its first n ops (nothing when it holds no more), keeping the ops it drops, up to a bound per
// thread, for the rewrite's next copies of chunk matmuls: their dependency, input and output lists are reused instead
// of freed and allocated again. For the search, which finishes one block backward under several policies into one
// Program, each time cutting the rewritten op lists back and rewriting them again.
void drop_ops_for_reuse(std::vector<Op>& ops, size_t n);

}  // namespace tptune
