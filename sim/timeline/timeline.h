#pragma once
// The timeline of one training step on one rank: every op of the Program placed on a stream, honouring its
// dependencies, so that overlap is computed rather than assumed.
//
// Streams. Compute ops run on the compute stream in Program order. TP collectives (and async-TP p2p steps) run in
// order on the TP communication stream, DP (FSDP) collectives in order on the DP stream (HSDP's replicate all-reduces
// on a fourth, see Stream), so that a collective
// overlaps whatever compute does not depend on it: TP collectives block only their consumers, FSDP all-gathers are
// prefetched, gradient reduce-scatters drain behind the backward. An op starts when its stream is free and its
// dependencies have finished.
// On a device whose collectives cannot run while the rank computes (CostParams::comm_overlaps_compute 0: CPU ranks,
// where MPI progresses only inside MPI calls), collectives are scheduled on the compute stream in Program order, and
// their whole duration counts as exposed communication of their group (busy_us still counts them on their own
// stream).
//
// Issue order. A stream runs its ops in the order the training loop issues them, which is Program order except for
// FSDP prefetch: an instance's parameter all-gather (a DP all-gather with no inputs and no dependencies) is issued
// by the instance before it, right after that instance's first compute op starts (FSDP2 issues the next block's
// all-gather when the current block begins, forward and backward), and may not start earlier. So in backward the
// next block's all-gather goes ahead of the current block's gradient reduce-scatter on the DP stream, as with one
// NCCL stream per process group. We call an instance's own ops plus the all-gathers it issues for the next one a
// unit.
//
// Dependencies are expand()'s (plans/program/program.h): an op's `deps` inside its segment instance, plus, for every
// input and output with no earlier writer in the instance, the last writer of that tensor before the instance (layer
// chains aliasing a layer's input to the previous layer's output).
//
// Fast path. Block segments repeat per layer; schedule() simulates units one by one until a unit is the previous
// one shifted by a constant period and no op of either was held back by a value from outside the segment; later
// units are that one shifted, after checking that every outside value they read is ready before the shifted start
// (otherwise they are simulated too), except the segment's last unit, which issues the next segment's all-gathers
// and is simulated again. The result equals the fully expanded schedule (schedule_expanded(), the reference, which
// the tests compare against).
//
// Times are microseconds from the start of the step.

#include <cstdint>
#include <memory>
#include <vector>

#include "plans/program/program.h"
#include "sim/cluster_spec.h"
#include "sim/cost/cost_params.h"
#include "sim/timeline/fsdp_copies.h"

