#pragma once
// The NVLink domain of a cluster (`cluster.nvlink_domain_gpus`, plans/language/config.h): the one rule that the config
// reader (at the key's file:line) and the command-line overrides of the cluster's shape (--nodes, --gpus-per-node,
// tools/plan_options.h) both check. sim/cluster_spec.h says what a domain means for the cost model.
#include <fmt/format.h>

#include <cstdint>
#include <string>

namespace tptune {

// "" when `domain` GPUs (0: not set, a node is the domain) are whole nodes of `gpus_per_node` and a cluster of
// `nodes` such nodes is whole domains (or smaller than one domain); else what was expected, for an error line.
inline std::string nvlink_domain_mismatch(int domain, int nodes, int gpus_per_node) {
  if (domain <= 0) return "";
  if (domain % gpus_per_node != 0)
    return fmt::format("expected a multiple of gpus_per_node {} (an NVLink domain joins whole nodes), got {}",
                       gpus_per_node, domain);
  const int64_t world = int64_t{nodes} * gpus_per_node;
  if (world > domain && world % domain != 0)
    return fmt::format("expected a divisor of the cluster's {} GPUs ({} nodes x {}: whole NVLink domains), got {}",
                       world, nodes, gpus_per_node, domain);
  return "";
}

}  // namespace tptune
