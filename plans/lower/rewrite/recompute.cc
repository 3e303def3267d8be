#include "plans/lower/rewrite/recompute.h"

#include <algorithm>
#include <variant>

namespace tptune {

// An FSDP all-gather of a block's parameters (dp's, or the routed experts' on efsdp).
bool is_fsdp_gather(const Op& op) {
  auto* c = std::get_if<CollectiveOp>(&op.kind);
  return c && c->kind == CollectiveKind::all_gather && (c->group == Group::dp || c->group == Group::efsdp) &&
         op.inputs.empty();
}

// Activation checkpointing: the forward ops to re-run at the start of the block backward.
// full: every forward op whose output backward needs (transitively). selective (torchtitan's op policy): matmul
// outputs are saved except every second matmul, attention and reduce-scatter outputs and amax reductions are saved;
// every other op (norms, rope, activations, adds, all-gathers, all-reduces, casts) is recomputed when needed.
// Without early stop (torchtitan 0.3) the checkpointed block re-runs whole: every candidate, needed or not.
// `saves_rs`: the selective policy saves reduce-scatter outputs (functional collectives); false where the backend
// issues c10d collectives the policy does not see (torchtitan 0.3's spmd_types).
// The indices in fwd of the ops to re-run, ascending, go into `out` (emptied first); recompute_op() makes each.
void recompute_ops(const Segment& fwd, const Segment& bwd, ActivationCheckpointing ac, bool early_stop, bool saves_rs,
                   std::vector<size_t>& out) {
  out.clear();
  if (ac == ActivationCheckpointing::none) return;
  std::vector<bool> candidate(fwd.ops.size(), true);
  if (ac == ActivationCheckpointing::selective) {
    int mm = 0;
    for (size_t i = 0; i < fwd.ops.size(); ++i) {
      const Op& op = fwd.ops[i];
      if (std::holds_alternative<GemmOp>(op.kind)) candidate[i] = (++mm % 2 == 0);
      if (std::holds_alternative<AttentionOp>(op.kind)) candidate[i] = false;
      // Ring attention (context parallelism) runs inside the one SDPA op the policy saves: its K/V transfers and
      // merges are part of the saved attention, not recomputed.
      if (auto* el = std::get_if<ElementwiseOp>(&op.kind); el && el->fn == ElementwiseOp::Fn::attention_merge)
        candidate[i] = false;
      if (auto* c = std::get_if<CollectiveOp>(&op.kind); c && c->group == Group::cp) candidate[i] = false;
      if (auto* c = std::get_if<CollectiveOp>(&op.kind)) {
        if ((c->kind == CollectiveKind::reduce_scatter && saves_rs) || c->reduce == ReduceOp::max) candidate[i] = false;
      }
      if (auto* c = std::get_if<CastFp8Op>(&op.kind); c && c->stage == CastFp8Op::Stage::amax) candidate[i] = false;
      // torchtitan 0.3.0's policy (distributed/activation_checkpoint.py) also saves all_to_all_single outputs and
      // torch.topk (the MoE router's choice, kept stable between forward and recompute).
      if (auto* c = std::get_if<CollectiveOp>(&op.kind); c && c->group == Group::ep) candidate[i] = false;
      if (auto* el = std::get_if<ElementwiseOp>(&op.kind); el && el->fn == ElementwiseOp::Fn::moe_router)
        candidate[i] = false;
    }
  }
  for (size_t i = 0; i < fwd.ops.size(); ++i)  // FSDP all-gathers are not part of the checkpointed region
    if (auto* c = std::get_if<CollectiveOp>(&fwd.ops[i].kind); c && (c->group == Group::dp || c->group == Group::efsdp))
      candidate[i] = false;
  // By TensorId (flat vectors: this runs once per candidate policy in the search). `written`: a forward op writes it.
  TensorId n_tensors = 0;
  for (const Segment* s : {&fwd, &bwd})
    for (const Op& op : s->ops) {
      for (TensorId t : op.inputs) n_tensors = std::max(n_tensors, t + 1);
      for (TensorId t : op.outputs) n_tensors = std::max(n_tensors, t + 1);
    }
  // (per thread: the search finishes thousands of Programs, and large temporaries cost more in the allocator than here)
  thread_local std::vector<char> written, needed;
  written.assign(static_cast<size_t>(n_tensors), 0);
  needed.assign(static_cast<size_t>(n_tensors), 0);
  for (const Op& op : fwd.ops)
    for (TensorId t : op.outputs) written[static_cast<size_t>(t)] = 1;
  for (const Op& op : bwd.ops)
    for (TensorId t : op.inputs)
      if (written[static_cast<size_t>(t)]) needed[static_cast<size_t>(t)] = 1;
  std::vector<bool> redo(fwd.ops.size(), false);
  for (size_t i = fwd.ops.size(); i-- > 0;) {
    const Op& op = fwd.ops[i];
    if (!candidate[i]) continue;
    bool useful = !early_stop;
    for (TensorId t : op.outputs) useful |= needed[static_cast<size_t>(t)] != 0;
    if (!useful) continue;
    redo[i] = true;
    for (TensorId t : op.inputs)
      if (written[static_cast<size_t>(t)]) needed[static_cast<size_t>(t)] = 1;
  }
  for (size_t i = 0; i < fwd.ops.size(); ++i)
    if (redo[i]) out.push_back(i);
}

// `op` (any Op: its buffers are reused) set to the recompute op of forward op `f`.
void recompute_op(const Op& f, Op& op) {
  op.id = f.id;
  op.module = f.module;
  op.name.clear();
  if (!f.name.empty()) {                  // (empty: lowered without names)
    op.name.reserve(f.name.size() + 10);  // one allocation for the name and its suffix
    op.name = f.name;
    op.name += ".recompute";
  }
  op.phase = Phase::recompute;
  op.deps.clear();  // (finishing computes the block backward's)
  op.inputs = f.inputs;
  op.outputs = f.outputs;
  op.kind = f.kind;
  op.chunk = f.chunk;
}

}  // namespace tptune
