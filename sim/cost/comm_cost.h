#pragma once
// Communication cost of one collective on its process group: NCCL-style alpha-beta.
//
// Sizes follow nccl-tests: `bytes` is the full (unsharded) tensor, S. The bus-bandwidth factors are defined once,
// in bus_factor() (plans/program/bus_bandwidth.h): all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n;
// p2p 1. A collective that moves S at bus bandwidth B takes S x bus_factor / B, plus its latency.
//
// Inside one node (NVLink through NVSwitch, link bandwidth W per GPU per direction, per-hop latency h):
//   ring (Simple)  simple_base + steps x h + S x factor / (W x ring_busbw_efficiency(n))
//   ring (LL)      ll_base + steps x h x ll_hop_latency_ratio + S x factor / (W x ring_eff x ll_bandwidth_fraction)
//   NVLS           (all-reduce, GPUs with NVLink SHARP) nvls_latency + S x factor / (W x nvls_busbw_efficiency(n))
//   steps: 2(n-1) for all-reduce, n-1 for all-gather / reduce-scatter; the fastest algorithm/protocol is taken, as
//   NCCL's tuner does.
// Across nodes (p GPUs in each of m nodes, one NIC per GPU of bandwidth N): hierarchical, so bounded by the per-GPU
// inter-node bandwidth:
//   all-reduce      reduce-scatter in the node (S over p) + all-reduce across nodes (S/p over m: ring or tree,
//                   the faster) + all-gather in the node (S over p)
//   all-gather      all-gather across nodes (S/p over m) + all-gather in the node (S over p)
//   reduce-scatter  reduce-scatter in the node (S over p) + reduce-scatter across nodes (S/p over m)
//   all-to-all      each GPU's S/n buffer: (n-p)/n of it over the NIC, (p-1)/n over NVLink, concurrently
//   inter-node ring steps cost the network latency; tree all-reduce 2 x ceil(log2 m) hops.
// p2p (async TP ring steps): p2p_latency + S / (link x p2p_bandwidth_efficiency), the link being the NIC when the
// group spans nodes (its ring crosses them). Group size 1, or 0 bytes: no time.
// Calibrated: a CostParams::measured_collectives entry for (kind, group size) of an intra-node group replaces all
// of the above: the measured curve (MeasuredCollective::time_us) times CostParams::collective_step_factor
// (algorithm "measured").
// Times are microseconds.

#include "plans/language/placement.h"
#include "plans/program/bus_bandwidth.h"
#include "sim/cluster_spec.h"
#include "sim/cost/cost_params.h"

namespace tptune {

// bus_factor(kind, n): nccl-tests' bus-bandwidth factor, defined in plans/program/bus_bandwidth.h.
// Ring steps of a collective over n ranks: 2(n-1) for all-reduce, n-1 for all-gather / reduce-scatter /
// all-to-all, 1 for p2p.
int ring_steps(CollectiveKind k, int n);

// Which algorithm the model picked (for reports and tests).
enum class CommAlgorithm { none, ring, ring_ll, nvls, tree, hierarchical, direct, measured };
std::string_view to_string(CommAlgorithm a);

struct CommEstimate {
  double time_us = 0;
  CommAlgorithm algorithm = CommAlgorithm::none;
  double busbw_GBps = 0;  // S x bus_factor / time: what nccl-tests would print
};

CommEstimate collective_cost(CollectiveKind kind, int64_t bytes, const GroupLayout& group, const ClusterSpec& cluster,
                             const CostParams& c);

}  // namespace tptune
