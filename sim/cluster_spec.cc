#include "sim/cluster_spec.h"

#include <fmt/format.h>

#include "plans/error.h"

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
  std::string where = cl.source.empty() ? (cfg.path + ": cluster.gpu") : (cl.source + ": cluster.gpu");
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
  ClusterSpec c = make_cluster(gpu, cl.nodes, cl.gpus_per_node);
  if (cl.intra_node) c.intra_node = *cl.intra_node;
  if (cl.inter_node) c.inter_node = *cl.inter_node;
  return c;
}

GroupLayout group_layout(const ClusterSpec& c, Group g, int tp, int dp) {
  const int gpn = c.gpus_per_node;
  if (tp < 1 || dp < 1) throw Error(fmt::format("mesh [dp {}, tp {}]: expected positive degrees", dp, tp));
  if (static_cast<int64_t>(tp) * dp > c.world_size())
    throw Error(fmt::format("mesh [dp {}, tp {}] needs {} GPUs; the cluster has {} ({} nodes x {})", dp, tp,
                            static_cast<int64_t>(tp) * dp, c.world_size(), c.nodes, gpn));
  if (gpn % tp != 0 && tp % gpn != 0)
    throw Error(
        fmt::format("tp {} and gpus_per_node {}: neither divides the other, so TP groups would straddle "
                    "node boundaries",
                    tp, gpn));
  GroupLayout l;
  if (g == Group::tp) {
    l.size = tp;
    l.per_node = tp <= gpn ? tp : gpn;
    l.nodes = tp <= gpn ? 1 : tp / gpn;
    return l;
  }
  // DP: ranks t, t + tp, t + 2tp, ...: gpn/tp of them per node when tp < gpn.
  l.size = dp;
  int members_per_node = tp < gpn ? gpn / tp : 1;
  if (dp <= members_per_node) {
    l.per_node = dp;
    l.nodes = 1;
  } else {
    l.per_node = members_per_node;
    l.nodes = (dp + members_per_node - 1) / members_per_node;
  }
  return l;
}

}  // namespace tptune
