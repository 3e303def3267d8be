#pragma once
// The cluster a Program runs on, resolved from a Config: the GPU spec (a preset or an inline map), the node count
// and shape, and the link figures (the config's intra_node / inter_node overrides, else the GPU spec's defaults).
//
// Link semantics (what the cost model assumes):
//   intra_node  NVLink through NVSwitch inside one NVLink domain: bandwidth per GPU per direction; latency = per-hop
//               latency of one ring step for large messages (NCCL's Simple protocol; small-message protocols scale
//               it, see CostParams).
//   inter_node  one NIC per GPU, between NVLink domains: bandwidth per GPU per direction; latency per hop as above.
//
// The NVLink domain is one node unless `cluster.nvlink_domain_gpus` says more (GB200 NVL72: 72 GPUs in racks of
// 4-GPU hosts): ClusterSpec::domain_gpus(). Collectives are priced on domains, not hosts: a group inside one domain
// runs on NVLink (ring, LL, NVLS with the rank curves of CostParams up to 72 ranks), one across domains is
// hierarchical over the network (sim/cost/comm_cost.h). Below, "node" in the group layouts means NVLink domain.
//
// Process groups (torchtitan's device mesh [dp_replicate, dp_shard, cp, tp], row-major, tp innermost):
//   TP group   consecutive ranks: inside one node when tp <= gpus_per_node, else tp/gpus_per_node whole nodes.
//   DP group   FSDP's group, dp_shard x cp ranks (torchtitan flattens them): ranks with stride tp, gpus_per_node/tp
//              members in each node it touches (one per node when tp >= gpus_per_node), spanning dp /
//              members-per-node nodes.
//   CP group   (context parallelism, cp > 1) cp ranks with stride tp: the first cp members of a DP group, so inside
//              one node when cp x tp <= gpus_per_node, else spanning cp / (gpus_per_node / tp) nodes.
//   replicate  (HSDP, dp_replicate > 1) ranks with stride tp x dp_shard: gpus_per_node / (tp x dp_shard) members in
//              each node when one replica is smaller than a node, else one per node (the usual HSDP layout: shard
//              inside a node or a few, replicate across nodes). When tp x dp_shard and gpus_per_node do not divide
//              one another the replicas straddle nodes unevenly; the layout is then the even approximation.

#include <string>

#include "plans/language/config.h"
#include "plans/program/program.h"
#include "sim/gpu_spec.h"

namespace tptune {

struct ClusterSpec {
  GpuSpec gpu;
  int nodes = 1;
  int gpus_per_node = 8;
  LinkSpec intra_node;  // NVLink, per GPU per direction
  LinkSpec inter_node;  // per GPU (one NIC per GPU), per direction
  // CPU ranks (the cpu device): the cores of each node, when fewer than its ranks (sim/shared_machine.h); 0: a core
  // (or a GPU) per rank.
  int cores_per_node = 0;
  // GPUs in one NVLink domain (Cluster::nvlink_domain_gpus); 0: one node.
  int nvlink_domain_gpus = 0;
  int world_size() const { return nodes * gpus_per_node; }
  int domain_gpus() const { return nvlink_domain_gpus > 0 ? nvlink_domain_gpus : gpus_per_node; }
};

// A cluster of `nodes` x `gpus_per_node` GPUs with the links' defaults from the GPU spec.
ClusterSpec make_cluster(const GpuSpec& gpu, int nodes, int gpus_per_node);
// The config's cluster: preset or inline GPU spec, then the link overrides. Errors name the config file:line of
// cluster.gpu (Cluster::source) or of the inline key.
ClusterSpec resolve_cluster(const Config& cfg);

// Where a process group's ranks sit: `per_node` GPUs in each of `nodes` NVLink domains (size = per_node * nodes).
struct GroupLayout {
  int size = 1;
  int per_node = 1;
  int nodes = 1;
  bool spans_nodes() const { return nodes > 1; }
};
// Layout of the TP (size tp), DP (size dp = dp_shard x cp), replicate (size dp_replicate) or CP (size cp) group of a
// [dp_replicate, dp_shard, cp, tp] mesh on the cluster. Throws tptune::Error when the mesh needs more GPUs than the
// cluster has, or when tp and the NVLink domain's GPUs do not divide one another (a TP group would straddle a domain).
// ep: expert parallelism's sparse mesh (plans/language/expert_parallel.h): an ep group is ep consecutive ranks, an
// efsdp group the dp x tp / ep ranks of stride ep.
GroupLayout group_layout(const ClusterSpec& c, Group g, int tp, int dp, int dp_replicate = 1, int cp = 1, int ep = 1);

}  // namespace tptune
