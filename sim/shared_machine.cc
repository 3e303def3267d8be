#include "sim/shared_machine.h"

#include <variant>

namespace tptune {

ClusterSpec at_shared_rates(const ClusterSpec& cluster, const CostParams& c) {
  ClusterSpec out = cluster;
  if (cluster.gpus_per_node > 1 && c.concurrent_rank_rate != 1.0) {
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

OpCosts step_op_costs(const Program& p, const ClusterSpec& cluster, const CostParams& c, bool turns) {
  OpCosts costs = cost_ops(p, at_shared_rates(cluster, c), c);
  const double slowdown = turns ? oversubscription_slowdown(cluster, c) : 1.0;
  if (slowdown != 1.0)
    for (size_t s = 0; s < p.segments.size(); ++s)
      for (size_t i = 0; i < p.segments[s].ops.size(); ++i)
        if (!std::holds_alternative<CollectiveOp>(p.segments[s].ops[i].kind)) costs.duration_us[s][i] *= slowdown;
  return costs;
}

}  // namespace tptune
