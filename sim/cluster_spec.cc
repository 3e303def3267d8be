#include "sim/cluster_spec.h"

#include <fmt/format.h>

#include "plans/util/checked_math.h"
#include "plans/util/error.h"

namespace tptune {

ClusterSpec make_cluster(const GpuSpec& gpu, int nodes, int gpus_per_node) {
  ClusterSpec c;
  c.gpu = gpu;
  c.nodes = nodes;
  c.gpus_per_node = gpus_per_node;
  c.intra_node = {gpu.nvlink_bandwidth_GBps, gpu.nvlink_latency_us};
  c.inter_node = {gpu.network_bandwidth_GBps, gpu.network_latency_us};
  return c;
}

ClusterSpec resolve_cluster(const Config& cfg) {
  const Cluster& cl = cfg.cluster;
  // source "--gpu": the option replaced the key (tools/plan_options.h), and errors name the option.
  std::string where = cl.source.empty()             ? (cfg.path + ": cluster.gpu")
                      : cl.source.starts_with("--") ? cl.source
                                                    : (cl.source + ": cluster.gpu");
  GpuSpec gpu;
  if (!cl.gpu.empty()) {
    gpu = gpu_preset(cl.gpu, where);
  } else if (cl.gpu_inline && cl.gpu_inline.IsMap()) {
    gpu = parse_gpu_spec(cl.gpu_inline, cfg.path.empty() ? std::string("<config>") : cfg.path);
    if (gpu.origin.find(':') == std::string::npos && !cl.source.empty()) gpu.origin = cl.source;
  } else {
    throw Error(fmt::format("{}: expected a GPU preset name ({}) or an inline spec map", where,
                            fmt::join(gpu_preset_names(), ", ")));
  }
  if (cl.nodes < 1 || cl.gpus_per_node < 1)
    throw Error(fmt::format("{}: cluster: expected positive nodes and gpus_per_node, got {} x {}",
                            cl.source.empty() ? cfg.path : cl.source, cl.nodes, cl.gpus_per_node));
  // The SDPA kernel the training settings name must be one the device runs (the cpu device: tp-run's own kernel;
  // plans/language/backends/sdpa_backend.h): refused here, once, before anything is priced.
  resolve_sdpa_backend(cfg.training.sdpa_backend, SdpaBackend::auto_, cfg.training.torch_version, gpu.architecture,
                       cfg.training.sdpa_backend_at);
  ClusterSpec c = make_cluster(gpu, cl.nodes, cl.gpus_per_node);
  if (cl.intra_node) c.intra_node = *cl.intra_node;
  if (cl.inter_node) c.inter_node = *cl.inter_node;
  c.cores_per_node = cl.cores_per_node;
  c.nvlink_domain_gpus = cl.nvlink_domain_gpus;
  return c;
}

GroupLayout group_layout(const ClusterSpec& c, Group g, int tp, int dp, int dp_replicate, int cp, int ep) {
  const int gpn = c.domain_gpus();  // "node" below: the NVLink domain
  if (tp < 1 || dp < 1 || dp_replicate < 1)
    throw Error(fmt::format("mesh [dp_replicate {}, dp {}, tp {}]: expected positive degrees", dp_replicate, dp, tp));
  const int64_t shard_ranks = static_cast<int64_t>(tp) * dp;  // one replica: at most 2^40, no overflow
  if (dp_replicate == 1 && shard_ranks > c.world_size())
    throw Error(fmt::format("mesh [dp {}, tp {}] needs {} GPUs; the cluster has {} ({} nodes x {})", dp, tp,
                            shard_ranks, c.world_size(), c.nodes, gpn));
  if (dp_replicate > 1 && checked_mul(shard_ranks, dp_replicate, "mesh size") > c.world_size())
    throw Error(fmt::format("mesh [dp_replicate {}, dp {}, tp {}] needs {} GPUs; the cluster has {} ({} nodes x {})",
                            dp_replicate, dp, tp, shard_ranks * dp_replicate, c.world_size(), c.nodes, gpn));
  if (gpn % tp != 0 && tp % gpn != 0)
    throw Error(c.nvlink_domain_gpus > 0
                    ? fmt::format("tp {} and nvlink_domain_gpus {}: neither divides the other, so TP groups would "
                                  "straddle NVLink domains",
                                  tp, gpn)
                    : fmt::format("tp {} and gpus_per_node {}: neither divides the other, so TP groups would straddle "
                                  "node boundaries",
                                  tp, gpn));
  if (g == Group::pp)  // its hops are the pipeline step's (sim/pipeline/step.h), on the whole cluster
    throw Error("the pipeline group's layout is the pipeline step's: a pp rank's mesh has no pp group");
  GroupLayout l;
  if (g == Group::ep || g == Group::efsdp) {
    if (ep < 1 || shard_ranks % ep != 0)
      throw Error(
          fmt::format("mesh [dp {}, tp {}]: ep {} must divide dp x tp (the sparse mesh's efsdp x ep)", dp, tp, ep));
    const int64_t size = g == Group::ep ? ep : shard_ranks / ep, stride = g == Group::ep ? 1 : ep;
    const int64_t per_node = stride < gpn ? std::min<int64_t>(size, gpn / stride) : 1;
    l.size = static_cast<int>(size);
    l.per_node = static_cast<int>(per_node);
    l.nodes = static_cast<int>((size + per_node - 1) / per_node);
    return l;
  }
  if (g == Group::tp) {
    l.size = tp;
    l.per_node = tp <= gpn ? tp : gpn;
    l.nodes = tp <= gpn ? 1 : tp / gpn;
    return l;
  }
  // DP: ranks t, t + tp, t + 2tp, ...: gpn/tp of them per node when tp < gpn. Replicate (HSDP): ranks with stride
  // tp x dp (one replica's ranks), so gpn / (tp x dp) per node when a replica is smaller than a node, else one per
  // node: typically one GPU in each of dp_replicate nodes, the NIC-bound inter-node all-reduce.
  // CP: ranks t, t + tp, ..., cp of them (the innermost cp ranks of the FSDP group dp, whose members are stride tp).
  if (g == Group::cp && (cp < 1 || dp % cp != 0))
    throw Error(fmt::format("mesh [dp {}, cp {}, tp {}]: cp must divide FSDP's dp_shard x cp group", dp, cp, tp));
  const int64_t stride = g == Group::dp || g == Group::cp ? tp : shard_ranks;
  l.size = g == Group::dp ? dp : g == Group::cp ? cp : dp_replicate;
  const int members_per_node = stride < gpn ? static_cast<int>(gpn / stride) : 1;
  if (l.size <= members_per_node) {
    l.per_node = l.size;
    l.nodes = 1;
  } else {
    l.per_node = members_per_node;
    l.nodes = (l.size + members_per_node - 1) / members_per_node;
  }
  return l;
}

}  // namespace tptune
