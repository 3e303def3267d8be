#include "sim/fsdp_copies.h"

#include <variant>

#include "sim/cost/compute_cost.h"

namespace tptune {

namespace {

bool reads_any(const Op& op, const std::vector<TensorId>& ts) {
  for (TensorId x : op.inputs)
    for (TensorId t : ts)
      if (x == t) return true;
  return false;
}

bool writes_any(const Op& op, const std::vector<TensorId>& ts) {
  for (TensorId x : op.outputs)
    for (TensorId t : ts)
      if (x == t) return true;
  return false;
}

}  // namespace

FsdpCopyBytes fsdp_copy_bytes(const Op& op, const Program& p) {
  FsdpCopyBytes b;
  auto* col = std::get_if<CollectiveOp>(&op.kind);
  if (!col || col->group != Group::dp || p.dp <= 1) return b;
  const double dp = p.dp;
  if (col->kind == CollectiveKind::all_gather) {
    double elements = 0;
    for (TensorId t : op.outputs) elements += static_cast<double>(numel(p.tensor(t).local_shape));
    const double S = static_cast<double>(col->bytes);
    b.copy_in_shard_cast = (4 * elements + S) / dp;
    b.copy_in = 2 * S / dp;
    b.copy_out = 2 * S;
  } else if (col->kind == CollectiveKind::reduce_scatter) {
    for (TensorId t : op.inputs) {
      const TensorDesc& d = p.tensor(t);
      b.reduce_scatter_pre +=
          static_cast<double>(numel(d.local_shape)) * (bytes_per_element(d.dtype) + bytes_per_element(col->dtype));
    }
  }
  return b;
}

void add_fsdp_copy_costs(const Program& p, const GpuSpec& gpu, const CostParams& c,
                         std::vector<std::vector<double>>& duration_us) {
  const double f = c.fsdp_copy_traffic_factor;
  if (f <= 0 || p.dp <= 1) return;
  auto kernel = [&](double bytes) {
    return memory_bound_cost(bytes * f, c.memory_bound_efficiency, c.memory_bound_overhead_us, gpu).time_us;
  };
  for (size_t s = 0; s < p.segments.size(); ++s) {
    const std::vector<Op>& ops = p.segments[s].ops;
    for (size_t j = 0; j < ops.size(); ++j) {
      const FsdpCopyBytes b = fsdp_copy_bytes(ops[j], p);
      if (b.copy_out > 0) {
        duration_us[s][j] += kernel(b.copy_in_shard_cast) + kernel(b.copy_in);
        size_t at = j;  // the first compute op reading a gathered parameter
        for (size_t k = 0; k < ops.size(); ++k)
          if (!std::holds_alternative<CollectiveOp>(ops[k].kind) && reads_any(ops[k], ops[j].outputs)) {
            at = k;
            break;
          }
        duration_us[s][at] += kernel(b.copy_out);
      }
      if (b.reduce_scatter_pre > 0) {
        size_t at = j;  // the last compute op before it writing one of its gradients
        for (size_t k = j; k-- > 0;)
          if (!std::holds_alternative<CollectiveOp>(ops[k].kind) && writes_any(ops[k], ops[j].inputs)) {
            at = k;
            break;
          }
        duration_us[s][at] += kernel(b.reduce_scatter_pre);
      }
    }
  }
}

}  // namespace tptune
