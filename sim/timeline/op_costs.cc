// What each op costs and which stream it runs on (declared in sim/timeline/timeline.h): the durations the scheduler
// places.
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <variant>

#include "plans/util/enum_names.h"
#include "plans/util/error.h"
#include "sim/cost/comm_cost.h"
#include "sim/cost/compute_cost.h"
#include "sim/shared_machine.h"
#include "sim/timeline/fsdp_copies.h"
#include "sim/timeline/timeline.h"

namespace tptune {

// Stream's enumerators, in declaration order.
constexpr std::string_view kStreamNames[] = {"compute",           "tp comm", "dp comm",
                                             "dp_replicate comm", "cp comm", "ep comm"};
static_assert(std::size(kStreamNames) == enum_count(Stream::ep));

std::string_view to_string(Stream s) { return name_of(kStreamNames, s); }

// The stream each group's collectives run on, by Group's value (plans/program/program.h): FSDP's two groups (dp, and
// the routed experts' efsdp) share the dp stream. pp has none: a stage Program's transfers are priced by the
// pipeline's step between its stages (sim/pipeline/step.h); the timeline schedules the whole model's microbatch
// Program, which has none.
constexpr std::optional<Stream> kStreamOfGroup[] = {
    Stream::tp, Stream::dp, Stream::dp_replicate, Stream::cp, std::nullopt, Stream::ep, Stream::dp};
static_assert(std::size(kStreamOfGroup) == enum_count(Group::efsdp) && !kStreamOfGroup[static_cast<int>(Group::pp)]);

Stream stream_of(const Op& op) {
  const auto* c = std::get_if<CollectiveOp>(&op.kind);
  if (!c) return Stream::compute;
  const std::optional<Stream> s = kStreamOfGroup[static_cast<size_t>(c->group)];
  if (!s) throw Error(fmt::format("{}: the timeline does not schedule a pipeline stage's transfers", op.name));
  return *s;
}

double op_duration_us(const Op& op, const Program& p, const ClusterSpec& cluster, const CostParams& c) {
  if (auto* col = std::get_if<CollectiveOp>(&op.kind)) {
    GroupLayout g = group_layout(cluster, col->group, p.tp, p.dp, p.dp_replicate, p.cp, p.ep);
    return collective_cost(col->kind, stored_bytes(col->bytes, col->dtype, c), g, cluster, c).time_us;
  }
  return compute_cost(op, p, cluster.gpu, c).time_us;
}

double priced_op_duration_us(const Op& op, const Program& p, const ClusterSpec& priced, double compute_slowdown,
                             const CostParams& c) {
  return op_duration_us(op, p, priced, c) * (std::holds_alternative<CollectiveOp>(op.kind) ? 1.0 : compute_slowdown);
}

OpCosts cost_ops(const Program& p, const ClusterSpec& cluster, const CostParams& c) {
  OpCosts out;
  cost_ops(p, cluster, c, out);
  return out;
}

void cost_ops(const Program& p, const ClusterSpec& cluster_as_given, const CostParams& c, OpCosts& out) {
  std::optional<ClusterSpec> shared;  // a copy only for ranks sharing a machine (the cpu device)
  if (ranks_share_rates(cluster_as_given, c)) shared = at_shared_rates(cluster_as_given, c);
  const ClusterSpec& cluster = shared ? *shared : cluster_as_given;
  const double slowdown = oversubscription_slowdown(cluster_as_given, c);
  out.duration_us.resize(p.segments.size());  // (each segment's vector is refilled: its buffer is reused)
  out.segment_dispatch_us.clear();
  out.host_dispatch_us = 0;
  out.cuda_graph = replays_cuda_graph(p, cluster_as_given.gpu);
  // Compute costs depend on the op. A GEMM's on its GemmOp alone (and the Program's float8 recipe, compute_cost()):
  // async TP's chunks and recompute ops repeat GEMMs of one shape, each priced once here (the distinct shapes are few:
  // a linear search).
  // (per thread, its buffer kept: growing a fresh one cost more in the allocator than the pricing it saves)
  thread_local std::vector<std::pair<GemmOp, double>> gemms;
  gemms.clear();
  auto same_gemm = [](const GemmOp& a, const GemmOp& b) {
    return a.m == b.m && a.n == b.n && a.k == b.k && a.a_dtype == b.a_dtype && a.b_dtype == b.b_dtype &&
           a.c_dtype == b.c_dtype && a.trans_a == b.trans_a && a.trans_b == b.trans_b && a.accumulate == b.accumulate &&
           a.groups == b.groups;
  };
  // A collective's on what op_duration_us() reads of it: kind, group, bytes and dtype (the rest is the Program's mesh
  // and the cluster, the same for every op here). Every block repeats its collectives: priced once each likewise.
  thread_local std::vector<std::pair<CollectiveOp, double>> collectives;
  collectives.clear();
  auto same_collective = [](const CollectiveOp& a, const CollectiveOp& b) {
    return a.bytes == b.bytes && a.kind == b.kind && a.group == b.group && a.dtype == b.dtype;
  };
  for (size_t si = 0; si < p.segments.size(); ++si) {
    const Segment& s = p.segments[si];
    std::vector<double>& d = out.duration_us[si];
    d.clear();
    d.reserve(s.ops.size());
    for (const Op& op : s.ops) {
      if (const CollectiveOp* col = std::get_if<CollectiveOp>(&op.kind)) {
        auto it = std::find_if(collectives.begin(), collectives.end(),
                               [&](const auto& e) { return same_collective(e.first, *col); });
        if (it == collectives.end()) {
          collectives.emplace_back(*col, priced_op_duration_us(op, p, cluster, slowdown, c));
          it = collectives.end() - 1;
        }
        d.push_back(it->second);
        continue;
      }
      const GemmOp* g = std::get_if<GemmOp>(&op.kind);
      if (!g) {
        d.push_back(priced_op_duration_us(op, p, cluster, slowdown, c));
        continue;
      }
      auto it = std::find_if(gemms.begin(), gemms.end(), [&](const auto& e) { return same_gemm(e.first, *g); });
      if (it == gemms.end()) {
        gemms.emplace_back(*g, priced_op_duration_us(op, p, cluster, slowdown, c));
        it = gemms.end() - 1;
      }
      d.push_back(it->second);
    }
  }
  add_fsdp_copy_costs(p, cluster.gpu, c, out.duration_us, &out.fsdp_copies);
  thread_local std::vector<double> dispatch;  // every op's dispatch_us() (its buffer kept)
  dispatch.clear();
  append_dispatch_us(p, c, out.cuda_graph, dispatch);
  size_t g = 0;
  for (const Segment& s : p.segments) {
    double per_instance = 0;
    for (size_t j = 0; j < s.ops.size(); ++j) per_instance += dispatch[g++];
    out.segment_dispatch_us.push_back(per_instance);
    out.host_dispatch_us += per_instance * segment_instances(p, s);
  }
}

bool is_prefetched(const Op& op) {
  auto* c = std::get_if<CollectiveOp>(&op.kind);
  return c && (c->group == Group::dp || c->group == Group::efsdp) && c->kind == CollectiveKind::all_gather &&
         op.deps.empty() && op.inputs.empty();
}
}  // namespace tptune
