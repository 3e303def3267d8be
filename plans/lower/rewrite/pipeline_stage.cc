// The Program of one pipeline stage; see pipeline_stage.h.
#include "plans/lower/rewrite/pipeline_stage.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "plans/util/checked_math.h"
#include "plans/util/error.h"

namespace tptune {
namespace {

const LayerChain& chain_of(const Program& p, bool reverse) {
  for (const LayerChain& c : p.chains)
    if (c.reverse == reverse) return c;
  throw Error(fmt::format("pipeline stage: the Program has no {} layer chain", reverse ? "backward" : "forward"));
}

int64_t local_bytes(const TensorDesc& d, const char* what) {
  return checked_mul(numel(d.local_shape), bytes_per_element(d.dtype), what);
}

// Builds one stage's Program from the whole-model microbatch Program.
class StageBuilder {
 public:
  StageBuilder(const Program& mb, const std::vector<PipelineStageSpan>& stages, int s)
      : mb_(mb), stages_(stages), s_(s), remap_(mb.tensors.size(), -1) {
    out_.model = mb.model;
    out_.training = mb.training;
    out_.plan = mb.plan;
    out_.tp = mb.tp, out_.dp = mb.dp, out_.dp_replicate = mb.dp_replicate, out_.cp = mb.cp;
    out_.ep = mb.ep, out_.efsdp = mb.efsdp;
    const PipelineStageSpan& sp = stages[size_t(s)];
    out_.stage = {s, static_cast<int>(stages.size()), sp.first_layer, sp.layers};
  }

  Program build() {
    const int S = static_cast<int>(stages_.size());
    const bool first = s_ == 0, last = s_ == S - 1;
    const LayerChain& fwd = chain_of(mb_, false);
    const LayerChain& bwd = chain_of(mb_, true);
    // The chains' ends: the microbatch Program's where the stage holds the embedding or the head, else transfers.
    const TensorId fwd_source = first ? keep(fwd.source) : transfer_tensor(fwd.source, "pp.recv_fwd.activation");
    const TensorId fwd_sink = last ? keep(fwd.sink) : transfer_tensor(fwd.sink, "pp.send_fwd.activation");
    const TensorId bwd_source = last ? keep(bwd.source) : transfer_tensor(bwd.source, "pp.recv_bwd.gradient");
    const TensorId bwd_sink = first ? keep(bwd.sink) : transfer_tensor(bwd.sink, "pp.send_bwd.gradient");
    out_.chains.push_back({keep(fwd.in), keep(fwd.out), fwd_source, fwd_sink, false});
    out_.chains.push_back({keep(bwd.in), keep(bwd.out), bwd_source, bwd_sink, true});

    // In torch's order (see the header): each segment kind of the microbatch Program where the stage holds it.
    auto each = [&](SegmentKind kind, auto&& fn) {
      for (const Segment& seg : mb_.segments)
        if (seg.kind == kind) fn(seg);
    };
    auto whole = [&](const Segment& seg) { copy_whole(seg); };
    auto blocks = [&](const Segment& seg) { copy_blocks(seg); };
    if (!first) transfer(SegmentKind::pp_recv_fwd, Phase::forward, fwd_source, s_ - 1, false);
    if (first) each(SegmentKind::embed_fwd, whole);
    each(SegmentKind::block_fwd, blocks);
    if (!last) transfer(SegmentKind::pp_send_fwd, Phase::forward, fwd_sink, s_ + 1, true);
    if (last) each(SegmentKind::head, whole);
    if (!last) transfer(SegmentKind::pp_recv_bwd, Phase::backward, bwd_source, s_ + 1, false);
    each(SegmentKind::block_bwd, blocks);
    if (!first) transfer(SegmentKind::pp_send_bwd, Phase::backward, bwd_sink, s_ - 1, true);
    if (first) each(SegmentKind::embed_bwd, whole);
    each(SegmentKind::grad_norm, [&](const Segment& seg) { grad_norm(seg); });
    each(SegmentKind::block_optimizer, blocks);
    each(SegmentKind::optimizer, [&](const Segment& seg) { copy_own_ops(seg); });
    out_.tokens = mapped(mb_.tokens);
    out_.targets = mapped(mb_.targets);
    out_.loss = mapped(mb_.loss);
    return std::move(out_);
  }

