#include "sim/pipeline/step.h"

#include <fmt/format.h>

#include <algorithm>

#include "plans/language/pipeline_parallel.h"
#include "plans/lower/lower.h"
#include "plans/lower/parameter_count.h"
#include "plans/lower/rewrite/pipeline_stage.h"
#include "plans/util/checked_math.h"
#include "plans/util/error.h"
#include "sim/cost/comm_cost.h"
#include "sim/pipeline/schedule.h"

namespace tptune {

namespace {

// What one stage costs per microbatch, split as the report needs it.
struct StageTimes {
  double fwd_us = 0, bwd_us = 0, bwd_weight_us = 0;
  double exposed_tp_us = 0;     // of fwd + bwd: TP and CP waits inside the stage
  double fsdp_wait_fwd_us = 0;  // the DP waits of its forward in the Program (FSDP's all-gathers)
  double reduce_us = 0;         // its gradient reduction on the DP streams (reduce-scatter, HSDP all-reduce)
  double optimizer_us = 0;      // block.optimizer of its layers (+ grad_norm and the optimizer segment: added per rank)
  double saved_bytes = 0;       // activations one microbatch of it saves for backward
  double params_in_flight = 0;  // its unsharded compute copies of parameters (local TP shards, as FSDP gathers them)
  double parameters = 0;        // elements, for the share of the model states
  double unsharded_grads = 0;   // its accumulated unsharded gradients, fp32 (FSDP's reduce_dtype)
  double ws_backward = 0;       // the backward's working set of its blocks (the larger variant's)
};

// Relative margin of the bounds (as sim/search/bound.h's): the sums here run in another order than the timeline's chain
// of starts and ends, which differs by far less than 1e-9 relative.
constexpr double kBoundMargin = 1e-9;

bool is_dp_stream(Stream s) { return s == Stream::dp || s == Stream::dp_replicate; }

// The share of `seg`'s compute-op durations that `pick` selects.
template <class Pick>
double compute_share(const Segment& seg, const std::vector<double>& durations, Pick pick) {
  double all = 0, picked = 0;
  for (size_t j = 0; j < seg.ops.size(); ++j) {
    if (seg.ops[j].is_collective()) continue;
    all += durations[j];
    if (pick(seg.ops[j])) picked += durations[j];
  }
  return all > 0 ? picked / all : 0.0;
}

double reduce_us_of(const Segment& seg, const std::vector<double>& durations) {
  double sum = 0;
  for (size_t j = 0; j < seg.ops.size(); ++j) {
    const auto* c = std::get_if<CollectiveOp>(&seg.ops[j].kind);
    if (c && is_dp_stream(stream_of(seg.ops[j])) && c->kind != CollectiveKind::all_gather) sum += durations[j];
  }
  return sum;
}

bool is_weight_gradient(const Op& op) { return op.name.ends_with(".bwd_weight"); }

double local_bf16_bytes(const Program& p, const std::string& name) {
  for (const TensorDesc& t : p.tensors)
    if (t.role == TensorRole::parameter && !t.per_layer && t.name == name) {
      double elements = 1;
      for (int64_t d : t.local_shape) elements *= static_cast<double>(d);
      return elements * 2;
    }
  return 0;
}

// What one block of a block variant (plans/program/program.h "Structure": one template, or a dense-first mixture of
// experts' dense and MoE blocks) holds on a stage, per the block forward segment of its layers.
struct BlockVariant {
  int first = 0, end = 0;  // its layers first .. end - 1
  // Its unsharded parameters as FSDP gathers them: the bytes of its forward's all-gathers on dp (dp > 1) and, for the
  // routed experts under EP, on efsdp (bf16, or 1 byte for the linear weights under float8 with FSDP float8
  // all-gather), plus the parameters no FSDP group shards (bf16); when nothing is gathered (no FSDP), its parameters'
  // bytes (MemoryParts::block_params of one block template).
  double gathered = 0;
  double grad_bytes = 0;   // its fp32 unsharded gradients: 4 bytes per local parameter element
  double saved = 0;        // saved for backward (the MemoryParts of its kind)
  double ws_backward = 0;  // its backward's working set (the MemoryParts of its kind)
};

bool in_variant(const TensorDesc& t, int layer) {
  return t.layer_count == 0 || (layer >= t.first_layer && layer < t.first_layer + t.layer_count);
}

std::vector<BlockVariant> block_variants(const Program& p, const MemoryParts& parts) {
  std::vector<BlockVariant> out;
  for (const Segment& seg : p.segments) {
    if (seg.kind != SegmentKind::block_fwd) continue;
    BlockVariant v;
    v.first = seg.first_layer;
    v.end = seg.first_layer + segment_instances(p, seg);
    double gathered = 0, own = 0, elements = 0;
    for (const Op& op : seg.ops)
      if (const auto* c = std::get_if<CollectiveOp>(&op.kind);
          c && c->kind == CollectiveKind::all_gather &&
          ((c->group == Group::dp && p.dp > 1) || (c->group == Group::efsdp && p.efsdp > 1)))
        gathered += static_cast<double>(c->bytes);
    for (const TensorDesc& t : p.tensors)
      if (t.role == TensorRole::parameter && t.per_layer && in_variant(t, v.first)) {
        elements += static_cast<double>(numel(t.local_shape));
        own += tensor_bytes(t);
        if (p.fsdp_degree(t) <= 1 && gathered > 0) gathered += tensor_bytes(t);
      }
    // (one block template: parts.block_params is its parameters' bytes)
    v.gathered = gathered > 0 ? gathered : p.model.dense_first_blocks() > 0 ? own : parts.block_params;
    v.grad_bytes = 4 * elements;
    const bool dense = parts.dense_blocks > 0 && v.first < parts.dense_blocks;
    v.saved = dense ? parts.saved_per_dense_block : parts.saved_per_block;
    v.ws_backward = dense ? parts.ws_dense_backward : parts.ws_backward;
    out.push_back(v);
  }
  return out;
}

const BlockVariant& variant_of(const std::vector<BlockVariant>& vs, int layer) {
  for (const BlockVariant& v : vs)
    if (layer >= v.first && layer < v.end) return v;
  throw Error(fmt::format("pipeline step: block {} is in no block forward segment", layer));
}

// A rank's memory through memory_from_parts(): its share of the model states, what it holds for microbatches
// (`activations`) as one "block", its stages' parameters resident, the head's working set only where the head is; the
// stages' fp32 unsharded gradients (`grads`) beside the backward's working set (and the head's: its backward runs with
// them); the head's working set less the logits, which the walk holds (output_chunks). Every phase of
// memory_from_parts() is non-decreasing in `activations` and `grads`, and the backward phase (and the head's, on the
// last stage's rank) holds both summed: the lower bound (pipeline_bound()) relies on it. A dense-first mixture of
// experts: the backward's working set is `ws_backward`, the larger of its stages' block variants' (the forward's stays
// the larger variant's, memory_parts()), and no phase of its own for the dense blocks (their saved tensors are in
// `activations`).
MemoryParts rank_memory_parts(const MemoryParts& parts, double share, double params_in_flight, bool holds_last,
                              double activations, double grads, double ws_backward) {
  MemoryParts q = parts;
  q.ws_backward = ws_backward;
  q.saved_per_dense_block = q.ws_dense_backward = 0;
  q.dense_blocks = 0;
  q.master_params = parts.master_params * share;
  q.gradients = parts.gradients * share;
  q.optimizer = parts.optimizer * share;
  q.block_params = 0;
  q.resident_params = params_in_flight;
  q.head_params = holds_last ? params_in_flight : 0.0;
  q.fsdp_reduce_scatter_input = grads;
  if (holds_last) q.ws_head = std::max(0.0, parts.ws_head - parts.logits) + grads;
  if (!holds_last) q.ws_head = 0, q.logits = 0;
  q.saved_per_block = activations;
  q.blocks = 1;
  q.saved_per_checkpointed_block = 0;
  q.checkpointed_blocks = 0;
  return q;
}

}  // namespace

ClusterSpec pipeline_stage_cluster(const Plan& plan, const ClusterSpec& cluster) {
  const int64_t world = cluster.world_size();
  const int64_t mesh = checked_mul({plan.pp_degree, plan.dp_replicate, plan.dp_shard, plan.cp_degree, plan.tp_degree},
                                   "pp x dp_replicate x dp_shard x cp x tp");
  if (mesh != world)
    throw Error(fmt::format(
        "{}: pp {} x dp_replicate {} x dp_shard {} x cp {} x tp {} = {} GPUs, but the cluster has {} ({} nodes x {}): "
        "torchtitan asserts the mesh is the world",
        plan_key_origin(plan, "pp_degree"), plan.pp_degree, plan.dp_replicate, plan.dp_shard, plan.cp_degree,
        plan.tp_degree, mesh, world, cluster.nodes, cluster.gpus_per_node));
  const int64_t per_rank = world / plan.pp_degree;
  ClusterSpec c = cluster;
  if (per_rank % cluster.gpus_per_node == 0) {
    c.nodes = static_cast<int>(per_rank / cluster.gpus_per_node);
  } else if (cluster.gpus_per_node % per_rank == 0) {
    c.nodes = 1;
    c.gpus_per_node = static_cast<int>(per_rank);
    if (cluster.cores_per_node > 0)
      c.cores_per_node = std::max(1, cluster.cores_per_node / (cluster.gpus_per_node / c.gpus_per_node));
  } else {
    throw Error(fmt::format(
        "{}: pp {}: each pp rank's mesh of {} GPUs straddles the {}-GPU nodes unevenly (world / pp must be a multiple "
        "or a divisor of gpus_per_node)",
        plan_key_origin(plan, "pp_degree"), plan.pp_degree, per_rank, cluster.gpus_per_node));
  }
  return c;
}

PipelineProgramCosts cost_pipeline_program(const Model& model, const Training& training, const Plan& plan,
                                           const ClusterSpec& cluster, const CostParams& c) {
  PipelineProgramCosts p;
  p.stage_cluster = pipeline_stage_cluster(plan, cluster);
  // One microbatch of the whole model (see the header).
  p.program = lower(model, training, pipeline_microbatch_plan(plan));
  check_supported(p.program, cluster);  // float8 on the GPU, the whole mesh (pp included) on the whole cluster
  p.costs = cost_ops(p.program, p.stage_cluster, c);
  p.timeline = schedule(p.program, p.costs, c);
  p.parts = memory_parts(p.program, c);
  p.report = make_report(p.program, p.stage_cluster, c, p.costs, p.timeline);
  for (size_t si = 0; si < p.program.segments.size(); ++si) {
    const Segment& seg = p.program.segments[si];
    const std::vector<double>& dur = p.costs.duration_us[si];
    p.shares.push_back({compute_share(seg, dur, is_weight_gradient),
                        compute_share(seg, dur, [](const Op& op) { return op.phase == Phase::forward; }),
                        reduce_us_of(seg, dur)});
  }
  return p;
}

StepReport simulate_pipeline(const Model& model, const Training& training, const Plan& plan, const ClusterSpec& cluster,
                             const CostParams& c) {
  PipelineProgramCosts own;
  return simulate_pipeline(model, training, plan, cluster, c, [&]() -> const PipelineProgramCosts& {
    own = cost_pipeline_program(model, training, plan, cluster, c);
    return own;
  });
}

StepReport simulate_pipeline(const Model& model, const Training& training, const Plan& plan, const ClusterSpec& cluster,
                             const CostParams& c, const std::function<const PipelineProgramCosts&()>& program) {
  return *simulate_pipeline(model, training, plan, cluster, c, program, {});
}

std::optional<StepReport> simulate_pipeline(const Model& model, const Training& training, const Plan& plan,
                                            const ClusterSpec& cluster, const CostParams& c,
                                            const std::function<const PipelineProgramCosts&()>& program,
                                            const std::function<bool(const PipelineBound&)>& prune) {
  if (plan.pp_degree <= 1) throw Error(fmt::format("{}: simulate_pipeline needs pp_degree > 1", plan.source));
  const PipelineSplit split = resolve_pipeline(model, plan);
  const PipelineSchedule sched = build_plan_schedule(plan, split);
  const ClusterSpec stage_cluster = pipeline_stage_cluster(plan, cluster);

  // The microbatch Program, costed and scheduled (cost_pipeline_program()).
  const PipelineProgramCosts& costed = program();
  const Program& prog = costed.program;
  const OpCosts& costs = costed.costs;
  const Timeline& tl = costed.timeline;
  const MemoryParts& parts = costed.parts;

  const int stages = split.num_stages();
  std::vector<StageTimes> st(static_cast<size_t>(stages));
  std::vector<int> stage_of_layer(static_cast<size_t>(model.n_layers), 0);
  for (int s = 0, first = 0; s < stages; first += split.stage_layers[static_cast<size_t>(s)], ++s)
    for (int l = 0; l < split.stage_layers[static_cast<size_t>(s)]; ++l)
      stage_of_layer[static_cast<size_t>(first + l)] = s;
  const int last = stages - 1;
  double grad_norm_us = 0, optimizer_segment_us = 0;
  for (size_t si = 0; si < prog.segments.size(); ++si) {
    const Segment& seg = prog.segments[si];
    const SegmentTimes& times = tl.segments[si];
    const double weight_share = costed.shares.at(si).weight, forward_share = costed.shares[si].forward;
    const double reduce = costed.shares[si].reduce_us;
    for (int i = 0; i < times.instances; ++i) {
      const InstanceStats& is = times.instance_stats(i);
      const double own = std::max(0.0, is.span_us - is.exposed_dp_us);
      const int layer = instance_layer(prog, seg, i);
      const int s = layer >= 0 ? stage_of_layer[static_cast<size_t>(layer)] : 0;
      switch (seg.kind) {
        case SegmentKind::embed_fwd:
          st[0].fwd_us += own, st[0].exposed_tp_us += is.exposed_tp_us, st[0].fsdp_wait_fwd_us += is.exposed_dp_us;
          break;
        case SegmentKind::block_fwd:
          st[static_cast<size_t>(s)].fwd_us += own;
          st[static_cast<size_t>(s)].exposed_tp_us += is.exposed_tp_us;
          st[static_cast<size_t>(s)].fsdp_wait_fwd_us += is.exposed_dp_us;
          break;
        case SegmentKind::head:
          st[static_cast<size_t>(last)].fwd_us += own * forward_share;
          st[static_cast<size_t>(last)].bwd_us += own * (1 - forward_share);
          st[static_cast<size_t>(last)].bwd_weight_us += own * (1 - forward_share) * weight_share;
          st[static_cast<size_t>(last)].exposed_tp_us += is.exposed_tp_us;
          st[static_cast<size_t>(last)].reduce_us += reduce;
          break;
        case SegmentKind::block_bwd:
          st[static_cast<size_t>(s)].bwd_us += own;
          st[static_cast<size_t>(s)].bwd_weight_us += own * weight_share;
          st[static_cast<size_t>(s)].exposed_tp_us += is.exposed_tp_us;
          st[static_cast<size_t>(s)].reduce_us += reduce;
          break;
        case SegmentKind::embed_bwd:
          st[0].bwd_us += own, st[0].bwd_weight_us += own * weight_share, st[0].exposed_tp_us += is.exposed_tp_us;
          st[0].reduce_us += reduce;
          break;
        case SegmentKind::grad_norm:
          grad_norm_us += is.span_us;
          break;
        case SegmentKind::block_optimizer:
          st[static_cast<size_t>(s)].optimizer_us += is.span_us;
          break;
        case SegmentKind::optimizer:
          optimizer_segment_us += is.span_us;
          break;
        case SegmentKind::pp_recv_fwd:
        case SegmentKind::pp_send_fwd:
        case SegmentKind::pp_recv_bwd:
        case SegmentKind::pp_send_bwd:
          throw Error("pipeline step: the microbatch Program is a stage's (it has transfers)");
      }
    }
  }
  // Memory parts per stage: saved activations (checkpointed blocks are layers 0 .. ac_layers-1), parameters as FSDP
  // gathers them, and the fp32 unsharded gradients it accumulates (4 bytes per local element: twice the bf16 copies),
  // each by the block variant of its layers (a dense-first mixture of experts' dense and MoE blocks). A block's
  // parameters for the share of the model states: Model::layer_parameters() of a mixture of experts (its dense and MoE
  // blocks differ; the routed experts' states are sharded over ep x efsdp = dp_shard x cp x tp ranks, as the others'
  // over tp x dp, so the share is their count's), Model::block_parameters() otherwise.
  const bool moe = model.moe.experts > 0;
  const double block_params_elems = static_cast<double>(model.block_parameters());
  const double embed_local = local_bf16_bytes(prog, "tok_embeddings.weight");
  const std::vector<BlockVariant> variants = block_variants(prog, parts);
  double all_blocks = 0;  // a mixture of experts: every block's parameters
  if (moe)
    for (int l = 0; l < model.n_layers; ++l) all_blocks += static_cast<double>(model.layer_parameters(l));
  for (int s = 0; s < stages; ++s) {
    StageTimes& t = st[static_cast<size_t>(s)];
    const int first = split.first_layer(s), end = first + split.stage_layers[static_cast<size_t>(s)];
    for (int layer = first; layer < end; ++layer) {
      t.saved_bytes += parts.checkpointed_blocks > 0 && layer < parts.checkpointed_blocks && plan.ac_layers > 0
                           ? parts.saved_per_checkpointed_block
                           : variant_of(variants, layer).saved;
      if (moe) t.parameters += static_cast<double>(model.layer_parameters(layer));
    }
    for (const BlockVariant& v : variants) {
      const int n = std::max(0, std::min(end, v.end) - std::max(first, v.first));
      t.params_in_flight += v.gathered * n;
      t.unsharded_grads += v.grad_bytes * n;
      if (n > 0) t.ws_backward = std::max(t.ws_backward, v.ws_backward);
    }
    if (end == first) t.ws_backward = parts.ws_backward;
    if (!moe) t.parameters = block_params_elems * split.stage_layers[static_cast<size_t>(s)];
    if (s == 0) {
      t.params_in_flight += embed_local, t.unsharded_grads += 2 * embed_local;
      t.parameters += static_cast<double>(model.embedding_parameters());
    }
    if (s == last) {
      t.params_in_flight += parts.head_params, t.unsharded_grads += 2 * parts.head_params;
      t.parameters += moe ? static_cast<double>(model.total_parameters() - model.embedding_parameters()) - all_blocks
                          : static_cast<double>(model.total_parameters() - model.embedding_parameters() -
                                                model.n_layers * model.block_parameters());
    }
  }

  // P2P of one activation: the block output this rank holds, what each stage Program's transfers move
  // (plans/lower/rewrite/pipeline_stage.h: microbatch x local sequence x dim, over tp too when sequence parallelism
  // shards it).
  const int64_t p2p_bytes = pipeline_transfer_bytes(prog);
  const int64_t world = cluster.world_size();
  const bool network = world > cluster.domain_gpus();  // the pp hop leaves the NVLink domain
  GroupLayout hop;
  hop.size = 2;
  hop.per_node = network ? 1 : 2;
  hop.nodes = network ? 2 : 1;
  const double p2p_us = collective_cost(CollectiveKind::p2p, p2p_bytes, hop, cluster, c).time_us;

  std::vector<StageCost> stage_costs;
  for (const StageTimes& t : st) stage_costs.push_back({t.fwd_us, t.bwd_us, std::min(t.bwd_weight_us, t.bwd_us)});
  const int64_t ga = std::max<int64_t>(1, plan.gradient_accumulation_steps);
  const double start_us = st[0].fsdp_wait_fwd_us;
  if (prune) {
    // The bound (step.h's PipelineBound). Time: a rank runs its actions one at a time in its list's order
    // (simulate_schedule()), so its i-th action ends no earlier than its first action can start plus the durations of
    // actions 0 .. i, and the rank no earlier than that for its last action; the first can start no earlier than the
    // forward of microbatch 0 has passed every stage below the rank's lowest one (the hops between ranks included).
    // After an F of stage s and microbatch mb, the forward of mb through the stages above s and its backward (B, or I
    // where the schedule splits it) from the last stage down to stage 0 follow one after the other; after a B or I of
    // stage s, the backward of stages s-1 .. 0; each chain ends on stage 0's rank, 0. Each rank's end then counts as
    // simulate_pipeline() counts it (ga passes from the first stage's FSDP wait, the exposed reduction >= 0 left out,
    // its optimizer).
    bool split_backward = false;
    for (const auto& list : sched.ranks)
      for (const PipelineAction& a : list) split_backward = split_backward || a.kind == PipelineActionKind::I;
    auto backward_us = [&](int s) {
      const StageCost& t = stage_costs[static_cast<size_t>(s)];
      return split_backward ? t.bwd_us - t.bwd_weight_us : t.bwd_us;
    };
    auto hop = [&](int s) { return sched.rank_of_stage(s - 1) != sched.rank_of_stage(s) ? p2p_us : 0.0; };
    // fwd_below[s]: from F(0)'s start to F(s)'s; bwd_below[s]: from the end of stage s's backward to stage 0's;
    // fwd_after[s]: from F(s)'s end to the last stage's F's end.
    std::vector<double> fwd_below(static_cast<size_t>(stages), 0), bwd_below(fwd_below), fwd_after(fwd_below);
    for (int s = 1; s < stages; ++s) {
      fwd_below[static_cast<size_t>(s)] = fwd_below[static_cast<size_t>(s - 1)] + stage_costs[s - 1].fwd_us + hop(s);
      bwd_below[static_cast<size_t>(s)] = bwd_below[static_cast<size_t>(s - 1)] + hop(s) + backward_us(s - 1);
    }
    for (int s = stages - 2; s >= 0; --s)
      fwd_after[static_cast<size_t>(s)] =
          fwd_after[static_cast<size_t>(s + 1)] + hop(s + 1) + stage_costs[s + 1].fwd_us;
    const double top_down = backward_us(last) + bwd_below[static_cast<size_t>(last)];
    const double m_count = static_cast<double>(split.microbatches), p2p = static_cast<double>(p2p_bytes);
    double rank0_end = 0, step_bound = 0, peak_bound = 0;
    std::vector<double> optimizer(static_cast<size_t>(split.pp), grad_norm_us);
    for (int r = 0; r < split.pp; ++r) {
      const std::vector<int> stages_r = sched.stages_of_rank(r);
      double params_in_flight = 0, parameters = 0, recv_buffers = 0, held = 0, ws_backward = 0;
      bool holds_first = false, holds_last = false;
      for (int s : stages_r) {
        const StageTimes& t = st[static_cast<size_t>(s)];
        optimizer[static_cast<size_t>(r)] += t.optimizer_us;
        params_in_flight += t.params_in_flight;
        parameters += t.parameters;
        ws_backward = std::max(ws_backward, t.ws_backward);
        holds_first = holds_first || s == 0;
        holds_last = holds_last || s == last;
      }
      if (holds_first || holds_last) optimizer[static_cast<size_t>(r)] += optimizer_segment_us;
      double end = fwd_below[static_cast<size_t>(stages_r.front())];  // stages_of_rank() ascending
      for (const PipelineAction& a : sched.ranks[static_cast<size_t>(r)]) {
        const StageCost& t = stage_costs[static_cast<size_t>(a.stage)];
        switch (a.kind) {
          case PipelineActionKind::F:
            end += t.fwd_us;
            rank0_end = std::max(rank0_end, end + fwd_after[static_cast<size_t>(a.stage)] + top_down);
            break;
          case PipelineActionKind::B:
          case PipelineActionKind::I:
            end += a.kind == PipelineActionKind::B ? t.bwd_us : t.bwd_us - t.bwd_weight_us;
            rank0_end = std::max(rank0_end, end + bwd_below[static_cast<size_t>(a.stage)]);
            break;
          case PipelineActionKind::W:
            end += t.bwd_weight_us;
            break;
        }
      }
      step_bound = std::max(step_bound, static_cast<double>(ga) * (start_us + end) + optimizer[static_cast<size_t>(r)]);
      // Memory: the walk's peak of held + grads is at least what one microbatch of a stage holds at its backward (its
      // saved tensors and output, the logits on the last stage, its input gradient, the stage's unsharded gradients);
      // rank_memory_parts() with that in the gradients' place and nothing held is below the rank's peak in every phase.
      auto on_rank = [&](int s) { return std::find(stages_r.begin(), stages_r.end(), s) != stages_r.end(); };
      for (int s : stages_r) {
        const StageTimes& t = st[static_cast<size_t>(s)];
        recv_buffers += m_count * p2p * ((s > 0 && !on_rank(s - 1) ? 1 : 0) + (s < last && !on_rank(s + 1) ? 1 : 0));
        const double one = std::max(0.0, t.saved_bytes - (s > 0 ? p2p : 0.0)) + (s < last ? p2p : 0.0) +
                           (s == last ? parts.logits : 0.0) + (s > 0 ? p2p : 0.0) + t.unsharded_grads;
        held = std::max(held, one);
      }
      const double share = parameters / static_cast<double>(model.total_parameters());
      peak_bound = std::max(peak_bound, memory_from_parts(rank_memory_parts(parts, share, params_in_flight, holds_last,
                                                                            recv_buffers, held, ws_backward),
                                                          stage_cluster.gpu, c)
                                            .peak);
    }
    step_bound = std::max(step_bound, static_cast<double>(ga) * (start_us + rank0_end) + optimizer[0]);
    PipelineBound b;
    b.step_time_us = step_bound * (1 - kBoundMargin);
    b.peak_memory = peak_bound * (1 - kBoundMargin);
    b.tokens_per_second_per_gpu =
        b.step_time_us > 0 ? static_cast<double>(ga) * static_cast<double>(plan.local_batch_size) *
                                 static_cast<double>(prog.local_seq_len()) /
                                 (static_cast<double>(prog.tp) * split.pp * b.step_time_us * 1e-6) * (1 + kBoundMargin)
                           : 1e300;
    if (prune(b)) return std::nullopt;
  }
  const PipelineTimeline ptl = simulate_schedule(sched, stage_costs, p2p_us);

  // The step (see the header).
  PipelineReport pr;
  pr.pp = split.pp;
  pr.schedule = plan.pp_schedule;
  pr.stages_per_rank = split.stages_per_rank;
  pr.microbatches = split.microbatches;
  pr.microbatch_size = plan.pp_microbatch_size;
  pr.stage_layers = split.stage_layers;
  pr.stage_costs = stage_costs;
  pr.p2p_bytes = p2p_bytes;
  pr.p2p_us = p2p_us;
  pr.p2p_network = network;
  pr.schedule_ms = ptl.step_us / 1e3;
  pr.bubble_fraction = ptl.bubble_fraction();
  double step_us = 0, critical_exposed_us = 0, critical_optimizer_us = 0;
  std::vector<MemoryReport> memories;
  for (int r = 0; r < split.pp; ++r) {
    const PipelineRankTimeline& rt = ptl.ranks[static_cast<size_t>(r)];
    PipelineRankReport rr;
    rr.stages = sched.stages_of_rank(r);
    double optimizer = grad_norm_us, params_in_flight = 0, parameters = 0, ws_backward = 0;
    bool holds_first = false, holds_last = false;
    for (int s : rr.stages) {
      const StageTimes& t = st[static_cast<size_t>(s)];
      rr.layers += split.stage_layers[static_cast<size_t>(s)];
      optimizer += t.optimizer_us;
      params_in_flight += t.params_in_flight;
      parameters += t.parameters;
      ws_backward = std::max(ws_backward, t.ws_backward);
      holds_first = holds_first || s == 0;
      holds_last = holds_last || s == last;
    }
    if (holds_first || holds_last) optimizer += optimizer_segment_us;
    // Each stage's gradients are reduced once, after its last backward action (torch's stage runs every backward
    // with requires_gradient_sync False, then FSDP's post_backward after the last one), on the DP stream in turn,
    // overlapping what the rank computes afterwards; what is left when the rank's last action ends is exposed.
    const double rank_end_us = rt.actions.empty() ? 0.0 : rt.actions.back().end_us;
    std::vector<std::pair<double, double>> reductions;  // (the stage's last backward end, its reduction)
    for (int s : rr.stages) {
      double last_bwd = 0;
      for (const TimedPipelineAction& a : rt.actions)
        if (a.action.stage == s && a.action.kind != PipelineActionKind::F) last_bwd = std::max(last_bwd, a.end_us);
      reductions.emplace_back(last_bwd, st[static_cast<size_t>(s)].reduce_us);
    }
    std::sort(reductions.begin(), reductions.end());
    double dp_free = 0;
    for (const auto& [at, us] : reductions) dp_free = std::max(dp_free, at) + us;
    const double exposed_reduce = std::max(0.0, dp_free - rank_end_us);
    const double pass_us = start_us + rank_end_us + exposed_reduce;
    const double end_us = static_cast<double>(ga) * pass_us + optimizer;
    rr.busy_ms = rt.busy_us / 1e3;
    rr.idle_ms = rt.idle_us / 1e3;
    rr.end_ms = end_us / 1e3;
    // What the rank holds for its microbatches, walked along its actions (see the header's "Memory per rank"): an F
    // adds its stage's saved tensors and output (fwd_cache; the last stage's logits stay in output_chunks until the
    // next step); a B or I keeps the input gradient on the stage's receive buffer until the next step and starts the
    // stage's fp32 unsharded gradients; a B or W releases the microbatch, and the stage's last one its gradients
    // (FSDP's post_backward reduces them to the sharded fp32 gradients of the model states).
    const double m_count = static_cast<double>(split.microbatches), p2p = static_cast<double>(p2p_bytes);
    // Receive buffers from a neighbouring stage on another rank (a V schedule's adjacent stages on one rank pass the
    // tensors directly: set_local_fwd_input and set_local_bwd_input replace the buffers).
    auto on_rank = [&](int s) { return std::find(rr.stages.begin(), rr.stages.end(), s) != rr.stages.end(); };
    double recv_buffers = 0;
    for (int s : rr.stages)
      recv_buffers += m_count * p2p * ((s > 0 && !on_rank(s - 1) ? 1 : 0) + (s < last && !on_rank(s + 1) ? 1 : 0));
    auto per_microbatch = [&](int s) {
      const double saved = st[static_cast<size_t>(s)].saved_bytes;
      return std::max(0.0, saved - (s > 0 ? p2p : 0.0)) + (s < last ? p2p : 0.0);
    };
    auto is_backward = [](PipelineActionKind k) { return k != PipelineActionKind::F; };
    auto releases = [](PipelineActionKind k) { return k == PipelineActionKind::B || k == PipelineActionKind::W; };
    std::vector<size_t> last_release(static_cast<size_t>(stages), rt.actions.size());
    for (size_t i = 0; i < rt.actions.size(); ++i)
      if (releases(rt.actions[i].action.kind)) last_release[static_cast<size_t>(rt.actions[i].action.stage)] = i;
    std::vector<char> grads_started(static_cast<size_t>(stages), 0);
    double held = 0, grads = 0, held_at_peak = 0, grads_at_peak = 0;
    int count = 0;
    for (size_t i = 0; i < rt.actions.size(); ++i) {
      const PipelineAction& a = rt.actions[i].action;
      const auto s = static_cast<size_t>(a.stage);
      if (a.kind == PipelineActionKind::F) {
        held += per_microbatch(a.stage) + (a.stage == last ? parts.logits : 0.0);
        ++count;
      }
      if (is_backward(a.kind) && a.kind != PipelineActionKind::W) held += a.stage > 0 ? p2p : 0.0;
      if (is_backward(a.kind) && !grads_started[s]) grads_started[s] = 1, grads += st[s].unsharded_grads;
      if (held + grads > held_at_peak + grads_at_peak) {
        held_at_peak = held, grads_at_peak = grads;
        rr.peak_activations = std::max(rr.peak_activations, count);
      }
      if (releases(a.kind)) held -= per_microbatch(a.stage), --count;
      if (i == last_release[s]) grads -= st[s].unsharded_grads;
    }
    rr.peak_activations = std::max(rr.peak_activations, rt.peak_activations);
    rr.activations = recv_buffers + held_at_peak;
    // The rank's memory through memory_from_parts(): its share of the model states, what it holds for microbatches as
    // one "block", its stages' parameters resident, the head's working set only where the head is.
    const double share = parameters / static_cast<double>(model.total_parameters());
    MemoryReport m = memory_from_parts(
        rank_memory_parts(parts, share, params_in_flight, holds_last, rr.activations, grads_at_peak, ws_backward),
        stage_cluster.gpu, c);
    m.saved_per_block = parts.saved_per_block;
    m.saved_per_checkpointed_block = parts.saved_per_checkpointed_block;
    m.checkpointed_blocks = parts.checkpointed_blocks;
    m.saved_per_dense_block = parts.saved_per_dense_block;
    m.dense_blocks = parts.dense_blocks;
    rr.peak_memory = m.peak;
    memories.push_back(m);
    if (end_us > step_us) {
      step_us = end_us;
      pr.critical_rank = r;
      critical_exposed_us = static_cast<double>(ga) * (start_us + exposed_reduce);
      critical_optimizer_us = optimizer;
    }
    pr.ranks.push_back(std::move(rr));
    pr.timeline.push_back(rt.actions);
  }
  pr.fsdp_exposed_ms = critical_exposed_us / 1e3;
  pr.optimizer_ms = critical_optimizer_us / 1e3;

  StepReport r = costed.report;
  r.toggles() = plan.toggles();
  r.tp_degree = prog.tp;
  r.dp_shard = prog.dp / prog.cp;
  r.dp_replicate = prog.dp_replicate;
  r.activation_checkpointing = prog.training.activation_checkpointing;
  r.local_batch_size = plan.local_batch_size;
  r.seq_len = prog.training.seq_len;
  r.gradient_accumulation_steps = ga;
  r.nodes = cluster.nodes;
  r.gpus_per_node = cluster.gpus_per_node;
  r.step_time_ms = step_us / 1e3;
  const double step_s = step_us * 1e-6;
  r.tokens_per_second_per_gpu = step_s > 0 ? static_cast<double>(ga) * static_cast<double>(plan.local_batch_size) *
                                                 static_cast<double>(prog.local_seq_len()) /
                                                 (static_cast<double>(prog.tp) * split.pp * step_s)
                                           : 0.0;
  r.mfu = r.tokens_per_second_per_gpu * model.training_flops_per_token(training.seq_len) /
          cluster.gpu.peak_flops(DType::bf16);
  // The critical rank's breakdown: its busy time (compute and the TP waits inside its stages), FSDP's exposed part;
  // the rest (bubbles, p2p waits) is the pipeline's, reported as its bubble.
  const PipelineRankReport& cr = pr.ranks[static_cast<size_t>(pr.critical_rank)];
  double exposed_tp_per_pass = 0;
  for (int s : cr.stages) exposed_tp_per_pass += st[static_cast<size_t>(s)].exposed_tp_us * split.microbatches;
  r.exposed_tp_comm_ms = static_cast<double>(ga) * exposed_tp_per_pass / 1e3;
  r.compute_ms = static_cast<double>(ga) * cr.busy_ms - r.exposed_tp_comm_ms + critical_optimizer_us / 1e3;
  r.exposed_dp_comm_ms = pr.fsdp_exposed_ms;
  // The top ops are the critical rank's: the microbatch Program's ops of its stages (its blocks' instances; the
  // embedding's segments on stage 0's rank, the head on the last's), each run per microbatch of every pass, but FSDP's
  // once per pass (gathered once and kept: no backward re-gather; reduced after the stage's last backward), and the
  // gradient norm and the optimizer's once per step, as the step above counts them.
  std::vector<char> on_critical(static_cast<size_t>(model.n_layers), 0);
  bool critical_first = false, critical_last = false;
  for (int s : cr.stages) {
    critical_first = critical_first || s == 0;
    critical_last = critical_last || s == last;
    const int first = split.first_layer(s);
    for (int l = 0; l < split.stage_layers[static_cast<size_t>(s)]; ++l)
      on_critical[static_cast<size_t>(first + l)] = 1;
  }
  const double per_pass = static_cast<double>(ga), per_microbatch = per_pass * static_cast<double>(split.microbatches);
  // A per-layer segment's instances on the critical rank, counted once per segment (not once per op: the count is
  // the same for every op of the segment, and an integer, so the sum is exact either way).
  std::vector<double> critical_instances(prog.segments.size(), -1);
  r.top_ops = top_op_summaries(prog, costs, 12 /* make_report()'s */, [&](size_t si, size_t j) -> double {
    const Segment& seg = prog.segments[si];
    double instances = 0;
    switch (seg.kind) {
      case SegmentKind::embed_fwd:
      case SegmentKind::embed_bwd:
        instances = critical_first ? 1 : 0;
        break;
      case SegmentKind::head:
        instances = critical_last ? 1 : 0;
        break;
      case SegmentKind::optimizer:
        return critical_first || critical_last ? 1 : 0;
      case SegmentKind::grad_norm:
        return 1;
      default:
        if (critical_instances[si] < 0) {
          critical_instances[si] = 0;
          for (int i = 0; i < tl.segments[si].instances; ++i) {
            const int layer = instance_layer(prog, seg, i);
            critical_instances[si] += layer >= 0 && on_critical[static_cast<size_t>(layer)] ? 1 : 0;
          }
        }
        instances = critical_instances[si];
        if (seg.kind == SegmentKind::block_optimizer) return instances;
    }
    const Op& op = seg.ops[j];
    const auto* c = std::get_if<CollectiveOp>(&op.kind);
    if (c && is_dp_stream(stream_of(op))) {
      return is_fsdp_regather(op) ? 0 : instances * per_pass;
    }
    return instances * per_microbatch;
  });
  const auto worst = std::max_element(memories.begin(), memories.end(),
                                      [](const MemoryReport& a, const MemoryReport& b) { return a.peak < b.peak; });
  r.memory = *worst;
  // What a GPU holds: its pp rank's stages (the largest rank's; plans/lower/parameter_count.h), not the whole model's.
  r.parameters = pipeline_parameter_count(prog, split, plan.pp_schedule);
  r.pipeline = std::move(pr);
  return r;
}

}  // namespace tptune
