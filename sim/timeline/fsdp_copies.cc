#include "sim/timeline/fsdp_copies.h"

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

std::string_view fsdp_copy_name(const Op& op, bool before) {
  if (const auto* col = std::get_if<CollectiveOp>(&op.kind)) {
    if (col->kind == CollectiveKind::all_gather) return before ? "fsdp.all_gather.copy_in" : "fsdp.all_gather.copy_out";
    return "fsdp.reduce_scatter.copy_in";
  }
  return before ? "fsdp.all_gather.copy_out" : "fsdp.reduce_scatter.copy_in";
}

void add_fsdp_copy_costs(const Program& p, const GpuSpec& gpu, const CostParams& c,
                         std::vector<std::vector<double>>& duration_us,
                         std::vector<std::vector<FsdpCopyShare>>* shares) {
  const double f = c.fsdp_copy_traffic_factor;
  if (f <= 0 || p.dp <= 1) {
    if (shares) shares->clear();  // none folded: an OpCosts reused across candidates keeps no earlier Program's shares
    return;
  }
  auto kernel = [&](double bytes) {
    return memory_bound_cost(bytes * f, c.memory_bound_efficiency, c.memory_bound_overhead_us, gpu).time_us;
  };
  if (shares) {  // (each segment's vector refilled: the search prices thousands of Programs into one OpCosts)
    shares->resize(duration_us.size());
    for (size_t s = 0; s < duration_us.size(); ++s) (*shares)[s].assign(duration_us[s].size(), FsdpCopyShare{});
  }
  // Adds `us` to op (s, at)'s duration, and to its share before or after its own kernel.
  auto add = [&](size_t s, size_t at, double us, bool before) {
    duration_us[s][at] += us;
    if (shares) ((*shares)[s][at].*(before ? &FsdpCopyShare::before_us : &FsdpCopyShare::after_us)) += us;
  };
  for (size_t s = 0; s < p.segments.size(); ++s) {
    const std::vector<Op>& ops = p.segments[s].ops;
    for (size_t j = 0; j < ops.size(); ++j) {
      const FsdpCopyBytes b = fsdp_copy_bytes(ops[j], p);
      if (b.copy_out > 0) {
        add(s, j, kernel(b.copy_in_shard_cast) + kernel(b.copy_in), true);
        size_t at = j;  // the first compute op reading a gathered parameter
        for (size_t k = 0; k < ops.size(); ++k)
          if (!std::holds_alternative<CollectiveOp>(ops[k].kind) && reads_any(ops[k], ops[j].outputs)) {
            at = k;
            break;
          }
        add(s, at, kernel(b.copy_out), at != j);  // on the all-gather itself: after it
      }
      if (b.reduce_scatter_pre > 0) {
        size_t at = j;  // the last compute op before it writing one of its gradients
        for (size_t k = j; k-- > 0;)
          if (!std::holds_alternative<CollectiveOp>(ops[k].kind) && writes_any(ops[k], ops[j].inputs)) {
            at = k;
            break;
          }
        add(s, at, kernel(b.reduce_scatter_pre), at == j);  // on the reduce-scatter itself: before it
      }
    }
  }
}

}  // namespace tptune
