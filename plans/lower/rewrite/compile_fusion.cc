#include "plans/lower/rewrite/compile_fusion.h"

#include <algorithm>

#include "plans/util/checked_math.h"

namespace tptune {

namespace {

using F = ElementwiseOp::Fn;

bool has(const std::vector<TensorId>& ts, TensorId t) { return std::find(ts.begin(), ts.end(), t) != ts.end(); }

ElementwiseOp* eltwise(Op& op, F fn) {
  auto* e = std::get_if<ElementwiseOp>(&op.kind);
  return e && e->fn == fn && op.chunk.pattern == ChunkRef::Pattern::none ? e : nullptr;
}

int64_t tensor_bytes(const Program& p, TensorId t) {
  const TensorDesc& d = p.tensor(t);
  return checked_mul({numel(d.local_shape), int64_t{bytes_per_element(d.dtype)}}, "fused op bytes");
}

struct SegmentFusion {
  const Program& p;
  Segment& s;
  std::vector<bool> dead;

  SegmentFusion(const Program& prog, Segment& seg) : p(prog), s(seg), dead(seg.ops.size(), false) {}

  // Whether a live op in [from, to) reads (or writes) t.
  bool reads_in(size_t from, size_t to, TensorId t) const {
    for (size_t k = from; k < to; ++k)
      if (!dead[k] && has(s.ops[k].inputs, t)) return true;
    return false;
  }
  bool writes_in(size_t from, size_t to, TensorId t) const {
    for (size_t k = from; k < to; ++k)
      if (!dead[k] && has(s.ops[k].outputs, t)) return true;
    return false;
  }
  // The first live op after i that reads t, or ops.size().
  size_t next_reader(size_t i, TensorId t) const {
    for (size_t k = i + 1; k < s.ops.size(); ++k)
      if (!dead[k] && has(s.ops[k].inputs, t)) return k;
    return s.ops.size();
  }
  // The live op k as an elementwise `fn` that a fusion may take: unchunked, no float8 amax folded into it, `n_in`
  // inputs and `n_out` outputs; null otherwise.
  ElementwiseOp* fusable(size_t k, F fn, size_t n_in, size_t n_out) {
    ElementwiseOp* e = dead[k] ? nullptr : eltwise(s.ops[k], fn);
    return e && e->amax_of < 0 && s.ops[k].inputs.size() == n_in && s.ops[k].outputs.size() == n_out ? e : nullptr;
  }
  void absorb(Op& into, const Op& from) {
    if (into.fused.empty() && !into.name.empty()) into.fused.push_back(into.name);
    if (!from.name.empty()) into.fused.push_back(from.name);
  }

  // The scan of the fusions of an op with the op that reads its result: each live op i fusable as `fn` (n_in inputs,
  // n_out outputs) with the first live op j after it that reads its first output; fuse(i, j) fuses the two or
  // returns false. Whether any fused.
  template <class Fuse>
  bool with_first_reader(F fn, size_t n_in, size_t n_out, Fuse fuse) {
    bool changed = false;
    for (size_t i = 0; i < s.ops.size(); ++i) {
      if (!fusable(i, fn, n_in, n_out)) continue;
      const size_t j = next_reader(i, s.ops[i].outputs[0]);
      if (j < s.ops.size() && fuse(i, j)) changed = true;
    }
    return changed;
  }

