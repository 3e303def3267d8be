#pragma once
// Ranks that share a machine: the cpu device (`tp-run`'s CPU ranks, one MPI process per "gpu" of a node), where the
// ranks of a node share its caches, memory bandwidth and cores. GPUs have each their own (CostParams
// concurrent_rank_rate 1 and no cores_per_node: both functions are then neutral).
//
// Two terms, both fitted by `tp-plan calibrate` (sim/calibrate/fit.h), which cost_ops() (sim/timeline/timeline.h)
// applies:
//   - with more than one rank per node, each rank computes at CostParams::concurrent_rank_rate of the device's FLOP
//     and byte rates (ranks running together, against one alone);
//   - when the ranks outnumber the node's cores (ClusterSpec::cores_per_node, config `cluster.cores_per_node`), they
//     take turns: every compute op of a step takes ranks / (cores x oversubscribed_efficiency) as long, the whole op
//     (its fixed costs are core time too), while collectives keep their (measured) times. An op timed alone between
//     barriers (a profile's per-op times) runs in one scheduler slice and does not pay the turns (Timing::serialized
//     of sim/calibrate/fit.h).
// The report's MFU stays relative to the device's own peak.

#include "sim/cluster_spec.h"
#include "sim/cost/cost_params.h"

namespace tptune {

// Whether a node's ranks run below a lone rank's rates: more than one rank per node and concurrent_rank_rate != 1.
bool ranks_share_rates(const ClusterSpec& cluster, const CostParams& c);
// The cluster with each rank's compute and memory rates at concurrent_rank_rate when ranks_share_rates().
ClusterSpec at_shared_rates(const ClusterSpec& cluster, const CostParams& c);
// ranks per node / (cores_per_node x oversubscribed_efficiency) when 0 < cores_per_node < gpus_per_node, else 1:
// the factor on every compute op's duration.
double oversubscription_slowdown(const ClusterSpec& cluster, const CostParams& c);

}  // namespace tptune
