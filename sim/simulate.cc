#include "sim/simulate.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <functional>
#include <string_view>
#include <unordered_map>

#include "plans/util/checked_math.h"
#include "plans/util/error.h"
#include "sim/accumulation.h"

namespace tptune {

void check_supported(const Program& p, const ClusterSpec& cluster) {
  if (p.plan.float8 != Float8Recipe::none && !cluster.gpu.has_float8())
    throw Error(fmt::format("{}: float8: {} is not supported on {}{}: it has no float8 tensor cores; use float8: none",
                            p.plan.source.empty() ? std::string("plan") : p.plan.source, to_string(p.plan.float8),
                            cluster.gpu.name,
                            cluster.gpu.description.empty() ? "" : " (" + cluster.gpu.description + ")"));
  const std::string source = p.plan.source.empty() ? std::string("plan") : p.plan.source;
  // The whole mesh [pp, dp_replicate, dp_shard, cp, tp] must fit the cluster: p.dp is FSDP's group, dp_shard x cp, so
  // dp_shard is p.dp / cp, and each degree the plan sets is named (each is at most 2^20: a checked product).
  const int pp = std::max(1, p.plan.pp_degree);
  const int64_t ranks = checked_mul({p.tp, p.dp, p.dp_replicate, pp}, "pp x dp_replicate x dp_shard x cp x tp");
  if (ranks > cluster.world_size()) {
    auto origin = [&](const char* key) {
      auto it = p.plan.provenance.find(key);
      return it != p.plan.provenance.end() ? it->second : std::string("the default");
    };
    std::string mesh = fmt::format("tp {} x dp_shard {}", p.tp, p.dp / std::max(1, p.cp));
    if (p.cp > 1) mesh += fmt::format(" x cp {}", p.cp);
    if (p.dp_replicate > 1) mesh += fmt::format(" x dp_replicate {}", p.dp_replicate);
    if (pp > 1) mesh += fmt::format(" x pp {}", pp);
    throw Error(
        fmt::format("{}: {} = {} GPUs, but the cluster has {} ({} nodes x {}): lower dp_shard ({}){}", source, mesh,
                    ranks, cluster.world_size(), cluster.nodes, cluster.gpus_per_node, origin("dp_shard"),
                    p.dp_replicate > 1 ? fmt::format(" or dp_replicate ({})", origin("dp_replicate")) : std::string()));
  }
}

namespace {

std::string op_kind_label(const Op& op) {
  if (auto* c = std::get_if<CollectiveOp>(&op.kind))
    return fmt::format("{}({})", to_string(c->kind), to_string(c->group));
  return std::string(kind_name(op.kind));
}

}  // namespace

std::vector<OpSummary> top_op_summaries(const Program& p, const OpCosts& costs, size_t top_ops,
                                        const std::function<double(size_t seg, size_t op)>& runs) {
  // Rank template ops by total time first, and build summaries (strings) only for the ones reported. An op's FSDP
  // copies (sim/timeline/fsdp_copies.h) are rows of their own (slot 1 before it, 2 after it), its own row its kernel's
  // time.
  struct Ref {
    size_t seg, op;
    int slot;  // 0: the op itself; 1, 2: its FSDP copy before, after
    double time;
    double total;
    double instances;
  };
  auto slot_times = [&](size_t s, size_t j) {
    const FsdpCopyShare c = fsdp_copy_share(costs, s, j);
    return std::array<double, 3>{costs.duration_us[s][j] - c.before_us - c.after_us, c.before_us, c.after_us};
  };
  std::vector<Ref> refs;
  std::vector<std::vector<std::array<size_t, 3>>> ref_of(p.segments.size());  // [seg][op][slot] -> refs index
  constexpr size_t kNone = static_cast<size_t>(-1);
  size_t n_ops = 0;
  for (const Segment& seg : p.segments) n_ops += seg.ops.size();
  refs.reserve(n_ops + n_ops / 4);  // every op, and the few with FSDP copies: one allocation
  for (size_t s = 0; s < p.segments.size(); ++s) {
    ref_of[s].reserve(p.segments[s].ops.size());
    for (size_t j = 0; j < p.segments[s].ops.size(); ++j) {
      const double n = runs(s, j);
      const auto t = slot_times(s, j);
      ref_of[s].push_back({kNone, kNone, kNone});
      for (int k = 0; k < 3; ++k)
        if (k == 0 || t[size_t(k)] > 0) {
          ref_of[s][j][size_t(k)] = refs.size();
          refs.push_back({s, j, k, t[size_t(k)], t[size_t(k)] * n, n});
        }
    }
  }
  // A plan's ac_layers splits the block backward in two segments whose ops are the same but for the recompute: an op
  // of the checkpointed blocks that has a namesake of the same duration in the others is reported once, with both
  // counts (as an unsplit report counts it); its copies likewise. So are the ops the two block variants of a
  // dense-first mixture of experts share (attention, norms: two segments of each block kind).
  size_t first_of[3] = {p.segments.size(), p.segments.size(), p.segments.size()};  // block.fwd, .bwd, .optimizer
  for (size_t s = 0; s < p.segments.size(); ++s) {
    const SegmentKind kind = p.segments[s].kind;
    if (!is_block(kind)) continue;
    size_t& first = first_of[kind == SegmentKind::block_fwd ? 0 : kind == SegmentKind::block_bwd ? 1 : 2];
    if (first == p.segments.size()) {
      first = s;
      continue;
    }
    std::unordered_map<std::string_view, size_t> index;  // op name -> its index in the first segment of the kind
    for (size_t j = 0; j < p.segments[first].ops.size(); ++j) index.emplace(p.segments[first].ops[j].name, j);
    for (size_t j = 0; j < p.segments[s].ops.size(); ++j) {
      auto it = index.find(p.segments[s].ops[j].name);
      if (it == index.end()) continue;
      for (size_t k = 0; k < 3; ++k) {
        const size_t into_i = ref_of[first][it->second][k], from_i = ref_of[s][j][k];
        if (into_i == kNone || from_i == kNone || refs[into_i].time != refs[from_i].time) continue;
        Ref& into = refs[into_i];
        Ref& from = refs[from_i];
        into.total += from.total;
        into.instances += from.instances;
        from.total = -1;  // ranked last, never reported
      }
    }
  }
  std::erase_if(refs, [](const Ref& r) { return r.total < 0 || r.instances <= 0; });  // merged, or never run
  const size_t keep = std::min(top_ops, refs.size());
  std::partial_sort(
      refs.begin(), refs.begin() + static_cast<std::ptrdiff_t>(keep), refs.end(), [](const Ref& a, const Ref& b) {
        return a.total > b.total ||
               (a.total == b.total &&
                (a.seg < b.seg || (a.seg == b.seg && (a.op < b.op || (a.op == b.op && a.slot < b.slot)))));
      });
  std::vector<OpSummary> ops;
  for (size_t k = 0; k < keep; ++k) {
    const Segment& seg = p.segments[refs[k].seg];
    const Op& op = seg.ops[refs[k].op];
    const std::string name = refs[k].slot == 0 ? op.name : std::string(fsdp_copy_name(op, refs[k].slot == 1));
    OpSummary o;
    o.name = is_per_layer_segment(seg) ? "layers.*." + name : name;
    o.kind = refs[k].slot == 0 ? op_kind_label(op) : "fsdp_copy";
    o.phase = std::string(to_string(op.phase));
    o.stream = stream_of(op);
    o.count = static_cast<int64_t>(refs[k].instances);
    o.time_us = refs[k].time;
    o.total_us = refs[k].total;
    ops.push_back(std::move(o));
  }
  // Ops of different segments may share a name and a phase (FSDP's all-gather of the embedding's unit in embed.fwd and
  // of the output's in head): those rows say their segment, "fsdp.all_gather (head)".
  // (A few rows: compared pairwise, before any name changes.)
  std::vector<char> shared(ops.size(), 0);
  for (size_t a = 0; a < ops.size(); ++a)
    for (size_t b = a + 1; b < ops.size(); ++b)
      if (ops[a].name == ops[b].name && ops[a].phase == ops[b].phase) shared[a] = shared[b] = 1;
  for (size_t k = 0; k < ops.size(); ++k)
    if (shared[k]) ops[k].name += fmt::format(" ({})", to_string(p.segments[refs[k].seg].kind));
  return ops;
}

StepReport make_report(const Program& p, const ClusterSpec& cluster, const CostParams& c, const OpCosts& costs,
                       const Timeline& tl, size_t top_ops) {
  return make_report(p, cluster, costs, tl, memory_model(p, cluster.gpu, c), top_ops);
}

StepReport make_report(const Program& p, const ClusterSpec& cluster, const OpCosts& costs, const Timeline& tl,
                       const MemoryReport& memory, size_t top_ops, int64_t gradient_accumulation_steps) {
  const int64_t ga = gradient_accumulation_steps > 0 ? gradient_accumulation_steps : p.plan.gradient_accumulation_steps;
  StepReport r;
  r.model = p.model.name;
  r.gpu = cluster.gpu.name;
  r.plan = p.plan.family + (p.plan.source.empty() ? "" : " (" + p.plan.source + ")");
  r.toggles() = p.plan.toggles();
  r.tp_degree = p.tp;
  r.dp_shard = p.dp / p.cp;  // p.dp is FSDP's group, dp_shard x cp
  r.dp_replicate = p.dp_replicate;
  r.activation_checkpointing = p.training.activation_checkpointing;
  r.local_batch_size = p.training.local_batch_size;
  r.seq_len = p.training.seq_len;
  r.nodes = cluster.nodes;
  r.gpus_per_node = cluster.gpus_per_node;
  r.n_layers = p.model.n_layers;
  r.gradient_accumulation_steps = std::max<int64_t>(ga, 1);
  r.trust = prediction_trust(cluster.gpu);

  const double step_us = accumulated_step_us(p, tl, ga);
  r.step_time_ms = step_us / 1e3;
  const double step_s = step_us * 1e-6;
  if (step_s > 0) {
    // ga x tokens per rank in double: the product may pass int64 for absurd (but in-range) accumulation counts.
    r.tokens_per_second_per_gpu =
        static_cast<double>(r.gradient_accumulation_steps) * static_cast<double>(p.tokens_per_rank()) / (p.tp * step_s);
    r.mfu = r.tokens_per_second_per_gpu * p.model.training_flops_per_token(p.training.seq_len) /
            cluster.gpu.peak_flops(DType::bf16);
  }
  r.compute_ms = tl.compute_us / 1e3;
  r.exposed_tp_comm_ms = tl.exposed_tp_us / 1e3;
  r.exposed_dp_comm_ms = tl.exposed_dp_us / 1e3;
  r.tp_comm_busy_ms = tl.busy_us[static_cast<int>(Stream::tp)] / 1e3;
  r.dp_comm_busy_ms = tl.busy_us[static_cast<int>(Stream::dp)] / 1e3;
  r.dp_replicate_comm_busy_ms = tl.busy_us[static_cast<int>(Stream::dp_replicate)] / 1e3;
  r.cp_comm_busy_ms = tl.busy_us[static_cast<int>(Stream::cp)] / 1e3;
  r.ep_comm_busy_ms = tl.busy_us[static_cast<int>(Stream::ep)] / 1e3;
  // Per-microbatch ops (every segment but the optimizer's) run ga times.
  auto per_step = [&](const Segment& s) {
    return is_optimizer_segment(s) ? 1.0 : static_cast<double>(r.gradient_accumulation_steps);
  };
  if (r.gradient_accumulation_steps > 1) {
    const double extra = static_cast<double>(r.gradient_accumulation_steps - 1);
    double compute = 0, exposed_dp = 0, busy[kStreams] = {};
    for (size_t s = 0; s < p.segments.size(); ++s) {
      if (is_optimizer_segment(p.segments[s])) continue;
      const SegmentTimes& st = tl.segments[s];
      for (int i = 0; i < st.instances && st.ops > 0; ++i) {
        compute += st.instance_stats(i).compute_us;
        exposed_dp += st.instance_stats(i).exposed_dp_us;
      }
      for (size_t j = 0; j < p.segments[s].ops.size(); ++j)
        busy[static_cast<int>(stream_of(p.segments[s].ops[j]))] += costs.duration_us[s][j] * st.instances;
    }
    r.compute_ms = (tl.compute_us + extra * compute) / 1e3;
    // A microbatch held to its DP stream's load (microbatch_times) waits that much longer on DP.
    const MicrobatchTimes mb = microbatch_times(p, tl);
    r.exposed_dp_comm_ms =
        (tl.exposed_dp_us + extra * (exposed_dp + std::max(0.0, mb.dp_busy_us - mb.critical_us))) / 1e3;
    // The rest of the step: the extra microbatches' compute-stream time not computing nor waiting on DP.
    r.exposed_tp_comm_ms = std::max(0.0, r.step_time_ms - r.compute_ms - r.exposed_dp_comm_ms);
    r.tp_comm_busy_ms += extra * busy[static_cast<int>(Stream::tp)] / 1e3;
    r.dp_comm_busy_ms += extra * busy[static_cast<int>(Stream::dp)] / 1e3;
    r.dp_replicate_comm_busy_ms += extra * busy[static_cast<int>(Stream::dp_replicate)] / 1e3;
    r.cp_comm_busy_ms += extra * busy[static_cast<int>(Stream::cp)] / 1e3;
    r.ep_comm_busy_ms += extra * busy[static_cast<int>(Stream::ep)] / 1e3;
  }

  // Over every instance of the segments of that kind (a plan's ac_layers splits the block backward in two).
  auto mean_span = [&](SegmentKind kind) {
    double sum = 0;
    int n = 0;
    for (size_t s = 0; s < p.segments.size(); ++s) {
      const SegmentTimes& st = tl.segments[s];
      if (p.segments[s].kind != kind || st.ops == 0) continue;
      for (int i = 0; i < st.instances; ++i) sum += st.instance_stats(i).span_us;
      n += st.instances;
    }
    return n > 0 ? sum / n / 1e3 : 0.0;
  };
  r.block_forward_ms = mean_span(SegmentKind::block_fwd);
  r.block_backward_ms = mean_span(SegmentKind::block_bwd);

  r.memory = memory;
  r.parameters = parameter_count(p);

  if (top_ops > 0)  // none asked for (the search): no ranking of every op
    r.top_ops = top_op_summaries(
        p, costs, top_ops, [&](size_t seg, size_t) { return tl.segments[seg].instances * per_step(p.segments[seg]); });
  return r;
}

StepReport simulate(const Program& p, const ClusterSpec& cluster, const CostParams& c) {
  check_supported(p, cluster);
  OpCosts costs = cost_ops(p, cluster, c);
  Timeline tl = schedule(p, costs, c);
  return make_report(p, cluster, c, costs, tl);
}

}  // namespace tptune
