#include "sim/shared_machine.h"

namespace tptune {

bool ranks_share_rates(const ClusterSpec& cluster, const CostParams& c) {
  return cluster.gpus_per_node > 1 && c.concurrent_rank_rate != 1.0;
}

ClusterSpec at_shared_rates(const ClusterSpec& cluster, const CostParams& c) {
  ClusterSpec out = cluster;
  if (ranks_share_rates(cluster, c)) {
    GpuSpec& d = out.gpu;
    for (double* f : {&d.bf16_tflops, &d.fp16_tflops, &d.fp8_tflops, &d.fp32_tflops, &d.hbm_bandwidth_GBps})
      *f *= c.concurrent_rank_rate;
  }
  return out;
}

double oversubscription_slowdown(const ClusterSpec& cluster, const CostParams& c) {
  if (cluster.cores_per_node <= 0 || cluster.cores_per_node >= cluster.gpus_per_node) return 1.0;
  return cluster.gpus_per_node / (cluster.cores_per_node * c.oversubscribed_efficiency);
}

}  // namespace tptune
