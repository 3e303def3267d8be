#include "plans/lower/finish.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <vector>

#include "plans/lower/incremental.h"
#include "plans/lower/input_checks.h"
#include "plans/lower/rewrite/async_tp.h"
#include "plans/lower/rewrite/compile_fusion.h"
#include "plans/lower/rewrite/recompute.h"
#include "plans/util/error.h"

namespace tptune {

namespace lowering {

namespace {

// Scratch of finalize_deps(), one per thread (reused by every segment and Program: the search finishes thousands):
// `last` and `slot_head` hold at least n_tensors entries (for_tensors()), all -1 between calls (finalize_deps()
// resets the entries it sets).
struct DepsScratch {
  DepsScratch& for_tensors(size_t n_tensors) {
    if (last.size() < n_tensors) {
      last.resize(n_tensors, -1);
      slot_head.resize(n_tensors, -1);
    }
    return *this;
  }
  std::vector<int> last;       // by TensorId: the last op of the segment that wrote it
  std::vector<int> slot_head;  // by TensorId: its first entry in `slots`, -1 when none
  struct Slot {
    int step, writer, next;  // next: the tensor's next entry, -1 at the end
  };
  std::vector<Slot> slots;        // the last async-TP all-gather step that wrote each (tensor, ring step)
  std::vector<TensorId> slotted;  // the tensors with an entry in slot_head
  std::vector<int> deps;
};

// Computes each op's deps within its segment: the last writer of every input and output. Async-TP all-gather
// chunks are slot-aware: a matmul of ring step j depends on the p2p of step j, not on later steps that fill other
// slots of the same tensor.
void finalize_deps(Segment& s, DepsScratch& x) {
  std::vector<int>& last = x.last;
  std::vector<int>& deps = x.deps;
  // The entry of (t, step), or nullptr.
  auto slot = [&](TensorId t, int step) -> DepsScratch::Slot* {
    for (int e = x.slot_head[static_cast<size_t>(t)]; e >= 0; e = x.slots[static_cast<size_t>(e)].next)
      if (x.slots[static_cast<size_t>(e)].step == step) return &x.slots[static_cast<size_t>(e)];
    return nullptr;
  };
  for (Op& op : s.ops) {
    deps.clear();
    const bool ag_chunk = op.chunk.pattern == ChunkRef::Pattern::all_gather && !op.is_collective();
    for (TensorId t : op.inputs) {
      if (ag_chunk) {
        if (const DepsScratch::Slot* w = slot(t, op.chunk.step)) {
          deps.push_back(w->writer);
          continue;
        }
      }
      if (const int w = last[static_cast<size_t>(t)]; w >= 0) deps.push_back(w);
    }
    for (TensorId t : op.outputs)
      if (const int w = last[static_cast<size_t>(t)]; w >= 0) deps.push_back(w);
    std::sort(deps.begin(), deps.end());  // as a std::set gave them: ascending, each once
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    op.deps.assign(deps.begin(), deps.end());
    for (TensorId t : op.outputs) last[static_cast<size_t>(t)] = op.id;
    if (op.is_collective() && op.chunk.pattern == ChunkRef::Pattern::all_gather)
      for (TensorId t : op.outputs) {
        if (DepsScratch::Slot* w = slot(t, op.chunk.step)) {
          w->writer = op.id;
          continue;
        }
        int& head = x.slot_head[static_cast<size_t>(t)];
        if (head < 0) x.slotted.push_back(t);
        x.slots.push_back({op.chunk.step, op.id, head});
        head = static_cast<int>(x.slots.size() - 1);
      }
  }
  for (const Op& op : s.ops)
    for (TensorId t : op.outputs) last[static_cast<size_t>(t)] = -1;
  for (TensorId t : x.slotted) x.slot_head[static_cast<size_t>(t)] = -1;
  x.slotted.clear();
  x.slots.clear();
}

// Whether finish_in_place() changes segment i of a prepared Program: the block backward (recompute ops; both
// segments when ac_layers splits it, or one per block variant), and with async TP the segments from it on (their
// rewrite, which numbers its tensors after the recompute ops').
bool finish_changes(const Program& prog, size_t i) {
  return prog.segments[i].kind == SegmentKind::block_bwd || (prog.plan.async_tp && i >= 3);
}
// The last steps of finishing: torch.compile's fusions of a compiled Program from segment `fuse_from` on, then the
// deps of every segment that finishing or fusing changed (of every segment unless `prepared` holds the others').
void fuse_and_finalize_deps(Program& prog, const UnfinishedProgram* prepared, size_t fuse_from) {
  std::vector<bool> fused;
  if (prog.training.compiled(prog.plan.async_tp)) fused = apply_compile_fusion(prog, fuse_from);
  thread_local DepsScratch scratch_for_thread;
  DepsScratch& scratch = scratch_for_thread.for_tensors(prog.tensors.size());
  const bool deps_prepared = prepared && prepared->deps_prepared;
  for (size_t i = 0; i < prog.segments.size(); ++i)
    if (!deps_prepared || finish_changes(prog, i) || (i < fused.size() && fused[i]))
      finalize_deps(prog.segments[i], scratch);
}

// finish_in_place() of a Program with two block variants (a dense-first mixture of experts, plans/program/program.h
// "Structure"): each block backward gets the recompute ops of the forward of its layers; a plan's ac_layers split
// is refused (check_dense_first_ac_layers()), and async TP is (check_inputs(): no micro-pipelined TP in MoE blocks).
void finish_variants(Program& prog, ActivationCheckpointing ac, const UnfinishedProgram* prepared, int64_t ac_layers) {
  prog.training.activation_checkpointing = ac;
  prog.plan.activation_checkpointing = ac;
  if (ac_layers >= 0) prog.plan.ac_layers = ac_layers;
  if (ac == ActivationCheckpointing::none) prog.plan.ac_layers = 0;
  check_dense_first_ac_layers(prog.model, prog.plan.ac_layers, prog.plan.source);
  if (prog.plan.async_tp && prog.tp > 1)
    throw Error(fmt::format("{}: async_tp: not lowered for a mixture-of-experts model", prog.plan.source));
  thread_local std::vector<size_t> redo;
  for (Segment& bwd : prog.segments) {
    if (bwd.kind != SegmentKind::block_bwd) continue;
    const Segment* fwd = nullptr;
    for (const Segment& s : prog.segments)
      if (s.kind == SegmentKind::block_fwd && s.first_layer == bwd.first_layer && s.layer_count == bwd.layer_count)
        fwd = &s;
    if (!fwd) throw Error("internal: a block backward without the forward of its layers");
    recompute_ops(*fwd, bwd, ac, prog.plan.ac_early_stop, prog.plan.ac_saves_reduce_scatter, redo);
    if (redo.empty()) continue;
    size_t at = 0;  // after the block's FSDP all-gathers
    while (at < bwd.ops.size() && is_fsdp_gather(bwd.ops[at])) ++at;
    const size_t n = bwd.ops.size(), r = redo.size();
    bwd.ops.resize(n + r);  // (bwd's op list: no reference into it is held, fwd is another segment)
    std::move_backward(bwd.ops.begin() + static_cast<std::ptrdiff_t>(at),
                       bwd.ops.begin() + static_cast<std::ptrdiff_t>(n), bwd.ops.end());
    for (size_t j = 0; j < r; ++j) recompute_op(fwd->ops[redo[j]], bwd.ops[at + j]);
    for (size_t i = 0; i < bwd.ops.size(); ++i) bwd.ops[i].id = static_cast<int>(i);
  }
  fuse_and_finalize_deps(prog, prepared, 0);
}

}  // namespace

// (finish.h says what each argument means.)
void finish_in_place(Program& prog, ActivationCheckpointing ac, const UnfinishedProgram* prepared, int64_t ac_layers,
                     const Segment* bwd_src) {
  if (prog.segments.size() > 3 && prog.segments[2].kind == SegmentKind::block_fwd)
    return finish_variants(prog, ac, prepared, ac_layers);  // (block variants: never the fast path's bwd_src)
  const bool prefix = prepared && prepared->forward;
  prog.training.activation_checkpointing = ac;
  prog.plan.activation_checkpointing = ac;
  if (ac_layers >= 0) prog.plan.ac_layers = ac_layers;
  if (ac == ActivationCheckpointing::none) prog.plan.ac_layers = 0;
  // Recompute for activation checkpointing goes first in the block backward.
  const Segment& fwd = prefix ? *prepared->forward : prog.segments[1];
  thread_local std::vector<size_t> redo;  // (its buffer kept from one Program to the next)
  recompute_ops(fwd, bwd_src ? *bwd_src : prog.segments[3], ac, prog.plan.ac_early_stop,
                prog.plan.ac_saves_reduce_scatter, redo);
  const int64_t L = prog.model.n_layers, k = prog.plan.ac_layers;
  // After the block's FSDP all-gathers: dp's, and the experts' on efsdp.
  const Segment& bwd_first = bwd_src ? *bwd_src : prog.segments[3];
  size_t at = 0;
  while (at < bwd_first.ops.size() && is_fsdp_gather(bwd_first.ops[at])) ++at;
  if (bwd_src && !redo.empty() && !(k > 0 && k < L)) {
    // The block backward copied from bwd_src with the recompute ops at `at`, each op assigned into an op of the
    // segment (reusing its buffers) instead of copied and then shifted by an insert.
    Segment& d = prog.segments[3];
    const std::vector<Op>& src = bwd_src->ops;
    d.kind = bwd_src->kind;
    d.repeat = bwd_src->repeat;
    d.reverse = bwd_src->reverse;
    d.first_layer = bwd_src->first_layer;
    d.layer_count = bwd_src->layer_count;
    const size_t n = src.size(), r = redo.size(), a = std::min(at, n);
    d.ops.resize(n + r);
    for (size_t i = 0; i < a; ++i) d.ops[i] = src[i];
    for (size_t j = 0; j < r; ++j) recompute_op(fwd.ops[redo[j]], d.ops[a + j]);
    for (size_t i = a; i < n; ++i) d.ops[i + r] = src[i];
    for (size_t i = 0; i < d.ops.size(); ++i) d.ops[i].id = static_cast<int>(i);
  } else if (bwd_src) {
    prog.segments[3] = *bwd_src;
  }
  if (!redo.empty() && k > 0 && k < L) {
    // The blocks without recompute keep the backward as lowered; it runs first (layers L-1 .. k).
    Segment plain = prog.segments[3];
    plain.first_layer = static_cast<int>(k);
    plain.layer_count = plain.repeat = static_cast<int>(L - k);
    Segment& ckpt = prog.segments[3];
    ckpt.first_layer = 0;
    ckpt.layer_count = ckpt.repeat = static_cast<int>(k);
    prog.segments.insert(prog.segments.begin() + 3, std::move(plain));  // (no reference into segments is held)
  }
  Segment& bwd = prog.segments[has_split_backward(prog) ? 4 : 3];
  if (!redo.empty() && (!bwd_src || (k > 0 && k < L))) {
    const size_t n = bwd.ops.size(), r = redo.size(), a = std::min(at, n);
    bwd.ops.resize(n + r);
    std::move_backward(bwd.ops.begin() + static_cast<std::ptrdiff_t>(a),
                       bwd.ops.begin() + static_cast<std::ptrdiff_t>(n), bwd.ops.end());
    // (the forward anew: the split above may have moved the segments)
    const Segment& forward = prefix ? *prepared->forward : prog.segments[1];
    for (size_t j = 0; j < r; ++j) recompute_op(forward.ops[redo[j]], bwd.ops[a + j]);
    for (size_t i = 0; i < bwd.ops.size(); ++i) bwd.ops[i].id = static_cast<int>(i);
  }
  if (prog.plan.async_tp && prefix) {  // the segments before block.bwd are rewritten already
    if (!rewrite_async_tp(prog, 3, prog.segments.size()) && !prepared->rewrote && prog.tp > 1) throw_no_async_tp(prog);
  } else if (prog.plan.async_tp) {
    apply_async_tp(prog);  // after recompute: recomputed gathers are chunked too
  }
  // torch.compile's fusions, after the recompute ops were copied from the eager forward and after async TP.
  // (finishing into a Program finished before, bwd_src set, leaves the segments before the block backward as they
  // were: fused then)
  fuse_and_finalize_deps(prog, prepared, bwd_src ? 3 : 0);
}

// The deps of the segments finish_in_place() does not change, once for every policy (finalize_deps() reads only
// the segment's ops: the same deps as finishing computes).
void prepare_deps(Program& prog) {
  thread_local DepsScratch scratch_for_thread;
  DepsScratch& scratch = scratch_for_thread.for_tensors(prog.tensors.size());
  for (size_t i = 0; i < prog.segments.size(); ++i)
    if (!finish_changes(prog, i)) finalize_deps(prog.segments[i], scratch);
}

}  // namespace lowering

bool has_split_backward(const Program& p) {
  return p.segments.size() > 4 && p.segments[3].kind == SegmentKind::block_bwd &&
         p.segments[4].kind == SegmentKind::block_bwd;
}

void set_ac_layers(Program& p, int64_t k) {
  const int64_t L = p.model.n_layers;
  if (!has_split_backward(p)) throw Error("internal: set_ac_layers() of a Program whose block backward is not split");
  if (k < 1 || k >= L) throw Error(fmt::format("internal: set_ac_layers({}) with {} layers", k, L));
  Segment& plain = p.segments[3];
  plain.first_layer = static_cast<int>(k);
  plain.layer_count = plain.repeat = static_cast<int>(L - k);
  Segment& ckpt = p.segments[4];
  ckpt.first_layer = 0;
  ckpt.layer_count = ckpt.repeat = static_cast<int>(k);
  p.plan.ac_layers = k;
}

void finish_lowering_into(const UnfinishedProgram& p, ActivationCheckpointing ac, Program& out, int64_t ac_layers,
                          uint64_t out_from) {
  // `out` finished from `p` differs from it only where finishing changes it: the policy fields of the training and
  // the plan, the segments from the block backward on (recompute ops, the split backward, async TP's rewrite after
  // prepare_async_tp(), their deps) and the tensors async TP appends. That holds once the deps and async TP's rewrite
  // of the first segments are prepared in `p` (without them finishing changes every segment).
  const size_t kept = 3;  // embed.fwd, block.fwd, head
  // A compiled Program's kept segments are fused: its recompute ops need the eager forward, which only async TP's
  // preparation keeps (UnfinishedProgram::forward).
  const bool compiled = p.prog.training.compiled(p.prog.plan.async_tp);
  // (A Program of block variants, whose block backwards come later, is finished whole.)
  if (out_from != 0 && out_from == p.id && p.deps_prepared && (p.forward || !p.prog.plan.async_tp) &&
      (p.forward || !compiled) && p.prog.segments.size() > kept && out.segments.size() > kept &&
      p.prog.segments[kept].kind == SegmentKind::block_bwd && out.tensors.size() >= p.prog.tensors.size()) {
    // Without async TP finishing changes only the block backward (and splits it with ac_layers): when `out` is not
    // split, the segments after it are p's already.
    const bool tail_kept =
        !p.prog.plan.async_tp && out.segments.size() == p.prog.segments.size() && !has_split_backward(out);
    out.training.activation_checkpointing = p.prog.training.activation_checkpointing;
    out.plan.activation_checkpointing = p.prog.plan.activation_checkpointing;
    out.plan.ac_layers = p.prog.plan.ac_layers;
    out.tensors.resize(p.prog.tensors.size());
    out.segments.resize(p.prog.segments.size());
    for (size_t i = kept + 1; i < p.prog.segments.size(); ++i)
      if (!tail_kept) out.segments[i] = p.prog.segments[i];
    // (the block backward, kept = 3, is copied by finishing, into out's ops)
    lowering::finish_in_place(out, ac, &p, ac_layers, &p.prog.segments[kept]);
    return;
  }
  // Copy-assignment reuses out's strings, vectors and deque blocks where they are large enough; an op list that is
  // too short would be reallocated whole (its ops' buffers freed), so it first grows by moving its ops.
  if (out.segments.size() < p.prog.segments.size()) out.segments.resize(p.prog.segments.size());
  for (size_t i = 0; i < p.prog.segments.size(); ++i) {
    out.segments[i].ops.reserve(p.prog.segments[i].ops.size());
    drop_ops_for_reuse(out.segments[i].ops, p.prog.segments[i].ops.size());  // (async TP's rewrite reuses them)
  }
  out = p.prog;
  lowering::finish_in_place(out, ac, &p, ac_layers);
}

}  // namespace tptune