 private:
  // The microbatch Program's tensor `t` in the stage's Program (added on first use). A block variant's per-layer
  // tensor (TensorDesc::first_layer/layer_count: a dense-first mixture of experts) keeps the layers the stage holds.
  TensorId keep(TensorId t) {
    if (t < 0) return -1;
    if (remap_.at(size_t(t)) < 0) {
      TensorDesc d = mb_.tensor(t);
      if (d.per_layer && d.layer_count > 0) {
        const int begin = std::max(d.first_layer, out_.first_layer());
        const int end = std::min(d.first_layer + d.layer_count, out_.first_layer() + out_.layer_count());
        if (begin >= end)
          throw Error(fmt::format("pipeline stage {}: tensor {} of blocks {}..{} is not in its blocks {}..{}", s_,
                                  d.name, d.first_layer, d.first_layer + d.layer_count - 1, out_.first_layer(),
                                  out_.first_layer() + out_.layer_count() - 1));
        d.first_layer = begin, d.layer_count = end - begin;
      }
      remap_[size_t(t)] = static_cast<TensorId>(out_.tensors.size());
      out_.tensors.push_back(std::move(d));
    }
    return remap_[size_t(t)];
  }
  TensorId mapped(TensorId t) const { return t < 0 ? -1 : remap_.at(size_t(t)); }
  bool kept(TensorId t) const { return mapped(t) >= 0; }

  // A transfer tensor: the chain tensor `like`'s local data under a name of its own, global (one per stage).
  TensorId transfer_tensor(TensorId like, const char* name) {
    TensorDesc d = mb_.tensor(like);
    d.name = name;
    d.per_layer = false;
    d.param.clear();
    d.param_shard_dim = -1;
    out_.tensors.push_back(std::move(d));
    return static_cast<TensorId>(out_.tensors.size()) - 1;
  }

  // A segment of one transfer: a send of `t` to stage `peer`, or a receive of it from there.
  void transfer(SegmentKind kind, Phase phase, TensorId t, int peer, bool send) {
    const TensorDesc& d = out_.tensor(t);
    Op op;
    op.id = 0;
    op.module = "pp";
    op.name = std::string(to_string(kind));
    op.phase = phase;
    (send ? op.inputs : op.outputs).push_back(t);
    CollectiveOp c{
        CollectiveKind::p2p, Group::pp, ReduceOp::sum, d.dtype, local_bytes(d, "pipeline transfer bytes"), -1, -1};
    c.peer = stages_[size_t(peer)].rank;
    c.peer_stage = peer;
    op.kind = c;
    Segment seg;
    seg.kind = kind;
    seg.ops.push_back(std::move(op));
    out_.segments.push_back(std::move(seg));
  }

  Op mapped_op(const Op& op) {
    Op o = op;
    for (TensorId& t : o.inputs) t = keep(t);
    for (TensorId& t : o.outputs) t = keep(t);
    return o;
  }

  void copy_whole(const Segment& seg) {
    Segment out = seg;
    for (Op& op : out.ops) op = mapped_op(op);
    out_.segments.push_back(without_backward_gathers(std::move(out)));
  }

  // Under PP torchtitan keeps FSDP's gathered parameters through the step (reshard_after_forward False): a backward
  // segment gathers none, the routed experts' (efsdp) included: they are fully_shard'ed with the block, under the same
  // reshard_after_forward (torchtitan 0.3.0 distributed/fsdp.py:176-177, 237-241, 296-300). Ids and deps renumbered.
  static Segment without_backward_gathers(Segment seg) {
    auto regather = [](const Op& op) { return is_fsdp_regather(op); };
    std::vector<int> new_id(seg.ops.size(), -1);
    std::vector<Op> ops;
    for (Op& op : seg.ops) {
      if (regather(op)) continue;
      new_id[size_t(op.id)] = static_cast<int>(ops.size());
      std::vector<int> deps;
      for (int d : op.deps)
        if (new_id.at(size_t(d)) >= 0) deps.push_back(new_id[size_t(d)]);
      op.deps = std::move(deps);
      op.id = static_cast<int>(ops.size());
      ops.push_back(std::move(op));
    }
    seg.ops = std::move(ops);
    return seg;
  }