namespace tptune {

// dp_replicate: HSDP's gradient all-reduces. FSDP2 gives them their own stream (FSDPCommContext.lazy_init in
// torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py: "Run the HSDP all-reduces concurrently with
// all-gather/reduce-scatter since collectives use different network resources and can overlap in the typical
// intra-node sharding / inter-node replication case"); each waits for its reduce-scatter (foreach_reduce:
// all_reduce_stream.wait_stream(reduce_scatter_stream)), which is its dataflow dependency here, and the optimizer
// waits for it. Bandwidth shared by streams that overlap is not modelled (as for TP and DP).
// cp: ring attention's K/V (and dK/dV) transfers of context parallelism, on the cp process group's own NCCL stream
// (torch's functional collectives run per process group); their time counts as exposed TP communication (both move
// activations inside a block).
// ep: a mixture of experts' token-count, dispatch and combine all-to-alls, on the ep process group's own NCCL stream;
// their exposed time counts as TP's too (activations inside a block). The experts' FSDP collectives (efsdp) run on
// the dp stream, as FSDP2 issues every fully_shard group's all-gathers and reduce-scatters on its own two streams.
enum class Stream : uint8_t { compute = 0, tp = 1, dp = 2, dp_replicate = 3, cp = 4, ep = 5 };
constexpr int kStreams = 6;
std::string_view to_string(Stream s);
Stream stream_of(const Op& op);

// Per-op durations of a Program on a cluster, [segment][op]. Computing them is the costly part of a simulation;
// a caller that schedules the same Program again (other CostParams' schedule fields, or a trace) can keep them.
struct OpCosts {
  std::vector<std::vector<double>> duration_us;
  // The host's time to issue one instance of each segment's ops (dispatch_us(), [segment]), and every op of the step
  // once (over every instance): no step is shorter (the search's bound, sim/search/bound.h). Empty and 0 where not
  // computed (hand-set costs).
  std::vector<double> segment_dispatch_us;
  double host_dispatch_us = 0;
  // The forward and backward replay a CUDA graph (replays_cuda_graph(), sim/cost/compute_cost.h): their ops cost the
  // host nothing to issue (dispatch_us()).
  bool cuda_graph = false;
  // Of duration_us, FSDP2's copy kernels folded into an op (sim/timeline/fsdp_copies.h), [segment][op]; empty when none
  // is priced. What the trace, the HTML timeline and the top ops show as slices of their own (fsdp_copy_share()).
  std::vector<std::vector<FsdpCopyShare>> fsdp_copies;
};
// Op (s, j)'s FSDP copies (zero when OpCosts has none).
inline FsdpCopyShare fsdp_copy_share(const OpCosts& c, size_t s, size_t j) {
  return s < c.fsdp_copies.size() && j < c.fsdp_copies[s].size() ? c.fsdp_copies[s][j] : FsdpCopyShare{};
}
// Ranks sharing a machine (the cpu device) are priced as sim/shared_machine.h says: at the shared rates, and compute
// ops slowed by the turns of ranks outnumbering the cores (GPUs: neither). Throws tptune::Error for float8 on a GPU
// without it, or a mesh that does not fit the cluster.
OpCosts cost_ops(const Program& p, const ClusterSpec& cluster, const CostParams& c);
// cost_ops() into `out`, whatever it held, reusing its buffers (the search prices thousands of Programs).
void cost_ops(const Program& p, const ClusterSpec& cluster, const CostParams& c, OpCosts& out);
// Duration of one op on `cluster` as given (collectives on their group's layout for the Program's tp x dp mesh):
// cost_ops() prices each op with it, on at_shared_rates(cluster), times oversubscription_slowdown() for compute ops.
double op_duration_us(const Op& op, const Program& p, const ClusterSpec& cluster, const CostParams& c);
// One op as cost_ops() prices it: op_duration_us() on `priced` (at_shared_rates() of the cluster), times
// `compute_slowdown` (oversubscription_slowdown()) unless the op is a collective. For callers that keep their own
// per-op cache (the search's memo).
double priced_op_duration_us(const Op& op, const Program& p, const ClusterSpec& priced, double compute_slowdown,
                             const CostParams& c);

// What held an op back (the last constraint to be met before it started).
// host: the host had not issued it yet (CostParams::eager_dispatch_us / compiled_dispatch_us).
enum class Wait : uint8_t { none, stream, compute, tp, dp, issue, dp_replicate, host, cp, ep };

// FSDP parameter all-gathers that the previous instance issues (see "Issue order").
bool is_prefetched(const Op& op);

struct OpTime {
  double start = 0, end = 0;
  Wait wait = Wait::none;
};

// The compute-stream accounting of one segment instance: busy time, and idle time on the compute stream charged to
// the communication stream that held the next compute op back (exposed communication).
struct InstanceStats {
  double compute_us = 0;     // kernels (stretched by contention) and waits for the host: contention_us + host_wait_us
  double contention_us = 0;  // compute time added by collectives running beside it
  double host_wait_us = 0;   // compute stream idle until the host issued its next kernel
  double exposed_tp_us = 0;  // TP, CP and EP streams
  double exposed_dp_us = 0;  // DP and DP-replicate (HSDP) streams
  double span_us = 0;  // compute-stream wall time: from the compute stream's free time before the instance to after it
  double first_compute_start = 0;  // when the unit issues the next instance's prefetched all-gathers
  bool held_by_outside = false;    // some op started at a value written outside the segment
};

struct SegmentTimes {
  int instances = 1;                 // L for block segments (expand()'s rule), else 1
  int ops = 0;                       // ops per instance
  std::vector<char> prefetched;      // [op] issued by the previous unit (is_prefetched)
  std::vector<OpTime> rows;          // [instance][op] of the explicit instances
  std::vector<InstanceStats> stats;  // [instance] of the explicit units
  // Steady state: when steady_from = k >= 0, instances k < i < instances-1 are instance k shifted by (i - k) x
  // period (prefetched ops: instance k+1 shifted by (i - k - 1) x period, for every i > k + 1), and the last
  // instance's own ops are `tail` (simulated again: it issues the next segment's all-gathers).
  int steady_from = -1;
  double period_us = 0;
  std::vector<OpTime> tail;
  InstanceStats tail_stats;