  // h = a + b, then rmsnorm {h, w}: one add_rmsnorm {a, b, w} -> {h, y, rstd} at the norm's place.
  bool add_rmsnorm() {
    return with_first_reader(F::add, 2, 1, [&](size_t i, size_t j) {
      const ElementwiseOp& add = std::get<ElementwiseOp>(s.ops[i].kind);
      const TensorId h = s.ops[i].outputs[0];
      Op& norm_op = s.ops[j];
      ElementwiseOp* norm = fusable(j, F::rmsnorm, 2, 2);
      if (!norm || norm_op.inputs[0] != h || norm_op.phase != s.ops[i].phase) return false;
      if (writes_in(i + 1, j, s.ops[i].inputs[0]) || writes_in(i + 1, j, s.ops[i].inputs[1]) || writes_in(i + 1, j, h))
        return false;
      const int64_t act = tensor_bytes(p, h);
      ElementwiseOp fused = *norm;
      fused.fn = F::add_rmsnorm;
      // read a, b; write h, y: 4 activations, the norm's 2 (read h, write y) + 2.
      fused.bytes = checked_add(norm->bytes, checked_mul({act, 2}, "fused op bytes"), "fused op bytes");
      fused.flops = checked_add(norm->flops, add.flops, "fused op flops");
      absorb(norm_op, s.ops[i]);
      norm_op.inputs = {s.ops[i].inputs[0], s.ops[i].inputs[1], norm_op.inputs[1]};
      norm_op.outputs = {h, norm_op.outputs[0], norm_op.outputs[1]};
      norm_op.kind = fused;
      dead[i] = true;
      return true;
    });
  }

  // rmsnorm_bwd {x, w, rstd, dy} -> {dx, dw}, dx read only by a sum {dres, dx} -> {g}: one rmsnorm_bwd_add
  // {x, w, rstd, dy, dres} -> {g, dw} at the norm backward's place.
  bool rmsnorm_bwd_add() {
    return with_first_reader(F::rmsnorm_bwd, 4, 2, [&](size_t i, size_t j) {
      const ElementwiseOp& nb = std::get<ElementwiseOp>(s.ops[i].kind);
      const TensorId dx = s.ops[i].outputs[0];
      if (reads_in(j + 1, s.ops.size(), dx)) return false;
      Op& add_op = s.ops[j];
      ElementwiseOp* add = fusable(j, F::add, 2, 1);
      if (!add || add_op.phase != s.ops[i].phase || add_op.inputs[0] == add_op.inputs[1]) return false;
      const TensorId dres = add_op.inputs[0] == dx ? add_op.inputs[1] : add_op.inputs[0];
      const TensorId sum = add_op.outputs[0];
      if (writes_in(i, j, dres) || writes_in(i + 1, j, sum) || reads_in(i + 1, j, sum)) return false;
      bool chained = false;  // a tensor a layer chain links stays as the eager lowering wrote it
      for (const LayerChain& c : p.chains) chained = chained || c.in == dx || c.out == dx;
      if (chained) return false;
      const int64_t act = tensor_bytes(p, dx);
      ElementwiseOp fused = nb;
      fused.fn = F::rmsnorm_bwd_add;
      fused.bytes = checked_add(nb.bytes, act, "fused op bytes");  // + read dres (the eager 3 become 4)
      fused.flops = checked_add(nb.flops, add->flops, "fused op flops");
      Op& norm_op = s.ops[i];
      absorb(norm_op, add_op);
      norm_op.inputs.push_back(dres);
      norm_op.outputs[0] = sum;
      norm_op.kind = fused;
      dead[j] = true;
      return true;
    });
  }

  // Two rope (or rope_bwd) ops: one rope_qk (rope_qk_bwd) {x1, x2} -> {y1, y2} at the second's place.
  bool rope_pairs(F single, F pair) {
    bool changed = false;
    size_t first = s.ops.size();
    for (size_t j = 0; j < s.ops.size(); ++j) {
      ElementwiseOp* r = fusable(j, single, 1, 1);
      if (!r) continue;
      if (first == s.ops.size() || s.ops[first].phase != s.ops[j].phase) {
        first = j;
        continue;
      }
      const Op& a = s.ops[first];
      if (reads_in(first + 1, j, a.outputs[0]) || writes_in(first + 1, j, a.inputs[0]) ||
          writes_in(first + 1, j, a.outputs[0])) {
        first = j;
        continue;
      }
      Op& b = s.ops[j];
      ElementwiseOp fused = *r;
      fused.fn = pair;
      fused.bytes = checked_add(r->bytes, std::get<ElementwiseOp>(a.kind).bytes, "fused op bytes");
      fused.flops = checked_add(r->flops, std::get<ElementwiseOp>(a.kind).flops, "fused op flops");
      std::vector<std::string> names;
      if (!a.name.empty()) names.push_back(a.name);
      if (!b.name.empty()) names.push_back(b.name);
      b.fused = std::move(names);
      b.inputs = {a.inputs[0], b.inputs[0]};
      b.outputs = {a.outputs[0], b.outputs[0]};
      b.kind = fused;
      dead[first] = true;
      changed = true;
      first = s.ops.size();
    }
    return changed;
  }