  // A block segment cut to the stage's blocks (nothing when they do not meet).
  void copy_blocks(const Segment& seg) {
    const int begin = std::max(seg.first_layer, out_.first_layer());
    const int end = std::min(seg.first_layer + segment_instances(mb_, seg), out_.first_layer() + out_.layer_count());
    if (begin >= end) return;
    Segment out = seg;
    out.first_layer = begin;
    out.layer_count = out.repeat = end - begin;
    for (Op& op : out.ops) op = mapped_op(op);
    out_.segments.push_back(without_backward_gathers(std::move(out)));
  }

  // Whether an op of the optimizer's segment is the stage's: it reads a tensor that the stage's compute uses (its
  // parameter, its gradient) or that an op kept before it produced (the all-reduced Partial gradient).
  bool owns(const Op& op) const {
    for (TensorId t : op.inputs)
      if (kept(t)) return true;
    return false;
  }

  // The optimizer's once-per-step segment with the stage's ops only, ids and deps renumbered.
  void copy_own_ops(const Segment& seg) {
    Segment out = seg;
    out.ops.clear();
    std::vector<int> new_id(seg.ops.size(), -1);
    for (const Op& op : seg.ops) {
      if (!owns(op)) continue;
      Op o = mapped_op(op);
      new_id[size_t(op.id)] = o.id = static_cast<int>(out.ops.size());
      o.deps.clear();
      for (int d : op.deps)
        if (new_id.at(size_t(d)) >= 0) o.deps.push_back(new_id[size_t(d)]);
      out.ops.push_back(std::move(o));
    }
    if (!out.ops.empty()) out_.segments.push_back(std::move(out));
  }

  // Elements of the stage's parameters (block parameters once per block it holds), over FSDP's shards (a routed
  // expert's over efsdp under EP): what lower.cc's grad_norm counts for the whole model.
  int64_t stage_gradient_elements(int64_t& n_grads) const {
    int64_t elems = 0;
    n_grads = 0;
    for (const TensorDesc& d : out_.tensors) {
      if (d.role != TensorRole::parameter) continue;
      const int64_t copies = out_.copies(d);  // (a block variant's: the stage's blocks of it)
      elems =
          checked_add(elems, checked_mul(numel(d.local_shape) / out_.fsdp_degree(d), copies, "gradients"), "gradients");
      n_grads = checked_add(n_grads, copies, "gradients");
    }
    return elems;
  }

  // The gradient norm of the stage's gradients (lower.cc's grad_norm over them), then the pp all-reduce of the squared
  // total that torchtitan's clip_grad_norm_ adds under PP, before the clip.
  void grad_norm(const Segment& seg) {
    int64_t n_grads = 0;
    const int64_t elems = stage_gradient_elements(n_grads);
    const Shape norms{n_grads};
    Segment out;
    out.kind = seg.kind;
    TensorId norm = -1;
    for (const Op& op : seg.ops) {
      Op o = op;
      o.deps.clear();
      o.inputs.clear();
      for (TensorId t : op.inputs)
        if (mb_.tensor(t).role == TensorRole::param_grad && kept(t)) o.inputs.push_back(mapped(t));
      if (auto* e = std::get_if<ElementwiseOp>(&o.kind); e && e->fn == ElementwiseOp::Fn::grad_norm) {
        e->bytes = checked_mul(elems, 4, "gradient bytes"), e->flops = 2 * elems;
        TensorDesc d = mb_.tensor(op.outputs.at(0));
        d.local_shape = d.global_shape = norms;
        out_.tensors.push_back(std::move(d));
        norm = static_cast<TensorId>(out_.tensors.size()) - 1;
        o.outputs = {norm};
      } else if (auto* c = std::get_if<CollectiveOp>(&o.kind)) {
        c->bytes = checked_mul(n_grads, 4, "gradient norm bytes");
        o.inputs = o.outputs = {norm};
      } else if (e && e->fn == ElementwiseOp::Fn::grad_clip) {
        // torchtitan: total_norm **= 2; dist.all_reduce(total_norm, SUM, pp group); total_norm **= 0.5. The total is
        // a scalar the clip reads (its reduction from the norms belongs to the clip op, as in the whole Program).
        TensorDesc total = mb_.tensor(op.outputs.at(0));
        total.name = "grad_norm.total";
        total.placement = Placement::P();
        out_.tensors.push_back(std::move(total));
        const TensorId tot = static_cast<TensorId>(out_.tensors.size()) - 1;
        Op ar;
        ar.module = "grad_norm";
        ar.name = "grad_norm.pp.all_reduce";
        ar.phase = op.phase;
        ar.inputs = ar.outputs = {tot};
        ar.kind = CollectiveOp{CollectiveKind::all_reduce, Group::pp, ReduceOp::sum, DType::fp32, 4, -1, -1};
        ar.id = static_cast<int>(out.ops.size());
        out.ops.push_back(std::move(ar));
        e->bytes = checked_mul(elems, 8, "gradient bytes"), e->flops = elems;
        o.inputs.insert(o.inputs.begin(), {norm, tot});
        o.outputs = {keep(op.outputs.at(0))};
      }
      o.id = static_cast<int>(out.ops.size());
      if (o.id > 0) o.deps = {o.id - 1};
      out.ops.push_back(std::move(o));
    }
    out_.segments.push_back(std::move(out));
  }

