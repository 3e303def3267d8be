#pragma once
// Ring attention on CPU over MPI: causal grouped-query attention of a sequence sharded over the ranks of a
// context-parallel (CP) communicator, forward and backward, equal to kernels/cpu/attention.h on the whole sequence.
//
// It is PyTorch's ring attention (torch/distributed/tensor/experimental/_context_parallel/_attention.py):
//   forward (`_templated_ring_attention`): at step i = 0 .. cp-1 the rank holds the k/v shard of rank
//     (rank - i) mod cp, computes the block ring_step() names (runtime/ring_schedule.h) and merges its
//     (out, lse) into the running result (`_SDPAMerger`, kernels/cpu/attention_block.h's merge_partial).
//     Rotate methods (`_RotateMethod`, torchtitan's `context_parallel_rotate_method`, default allgather):
//       allgather  one all-gather of every rank's packed [k | v] at step 0 (`_AllGatherRotater`), then step i
//                  reads the shard of rank (rank - i) mod cp from the gathered buffer;
//       alltoall   at each step but the last the held [k | v] goes to rank + 1 while the next comes from
//                  rank - 1 (`_AllToAllRotater`, a permute), overlapped with that step's block.
//   backward (`_templated_ring_attention_backward`): k/v rotate again as in the forward; each step's block adds
//     its dq share locally, and its dk/dv share into a dk/dv accumulator that travels with the k/v shard: the
//     accumulator received from rank - 1 (the shard's gradient so far) plus this step's share goes to rank + 1,
//     always point to point (torch's dkv rotater is all-to-all for both methods). After cp steps every shard's
//     accumulator has visited every rank and arrives back at its owner: the returned dk, dv are the full gradients
//     of this rank's k, v.
//
// Shapes (per rank, row-major, the layout of attention.h): q, o, d_o, dq (batch, s_local, n_heads * head_dim);
// k, v, dk, dv (batch, s_local, n_kv_heads * head_dim); lse (batch, n_heads, s_local) fp32. The local rows are the
// rank's shard in `layout` (runtime/cp_layout.h: cp_shard() cuts them from the full sequence); every rank of the
// communicator passes the same shape and options. lse is returned because the backward needs it (as flash
// attention's forward returns it).
//
// Memory: allgather holds all cp k/v shards (2 x cp x kv shard); alltoall two k/v shards; the backward adds three
// dk/dv-sized buffers. Communication: MPI non-blocking calls on `cp`, one tag per step and direction; a peer that
// never answers blocks (the caller's watchdog, if any, is outside).
//
// How tp-run will use it: a CP plan's attention op runs this with the CP communicator (MPI_Comm_split of the world
// by tp rank), q/k/v the rank's sequence shard after rope at its cp_positions(); `tp-run verify` then compares the
// gathered outputs and gradients with the unsharded model as for TP. That wiring needs the CP lowering and is not
// done: tp-run refuses CP plans.
//
// Fault injection (`RingFault`, tests only): `reverse_ring` passes k/v and dk/dv to rank - 1 (the all-gather reads
// rank + i) while the schedule still assumes rank - i; `skip_block` leaves out the block of step 1 on every rank
// (forward and backward). The MPI tests show the comparison with the unsharded attention catches both.
//
// Errors: a tptune::Error for impossible shapes (non-positive sizes, n_heads not a multiple of n_kv_heads, an odd
// s_local under head_tail), for MPI_COMM_NULL and for a failed MPI call. Whether s_local x cp is the sequence the
// caller means is the caller's check (cp_local_seq()).

#include <mpi.h>

#include <cstdint>
#include <string_view>

#include "runtime/cp_layout.h"

namespace tptune {

enum class RotateMethod { allgather, alltoall };
enum class RingFault { none, reverse_ring, skip_block };

std::string_view rotate_method_name(RotateMethod method);

struct RingAttentionShape {
  int64_t batch = 0, s_local = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
};

struct RingOptions {
  RotateMethod rotate = RotateMethod::allgather;  // torchtitan's default
  SeqLayout layout = SeqLayout::head_tail;        // torch's enable_load_balance default
  RingFault fault = RingFault::none;              // tests only
};

// o and lse of this rank's query rows over the whole sequence.
void ring_attention_fwd(MPI_Comm cp, const RingAttentionShape& shape, const RingOptions& options, const float* q,
                        const float* k, const float* v, float* o, float* lse);

// dq, dk, dv of this rank's shards (written, not accumulated), given the forward's o and lse and d_o.
void ring_attention_bwd(MPI_Comm cp, const RingAttentionShape& shape, const RingOptions& options, const float* q,
                        const float* k, const float* v, const float* o, const float* lse, const float* d_o, float* dq,
                        float* dk, float* dv);

}  // namespace tptune
