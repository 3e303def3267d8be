#pragma once
// FSDP2's copy kernels around its collectives, priced as memory-bound kernels on the stream that runs them
// (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py):
//
//   all-gather copy-in   foreach_all_gather, on all_gather_copy_in_stream (the all-gather stream waits for it):
//                        _get_param_all_gather_inputs' _foreach_copy_ of the fp32 shards into a flat param_dtype
//                        buffer, then all_gather_copy_in's _foreach_copy_ into the all-gather input. Per rank, E
//                        gathered elements of S bytes: read 4E/dp + write S/dp, read + write S/dp. Added to the
//                        all-gather's duration (it holds the DP stream just before the all-gather).
//   all-gather copy-out  foreach_all_gather_copy_out, on the current (compute) stream after it waits for the
//                        all-gather: split_with_sizes_copy of the all-gather output into the unsharded parameters,
//                        read + write S. Added to the first compute op of the segment that reads a gathered
//                        parameter (the kernel runs just before it), or to the all-gather when none does.
//   reduce-scatter pre   foreach_reduce, on the current (compute) stream before reduce_scatter_stream.wait_stream:
//                        chunk_cat of the unsharded gradients (their dtype) into the reduce-scatter input in
//                        reduce_dtype (fp32): read + write per gradient element. Added to the last compute op of
//                        the segment before the reduce-scatter that writes one of its gradients, or to the
//                        reduce-scatter when none does.
//   reduce-scatter post  none: with reduce_dtype fp32, the fp32 master parameters' dtype, _to_dtype_if_needed is a
//                        no-op and the sharded gradients are torch.as_strided views of the reduce-scatter output; NCCL
//                        averages (ReduceOp.AVG), so _div_if_needed divides nothing. (With gradient accumulation the
//                        `+=` into the existing gradient is not priced.)
//
// Each copy is one kernel of memory_bound_cost() at memory_bound_efficiency, its bytes times
// CostParams::fsdp_copy_traffic_factor; a factor of 0 leaves the durations as they are (the cpu device: tp-run's
// collectives read and write the tensors in place).

#include <string_view>

#include "plans/program/program.h"
#include "sim/cost/cost_params.h"
#include "sim/gpu_spec.h"

namespace tptune {

// The part of one op's duration that is the copies above, run on its stream just before (`before_us`) or just after
// (`after_us`) the op's own kernel. Which copy each is follows from the op (fsdp_copy_name()):
//   a compute op          before: the copy-out of the parameters it is the first to read; after: the reduce-scatter
//                         input (chunk_cat) of the gradients it is the last to write
//   a DP all-gather       before: its copy-in; after: its copy-out when no compute op of the segment reads a gathered
//                         parameter
//   a DP reduce-scatter   before: its chunk_cat when no compute op of the segment writes one of its gradients
// The step is scheduled with the whole duration (the copies hold the stream as the op does); the trace, the HTML
// timeline and the top ops show each copy as a slice of its own, so that an op's own time is its kernel's.
struct FsdpCopyShare {
  double before_us = 0, after_us = 0;
};
// The copy's slice name ("fsdp.all_gather.copy_in", "fsdp.all_gather.copy_out", "fsdp.reduce_scatter.copy_in").
std::string_view fsdp_copy_name(const Op& op, bool before);

// Adds the copies above to `duration_us` ([segment][op], cost_ops()' durations of `p`); with `shares`, also records
// each op's part ([segment][op], sized like duration_us; left empty when no copy is priced).
void add_fsdp_copy_costs(const Program& p, const GpuSpec& gpu, const CostParams& c,
                         std::vector<std::vector<double>>& duration_us,
                         std::vector<std::vector<FsdpCopyShare>>* shares = nullptr);

// The bytes each copy moves for one DP collective op (0 for any other op): copy_in / copy_out of an all-gather,
// reduce_scatter_pre of a reduce-scatter, before fsdp_copy_traffic_factor.
struct FsdpCopyBytes {
  double copy_in_shard_cast = 0;  // fp32 shards -> flat param_dtype buffer
  double copy_in = 0;             // flat buffer -> all-gather input
  double copy_out = 0;            // all-gather output -> unsharded parameters
  double reduce_scatter_pre = 0;  // gradients -> fp32 reduce-scatter input
};
FsdpCopyBytes fsdp_copy_bytes(const Op& op, const Program& p);

}  // namespace tptune