  OpTime time(int instance, int op) const;
  const InstanceStats& instance_stats(int instance) const;  // extrapolated units share the steady one's
  double shift(int instance) const;                         // of instance_stats(instance)'s times
};

// (Inline: the scheduler asks for a time at every dependency and outside value of every op it schedules.)
inline OpTime SegmentTimes::time(int instance, int op) const {
  const size_t n = static_cast<size_t>(ops);
  if (steady_from < 0) return rows[static_cast<size_t>(instance) * n + static_cast<size_t>(op)];
  const bool pf = prefetched[static_cast<size_t>(op)] != 0;
  const int ref = pf ? steady_from + 1 : steady_from;
  if (instance <= ref) return rows[static_cast<size_t>(instance) * n + static_cast<size_t>(op)];
  if (!pf && instance == instances - 1) return tail[static_cast<size_t>(op)];
  OpTime t = rows[static_cast<size_t>(ref) * n + static_cast<size_t>(op)];
  const double d = (instance - ref) * period_us;
  t.start += d;
  t.end += d;
  return t;
}

inline const InstanceStats& SegmentTimes::instance_stats(int instance) const {
  if (steady_from < 0 || instance <= steady_from) return stats[static_cast<size_t>(instance)];
  if (instance == instances - 1) return tail_stats;
  return stats[static_cast<size_t>(steady_from)];
}

struct Timeline {
  std::vector<SegmentTimes> segments;  // parallel to Program::segments
  double step_time_us = 0;
  bool comm_overlaps_compute = true;  // CostParams::comm_overlaps_compute it was scheduled with
  // Totals over the step (sum over all instances): compute-stream time (kernels, stretched by contention, and waits
  // for the host) and exposed communication; of compute_us, what contention added and the waits for the host.
  double compute_us = 0, exposed_tp_us = 0, exposed_dp_us = 0;
  double contention_us = 0, host_wait_us = 0;
  // Busy time per stream over the step.
  double busy_us[kStreams] = {};
};

// The fast schedule (see above).
Timeline schedule(const Program& p, const OpCosts& costs, const CostParams& c);
// What schedule() derives from a Program's structure alone (its dataflow, each op's stream, dependencies and place in
// its unit, the last writer of each value read from outside its segment instance), kept from one call to the next:
// a caller that schedules Programs of one structure in turn (the search: one structure and policy at every local
// batch size) builds it once. Each call checks that the Program has a kept structure (every tensor id, dependency,
// segment and op kind compared), else builds it anew; the Timeline is the same either way. It keeps the kMaxKept
// structures used last: the search comes back to a structure after others (the policies of one structure, then the
// async-TP sibling's; a structure's batch sizes after its policies), and a rebuilt one asks Dataflow anew for every
// writer the kept one remembers. One cache per thread.
struct ScheduleStructure;
class ScheduleCache {
 public:
  ScheduleCache();
  ~ScheduleCache();
  ScheduleCache(ScheduleCache&&) noexcept;
  ScheduleCache& operator=(ScheduleCache&&) noexcept;
  size_t hits = 0, misses = 0;  // calls that found the structure kept, and calls that built it
  static constexpr size_t kMaxKept = 32;

 private:
  friend Timeline schedule(const Program& p, const OpCosts& costs, const CostParams& c, ScheduleCache& cache);
  std::vector<std::unique_ptr<ScheduleStructure>> kept_;  // the structures kept, the one used last first
  std::vector<int64_t> words_;                            // scratch: the scheduled Program's structure_words()
};
Timeline schedule(const Program& p, const OpCosts& costs, const CostParams& c, ScheduleCache& cache);
// The reference: every instance of every segment simulated, deps taken from expand(p).
Timeline schedule_expanded(const Program& p, const OpCosts& costs, const CostParams& c);

// is_per_layer_segment(), segment_instances() and instance_layer(): plans/program/program.h.

}  // namespace tptune