  const Program& mb_;
  const std::vector<PipelineStageSpan>& stages_;
  const int s_;
  std::vector<TensorId> remap_;
  Program out_;
};

}  // namespace

bool is_fsdp_regather(const Op& op) {
  const auto* c = std::get_if<CollectiveOp>(&op.kind);
  return c && (c->group == Group::dp || c->group == Group::efsdp) && c->kind == CollectiveKind::all_gather &&
         op.inputs.empty() && op.phase != Phase::forward;
}

int pipeline_stage_rank(StagePlacement placement, int pp, int num_stages, int stage) {
  if (placement == StagePlacement::v && stage >= pp) return num_stages - 1 - stage;
  return stage % pp;
}

std::vector<PipelineStageSpan> pipeline_stage_spans(const PipelineSplit& split, PipelineScheduleKind schedule) {
  std::vector<PipelineStageSpan> spans;
  const int S = split.num_stages();
  for (int s = 0; s < S; ++s)
    spans.push_back({split.first_layer(s), split.stage_layers[size_t(s)],
                     pipeline_stage_rank(stage_placement(schedule), split.pp, S, s)});
  return spans;
}

const TensorDesc& pipeline_boundary_tensor(const Program& microbatch) {
  const LayerChain& c = chain_of(microbatch, false);
  return microbatch.tensor(c.out >= 0 ? c.out : c.source);
}

int64_t pipeline_transfer_bytes(const Program& microbatch) {
  return local_bytes(pipeline_boundary_tensor(microbatch), "pipeline transfer bytes");
}

Program lower_pipeline_stage(const Program& microbatch, const std::vector<PipelineStageSpan>& stages, int stage,
                             bool check_cover) {
  if (microbatch.stage.index >= 0)
    throw Error(
        fmt::format("pipeline stage: expected the Program of the whole model, got stage {}'s", microbatch.stage.index));
  const int S = static_cast<int>(stages.size());
  if (stage < 0 || stage >= S)
    throw Error(fmt::format("pipeline stage: stage {} of a pipeline of {} stages", stage, S));
  const int L = static_cast<int>(microbatch.model.n_layers);
  for (int s = 0, next = 0; s < S; ++s) {
    const PipelineStageSpan& sp = stages[size_t(s)];
    if (sp.first_layer < 0 || sp.layers < 0 || sp.first_layer + sp.layers > L)
      throw Error(fmt::format("pipeline stage {}: blocks {}..{} outside the model's {} blocks", s, sp.first_layer,
                              sp.first_layer + sp.layers - 1, L));
    if (check_cover && sp.first_layer != next)
      throw Error(fmt::format("pipeline stage {}: starts at block {}, expected {} (stages hold consecutive blocks)", s,
                              sp.first_layer, next));
    next = sp.first_layer + sp.layers;
    if (check_cover && s == S - 1 && next != L)
      throw Error(fmt::format("pipeline stage {}: the stages hold blocks 0..{}, the model has {}", s, next - 1, L));
  }
  return StageBuilder(microbatch, stages, stage).build();
}

}  // namespace tptune