  // A tensorwise amax of an elementwise op's output: folded into that op.
  bool amax_into_producer() {
    bool changed = false;
    for (size_t j = 0; j < s.ops.size(); ++j) {
      auto* c = dead[j] ? nullptr : std::get_if<CastFp8Op>(&s.ops[j].kind);
      if (!c || c->stage != CastFp8Op::Stage::amax || c->rowwise || !c->producer_elementwise ||
          s.ops[j].inputs.size() != 1 || s.ops[j].outputs.size() != 1 ||
          s.ops[j].chunk.pattern != ChunkRef::Pattern::none)
        continue;
      const TensorId x = s.ops[j].inputs[0];
      size_t i = j;
      while (i > 0 && (dead[i - 1] || !has(s.ops[i - 1].outputs, x))) --i;
      if (i == 0) continue;
      Op& producer = s.ops[i - 1];
      auto* e = std::get_if<ElementwiseOp>(&producer.kind);
      if (!e || e->fn == F::adamw || producer.chunk.pattern != ChunkRef::Pattern::none ||
          producer.phase != s.ops[j].phase)
        continue;
      const TensorId amax = s.ops[j].outputs[0];
      if (e->amax_of >= 0) {
        // x's amax again (each float8 linear casts its input: wq, wk and wv read one norm output): the same reduction
        // of the same tensor, which Inductor computes once; later readers take the first one's.
        if (producer.outputs[static_cast<size_t>(e->amax_of)] != x || writes_in(j + 1, s.ops.size(), amax)) {
          // Another output's amax (swiglu_bwd's da and db, rope_qk_bwd's dq and dk): an op folds one; this one stays a
          // reduction kernel of its own, and says so to the simulator.
          c->producer_elementwise = false;
          changed = true;
          continue;
        }
        const TensorId first = producer.outputs.back();
        for (size_t k = j + 1; k < s.ops.size(); ++k)
          for (TensorId& t : s.ops[k].inputs)
            if (t == amax) t = first;
        absorb(producer, s.ops[j]);
        dead[j] = true;
        changed = true;
        continue;
      }
      if (reads_in(i, j, amax) || writes_in(i, j, amax)) continue;
      e->amax_of =
          static_cast<int>(std::find(producer.outputs.begin(), producer.outputs.end(), x) - producer.outputs.begin());
      e->bytes = checked_add(e->bytes, 4, "fused op bytes");  // the fp32 amax written
      absorb(producer, s.ops[j]);
      producer.outputs.push_back(amax);
      dead[j] = true;
      changed = true;
    }
    return changed;
  }

  bool run() {
    bool changed = add_rmsnorm();
    changed = rmsnorm_bwd_add() || changed;
    changed = rope_pairs(F::rope, F::rope_qk) || changed;
    changed = rope_pairs(F::rope_bwd, F::rope_qk_bwd) || changed;
    changed = amax_into_producer() || changed;
    if (!changed) return false;
    size_t w = 0;
    for (size_t k = 0; k < s.ops.size(); ++k) {
      if (dead[k]) continue;
      if (w != k) s.ops[w] = std::move(s.ops[k]);
      s.ops[w].id = static_cast<int>(w);
      ++w;
    }
    s.ops.resize(w);
    return true;
  }
};

}  // namespace

std::vector<bool> apply_compile_fusion(Program& p, size_t from) {
  std::vector<bool> changed(p.segments.size(), false);
  for (size_t i = from; i < p.segments.size(); ++i)
    if (p.segments[i].kind == SegmentKind::block_fwd || p.segments[i].kind == SegmentKind::block_bwd)
      changed[i] = SegmentFusion(p, p.segments[i]).run();
  return changed;
}

}  // namespace tptune
