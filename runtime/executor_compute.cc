// Executor: compute ops (gemm with async TP chunk views, attention, elementwise, embedding, cross-entropy, float8
// casts) translated into Backend calls.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "plans/util/error.h"
#include "runtime/executor.h"

namespace tptune {
namespace {

int64_t last_dim(const TensorDesc& d) { return d.local_shape.empty() ? 1 : d.local_shape.back(); }
int64_t rows_of(const TensorDesc& d) {
  int64_t last = last_dim(d);
  return last == 0 ? 0 : numel(d.local_shape) / last;
}

}  // namespace

int Executor::chunk_slot(const ChunkRef& c) const {
  // ChunkRef (plans/program/program.h): an all-gather ring's step j works on slot (r - j) mod tp; a reduce-scatter
  // ring's step j computes the partial of chunk (r + j + 1) mod tp.
  if (c.pattern == ChunkRef::Pattern::all_gather) return ((rank_ - c.step) % tp_ + tp_) % tp_;
  if (c.pattern == ChunkRef::Pattern::reduce_scatter) return (rank_ + c.step + 1) % tp_;
  return -1;
}

// The regions a compute op reads (outputs=false) or writes. A chunked gemm touches one sequence slot of the
// full-sequence operands it shares with the ring; everything else is the whole tensor.
std::vector<Executor::Region> Executor::chunk_regions(int index, bool outputs) const {
  const FlatOp& op = flat_.ops[size_t(index)];
  const auto& ts = outputs ? op.outputs : op.inputs;
  std::vector<Region> r;
  for (int t : ts) r.push_back({t, -1});
  const auto* g = std::get_if<GemmOp>(&op.op->kind);
  if (!g || op.op->chunk.pattern == ChunkRef::Pattern::none) return r;
  const int slot = chunk_slot(op.op->chunk);
  const int64_t chunk_tokens = g->trans_a ? g->k : g->m;
  auto token_major = [&](size_t i) {
    if (outputs) return i == 0 && !g->trans_a;
    return i == 0 || (i == 1 && g->trans_a && !g->trans_b);
  };
  for (size_t i = 0; i < r.size(); ++i) {
    if (!token_major(i)) continue;
    const TensorDesc& d = desc(r[i].tensor);
    // Stored (tokens, width): A (m, k) or (k, m); B (k, n) with tokens k; C (m, n).
    int64_t width = outputs ? g->n : (i == 0 ? (g->trans_a ? g->m : g->k) : g->n);
    if (width > 0 && numel(d.local_shape) == chunk_tokens * width * tp_) r[i].slot = slot;
  }
  return r;
}

void Executor::run_gemm(int index, const GemmOp& g) {
  const FlatOp& op = flat_.ops[size_t(index)];
  // A routed expert's grouped GEMM (one product per local expert over the rows routed to it): executor_moe.cc.
  if (g.groups > 1 || (op.inputs.size() == 2 && desc(op.inputs[1]).expert) ||
      (op.outputs.size() == 1 && desc(op.outputs[0]).expert))
    return run_grouped_gemm(index, g);
  if (op.inputs.size() != 2 && op.inputs.size() != 4) fail(op, "a gemm reads {A, B} or {A, B, scale_A, scale_B}");
  if (op.outputs.size() != 1) fail(op, "a gemm writes one tensor");
  const bool chunked = op.op->chunk.pattern != ChunkRef::Pattern::none;
  const int slot = chunked ? chunk_slot(op.op->chunk) : -1;
  const int64_t chunk_tokens = g.trans_a ? g.k : g.m;
  const int64_t batch = program_.training.local_batch_size;

  // An operand stored (rows, width). When it is a full-sequence tensor of a chunked gemm, view its slot: rows of
  // sequence positions [slot*s/tp, (slot+1)*s/tp) of every sequence of the batch (packed when batch > 1).
  int which = 0;
  struct View {
    DevPtr ptr;
    DevPtr base;
    int64_t width;
    bool packed;
  };
  auto view = [&](int t, int64_t rows, int64_t width, bool token_major, bool load) -> View {
    const int64_t n = numel(desc(t).local_shape);
    DevPtr base = ptr(t);
    if (n == rows * width) return {base, base, width, false};
    if (!(chunked && token_major && n == rows * width * tp_))
      fail(op, fmt::format("operand '{}' has local shape {}, expected {} x {} elements", flat_.tensors[size_t(t)].fqn,
                           to_string(desc(t).local_shape), rows, width));
    const int64_t seq_full = rows * tp_ / batch, chunk = seq_full / tp_;
    if (batch == 1) return {base.at(slot * chunk * width), base, width, false};
    DevPtr p = scratch(index, which++, rows * width, base.storage).ptr();
    if (load)
      for (int64_t b = 0; b < batch; ++b)
        be_.copy2d(p.at(b * chunk * width), width, base.at((b * seq_full + slot * chunk) * width), width, chunk, width);
    return {p, base, width, true};
  };
  const bool a_tok = true, b_tok = g.trans_a && !g.trans_b, c_tok = !g.trans_a;
  View a = view(op.inputs[0], g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, a_tok, true);
  View b = view(op.inputs[1], g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, b_tok, true);
  View c = view(op.outputs[0], g.m, g.n, c_tok, g.accumulate);
  (void)chunk_tokens;

  GemmArgs args;
  args.m = g.m, args.n = g.n, args.k = g.k;
  args.a = a.ptr, args.b = b.ptr, args.c = c.ptr;
  args.trans_a = g.trans_a, args.trans_b = g.trans_b, args.accumulate = g.accumulate;
  args.a_dtype = g.a_dtype, args.b_dtype = g.b_dtype;
  if (op.inputs.size() == 4) {
    args.scale_a = stat(op.inputs[2]);
    args.scale_b = stat(op.inputs[3]);
  } else if (is_float8(g.a_dtype) || is_float8(g.b_dtype)) {
    fail(op, "float8 operands need their scales as inputs 3 and 4");
  }
  be_.gemm(args);
  if (c.packed) {
    const int64_t seq_full = g.m * tp_ / batch, chunk = seq_full / tp_;
    for (int64_t bb = 0; bb < batch; ++bb)
      be_.copy2d(c.base.at((bb * seq_full + slot * chunk) * g.n), g.n, c.ptr.at(bb * chunk * g.n), g.n, chunk, g.n);
  }
}

void Executor::run_elementwise(int index, const ElementwiseOp& e) {
  const FlatOp& op = flat_.ops[size_t(index)];
  using F = ElementwiseOp::Fn;
  static const std::map<F, std::pair<size_t, size_t>> arity = {
      {F::rmsnorm, {2, 2}},   {F::rmsnorm_bwd, {4, 2}},   {F::layernorm, {3, 3}},   {F::layernorm_bwd, {5, 3}},
      {F::rope, {1, 1}},      {F::rope_bwd, {1, 1}},      {F::swiglu, {2, 1}},      {F::swiglu_bwd, {3, 2}},
      {F::gelu, {1, 1}},      {F::gelu_bwd, {2, 1}},      {F::add, {2, 1}},         {F::accumulate, {2, 1}},
      {F::slice, {1, 1}},     {F::adamw, {4, 3}},         {F::bias_add, {2, 1}},    {F::bias_grad, {1, 1}},
      {F::repeat_kv, {1, 1}}, {F::repeat_kv_bwd, {1, 1}}, {F::add_rmsnorm, {3, 3}}, {F::rmsnorm_bwd_add, {5, 2}},
      {F::rope_qk, {2, 2}},   {F::rope_qk_bwd, {2, 2}}};
  if (e.fn == F::copy)  // refused before a run (tp-run's refuse_unsupported); said again here for any other caller
    fail(op, "copy ops (torchtitan 0.3's fused wqkv and chunked loss) are modelled by the simulator only");
  if (e.fn == F::grad_norm || e.fn == F::grad_clip)  // torchtitan 0.3's clip_grad_norm_: refused like copy
    fail(op, "gradient clipping (torchtitan 0.3's clip_grad_norm_) is modelled by the simulator only");
  if (e.fn >= F::moe_router) return run_moe(index, e);  // executor_moe.cc
  if (e.fn == F::attention_merge) return run_attention_merge(index);
  if (e.fn == F::concat) return run_concat(index);
  auto [ni, no] = arity.at(e.fn);
  if (e.fn == F::accumulate && op.inputs.size() == 1) ni = 1;  // {a} -> {y += a}: the output is the accumulator
  if (e.amax_of >= 0) ++no;  // a compiled Program's fused float8 amax: one more output, last
  if (e.amax_of >= 0 && (e.fn == F::adamw || static_cast<size_t>(e.amax_of) >= no - 1))
    fail(op, fmt::format("{}: amax_of {} names no output of it", to_string(e.fn), e.amax_of));
  if (op.inputs.size() != ni || op.outputs.size() != no)
    fail(op, fmt::format("{} expects {} inputs and {} outputs, the op has {} and {}", to_string(e.fn), ni, no,
                         op.inputs.size(), op.outputs.size()));
  auto in = [&](size_t i) { return ptr(op.inputs[i]); };
  auto out = [&](size_t i) { return ptr(op.outputs[i]); };
  auto sin = [&](size_t i) { return stat(op.inputs[i]); };  // fp32 statistics
  auto sout = [&](size_t i) { return stat(op.outputs[i]); };
  const TensorDesc& x = desc(op.inputs[0]);
  const int64_t n = numel(x.local_shape);
  auto same_size = [&](int t) {
    if (numel(desc(t).local_shape) != n)
      fail(op, fmt::format("'{}' has local shape {}, '{}' {}: elementwise operands must match",
                           flat_.tensors[size_t(op.inputs[0])].fqn, to_string(x.local_shape),
                           flat_.tensors[size_t(t)].fqn, to_string(desc(t).local_shape)));
  };
  const Model& m = program_.model;
  // A rope operand's shape: positions of a sequence-sharded tensor start at this rank's first position.
  auto rope_shape = [&](const TensorDesc& t) {
    if (t.local_shape.size() != 3) fail(op, "rope expects a (batch, seq, heads*head_dim) tensor");
    RopeShape s;
    s.batch = t.local_shape[0], s.seq = t.local_shape[1], s.head_dim = m.head_dim();
    s.heads = t.local_shape[2] / s.head_dim;
    s.offset = t.placement.is_shard() && t.placement.normalized_dim(3) == 1 ? rank_ * s.seq : 0;
    s.theta = m.rope_theta;
    return s;
  };
  switch (e.fn) {
    case F::rmsnorm:
    case F::rmsnorm_bwd: {
      // Over the weight's width: the last dim, or one head of it (Qwen3's q/k norms, plans/lower/experts.cc
      // head_norm: x (b, s, heads x head_dim), w (head_dim)).
      const int64_t width = numel(desc(op.inputs[1]).local_shape);
      if (width <= 0 || last_dim(x) % width != 0)
        fail(op, fmt::format("rmsnorm of width {} over rows of {}", width, last_dim(x)));
      const int64_t rows = numel(x.local_shape) / width;
      if (e.fn == F::rmsnorm) {
        be_.rmsnorm_fwd(rows, width, m.norm_eps, in(0), in(1), out(0), sout(1));
      } else {
        same_size(op.inputs[3]);
        be_.rmsnorm_bwd(rows, width, in(0), in(1), sin(2), in(3), out(0), out(1));
      }
      break;
    }
    case F::layernorm:
      be_.layernorm_fwd(rows_of(x), last_dim(x), m.norm_eps, in(0), in(1), in(2), out(0), sout(1), sout(2));
      break;
    case F::layernorm_bwd:
      same_size(op.inputs[4]);
      be_.layernorm_bwd(rows_of(x), last_dim(x), in(0), in(1), sin(2), sin(3), in(4), out(0), out(1), out(2));
      break;
    case F::add_rmsnorm:
      same_size(op.inputs[1]);
      be_.add_rmsnorm_fwd(rows_of(x), last_dim(x), m.norm_eps, in(0), in(1), in(2), out(0), out(1), sout(2));
      break;
    case F::rmsnorm_bwd_add:
      same_size(op.inputs[3]), same_size(op.inputs[4]);
      be_.rmsnorm_bwd_add(rows_of(x), last_dim(x), in(0), in(1), sin(2), in(3), in(4), out(0), out(1));
      break;
    case F::rope_qk:
    case F::rope_qk_bwd: {
      const bool bwd = e.fn == F::rope_qk_bwd;
      const RopeShape qs = rope_shape(x), ks = rope_shape(desc(op.inputs[1]));
      if (cp_ > 1) {  // the cp rank's rows are not one run of positions (runtime/ring/cp_layout.h)
        rope_rows(qs, bwd, in(0), out(0), qs.offset);
        rope_rows(ks, bwd, in(1), out(1), ks.offset);
      } else if (bwd) {
        be_.rope_qk_bwd(qs, ks, in(0), in(1), out(0), out(1));
      } else {
        be_.rope_qk_fwd(qs, ks, in(0), in(1), out(0), out(1));
      }
      break;
    }
    case F::rope:
    case F::rope_bwd: {
      const RopeShape s = rope_shape(x);
      if (cp_ > 1)  // the cp rank's rows are not one run of positions (runtime/ring/cp_layout.h)
        rope_rows(s, e.fn == F::rope_bwd, in(0), out(0), s.offset);
      else if (e.fn == F::rope)
        be_.rope_fwd(s, in(0), out(0));
      else
        be_.rope_bwd(s, in(0), out(0));
      break;
    }
    case F::swiglu:
      same_size(op.inputs[1]);
      be_.swiglu_fwd(n, in(0), in(1), out(0));
      break;
    case F::swiglu_bwd:
      same_size(op.inputs[1]), same_size(op.inputs[2]);
      be_.swiglu_bwd(n, in(0), in(1), in(2), out(0), out(1));
      break;
    case F::gelu:
      be_.gelu_fwd(n, in(0), out(0));
      break;
    case F::gelu_bwd:
      same_size(op.inputs[1]);
      be_.gelu_bwd(n, in(0), in(1), out(0));
      break;
    case F::add:
      same_size(op.inputs[1]);
      be_.add(n, in(0), in(1), out(0));
      break;
    case F::accumulate:
      same_size(op.inputs.size() == 2 ? op.inputs[1] : op.outputs[0]);
      if (op.inputs.size() == 2 && op.outputs[0] != op.inputs[1]) be_.copy2d(out(0), n, in(1), n, 1, n);
      be_.accumulate(n, in(0), out(0));
      break;
    case F::bias_add: {
      // x (rows, n) and the bias b (n): its local shard, as wide as x's last dim.
      const int64_t width = numel(desc(op.inputs[1]).local_shape);
      if (width != last_dim(x) || numel(desc(op.outputs[0]).local_shape) != n)
        fail(op, fmt::format("bias_add: bias of local shape {} on an output of local shape {}",
                             to_string(desc(op.inputs[1]).local_shape), to_string(x.local_shape)));
      be_.bias_add(rows_of(x), width, e.bias_split, in(0), in(1), out(0));
      break;
    }
    case F::bias_grad: {
      const int64_t width = numel(desc(op.outputs[0]).local_shape);
      if (width != last_dim(x))
        fail(op, fmt::format("bias_grad: bias gradient of local shape {} from a gradient of local shape {}",
                             to_string(desc(op.outputs[0]).local_shape), to_string(x.local_shape)));
      be_.bias_grad(rows_of(x), width, in(0), out(0));
      break;
    }
    case F::repeat_kv:
    case F::repeat_kv_bwd: {
      // kv (b, s, h_kv x d) and its repeat (b, s, h_q x d): seen as rows of one kv head, the repeat holds r = h_q /
      // h_kv consecutive copies of each row, so copy j of every head is one strided 2-D copy.
      const bool fwd = e.fn == F::repeat_kv;
      const TensorDesc& kv = fwd ? x : desc(op.outputs[0]);
      const TensorDesc& rep = fwd ? desc(op.outputs[0]) : x;
      const int64_t d = m.head_dim(), kv_w = last_dim(kv), rep_w = last_dim(rep);
      if (kv.local_shape.size() != 3 || rep.local_shape.size() != 3 || kv_w % d != 0 || rep_w % kv_w != 0 ||
          rows_of(kv) != rows_of(rep))
        fail(op, fmt::format("{}: key/value heads of local shape {} and their repeat {} are not (batch, seq, heads x "
                             "{}) with a whole number of copies",
                             to_string(e.fn), to_string(kv.local_shape), to_string(rep.local_shape), d));
      const int64_t r = rep_w / kv_w, rows = rows_of(kv) * (kv_w / d), kv_n = numel(kv.local_shape);
      if (fwd) {
        for (int64_t j = 0; j < r; ++j) be_.copy2d(out(0).at(j * d), r * d, in(0), d, rows, d);
      } else {
        be_.copy2d(out(0), d, in(0), r * d, rows, d);
        const DevPtr part = scratch(index, 0, kv_n, out(0).storage).ptr();
        for (int64_t j = 1; j < r; ++j) {
          be_.copy2d(part, d, in(0).at(j * d), r * d, rows, d);
          be_.accumulate(kv_n, part, out(0));
        }
      }
      break;
    }
    case F::slice: {
      const TensorDesc& y = desc(op.outputs[0]);
      const int nd = static_cast<int>(x.local_shape.size());
      const int d = e.dim < 0 ? e.dim + nd : e.dim;
      if (d < 0 || d >= nd || x.local_shape[size_t(d)] != y.local_shape[size_t(d)] * tp_ ||
          numel(y.local_shape) * tp_ != n)
        fail(op, fmt::format("cannot slice dim {} of {} into {}", e.dim, to_string(x.local_shape),
                             to_string(y.local_shape)));
      int64_t outer = 1, inner = 1;
      for (int i = 0; i < d; ++i) outer *= x.local_shape[size_t(i)];
      for (int i = d + 1; i < nd; ++i) inner *= x.local_shape[size_t(i)];
      const int64_t width = y.local_shape[size_t(d)] * inner;
      be_.copy2d(out(0), width, in(0).at(rank_ * width), x.local_shape[size_t(d)] * inner, outer, width);
      break;
    }
    case F::adamw:
      for (size_t i = 1; i < 4; ++i) same_size(op.inputs[i]);
      if (op.outputs[0] != op.inputs[0] || op.outputs[1] != op.inputs[2] || op.outputs[2] != op.inputs[3])
        fail(op, "adamw updates p, m and v in place: outputs must be inputs 0, 2 and 3");
      // On the fp32 master weights; a parameter stored in another format gets the rounded update.
      be_.adamw(n, options_.adamw, master(op.outputs[0]), in(1), sout(1), sout(2));
      if (!masters_[size_t(op.outputs[0])].empty()) be_.convert(out(0), master(op.outputs[0]), n);
      break;
    case F::copy:
    case F::grad_norm:
    case F::grad_clip:
    case F::attention_merge:
    case F::concat:
    case F::moe_router:
    case F::moe_router_bwd:
    case F::moe_permute:
    case F::moe_unpermute:
    case F::moe_combine:
    case F::moe_combine_bwd:
    case F::host_sync:
    case F::gate_mul:
    case F::gate_mul_bwd:
    case F::moe_bias_update:
      break;  // refused or run above
  }
  if (e.amax_of >= 0) {  // the float8 amax a compiled Program folded into this op (ElementwiseOp::amax_of)
    const int t = op.outputs[size_t(e.amax_of)];
    be_.fp8_amax(numel(desc(t).local_shape), ptr(t), sout(op.outputs.size() - 1));
  }
}

size_t Executor::adamw_run_end(size_t first) const {
  size_t k = first;
  for (; k < flat_.ops.size(); ++k) {
    const auto* e = std::get_if<ElementwiseOp>(&flat_.ops[k].op->kind);
    if (!e || e->fn != ElementwiseOp::Fn::adamw || e->amax_of >= 0) break;
  }
  return k;
}

void Executor::run_adamw_group(size_t first, size_t last) {
  std::vector<AdamWTensorRef> refs;
  for (size_t k = first; k < last; ++k) {
    const FlatOp& op = flat_.ops[k];
    try {
      wait_conflicts(chunk_regions(int(k), false), chunk_regions(int(k), true));
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      fail(op, e.what());
    }
    if (op.inputs.size() != 4 || op.outputs.size() != 3)
      fail(op, fmt::format("adamw expects 4 inputs and 3 outputs, the op has {} and {}", op.inputs.size(),
                           op.outputs.size()));
    const int64_t n = numel(desc(op.inputs[0]).local_shape);
    for (size_t i = 1; i < 4; ++i)
      if (numel(desc(op.inputs[i]).local_shape) != n)
        fail(op, fmt::format("'{}' has local shape {}, '{}' {}: elementwise operands must match",
                             flat_.tensors[size_t(op.inputs[0])].fqn, to_string(desc(op.inputs[0]).local_shape),
                             flat_.tensors[size_t(op.inputs[i])].fqn, to_string(desc(op.inputs[i]).local_shape)));
    if (op.outputs[0] != op.inputs[0] || op.outputs[1] != op.inputs[2] || op.outputs[2] != op.inputs[3])
      fail(op, "adamw updates p, m and v in place: outputs must be inputs 0, 2 and 3");
    refs.push_back({n, master(op.outputs[0]), ptr(op.inputs[1]), stat(op.outputs[1]), stat(op.outputs[2])});
  }
  try {
    be_.adamw_multi(refs, options_.adamw);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail(flat_.ops[first], e.what());
  }
  for (size_t k = first; k < last; ++k) {  // a parameter stored in another format gets the rounded update
    const int p = flat_.ops[k].outputs[0];
    if (!masters_[size_t(p)].empty()) be_.convert(ptr(p), master(p), numel(desc(p).local_shape));
  }
}

// ElementwiseOp::concat: the inputs' elements in order are the outputs' elements in order, converted to each
// output's storage when it differs.
void Executor::run_concat(int index) {
  const FlatOp& op = flat_.ops[size_t(index)];
  int64_t total_in = 0, total_out = 0;
  for (int t : op.inputs) total_in += numel(desc(t).local_shape);
  for (int t : op.outputs) total_out += numel(desc(t).local_shape);
  if (op.inputs.empty() || op.outputs.empty() || total_in != total_out)
    fail(op, fmt::format("concat of {} elements into {}: the inputs and the outputs must hold the same elements",
                         total_in, total_out));
  size_t i = 0, o = 0;
  int64_t in_at = 0, out_at = 0;  // elements already taken from input i / written into output o
  while (i < op.inputs.size() && o < op.outputs.size()) {
    const int64_t in_n = numel(desc(op.inputs[i]).local_shape), out_n = numel(desc(op.outputs[o]).local_shape);
    const int64_t n = std::min(in_n - in_at, out_n - out_at);
    if (n > 0) {
      const DevPtr src = ptr(op.inputs[i]).at(in_at), dst = ptr(op.outputs[o]).at(out_at);
      if (src.storage == dst.storage)
        be_.copy2d(dst, n, src, n, 1, n);
      else
        be_.convert(dst, src, n);
    }
    in_at += n, out_at += n;
    if (in_at == in_n) ++i, in_at = 0;
    if (out_at == out_n) ++o, out_at = 0;
  }
}

void Executor::run_compute(int index) {
  const FlatOp& op = flat_.ops[size_t(index)];
  auto need = [&](size_t ni, size_t no) {
    if (op.inputs.size() != ni || op.outputs.size() != no)
      fail(op, fmt::format("expects {} inputs and {} outputs, the op has {} and {}", ni, no, op.inputs.size(),
                           op.outputs.size()));
  };
  auto in = [&](size_t i) { return ptr(op.inputs[i]); };
  auto out = [&](size_t i) { return ptr(op.outputs[i]); };
  auto sin = [&](size_t i) { return stat(op.inputs[i]); };  // fp32 statistics
  auto sout = [&](size_t i) { return stat(op.outputs[i]); };
  auto numel_of = [&](int t) { return numel(desc(t).local_shape); };
  auto expect = [&](int t, int64_t n, const char* what) {
    if (numel_of(t) != n)
      fail(op, fmt::format("{} '{}' has local shape {} ({} elements), the op expects {}", what,
                           flat_.tensors[size_t(t)].fqn, to_string(desc(t).local_shape), numel_of(t), n));
  };

  if (const auto* g = std::get_if<GemmOp>(&op.op->kind)) return run_gemm(index, *g);
  if (const auto* e = std::get_if<ElementwiseOp>(&op.op->kind)) return run_elementwise(index, *e);
  if (const auto* a = std::get_if<AttentionOp>(&op.op->kind)) {
    if (a->ring_step >= 0) return run_ring_attention(index, *a);
    AttentionShape s{a->batch, a->seq, a->n_heads, a->n_kv_heads, a->head_dim, a->causal};
    const int64_t nq = a->batch * a->seq * a->n_heads * a->head_dim,
                  nkv = a->batch * a->seq * a->n_kv_heads * a->head_dim;
    if (!a->backward) {
      need(3, 2);
      expect(op.inputs[0], nq, "q"), expect(op.inputs[1], nkv, "k"), expect(op.inputs[2], nkv, "v");
      expect(op.outputs[0], nq, "o"), expect(op.outputs[1], a->batch * a->n_heads * a->seq, "lse");
      be_.attention_fwd(s, in(0), in(1), in(2), out(0), sout(1));
    } else {
      need(6, 3);
      expect(op.inputs[5], nq, "d_o"), expect(op.outputs[1], nkv, "dk");
      be_.attention_bwd(s, in(0), in(1), in(2), in(3), sin(4), in(5), out(0), out(1), out(2));
    }
    return;
  }
  if (const auto* e = std::get_if<EmbeddingOp>(&op.op->kind)) {
    const int64_t offset = e->vocab_sharded ? rank_ * e->vocab_local : 0;
    need(2, 1);
    expect(op.inputs[0], e->tokens, "tokens");
    if (!e->backward) {
      expect(op.inputs[1], e->vocab_local * e->dim_local, "weight");
      expect(op.outputs[0], e->tokens * e->dim_local, "out");
      be_.embedding_fwd(e->tokens, e->vocab_local, e->dim_local, offset, e->vocab_sharded, i32(op.inputs[0]), in(1),
                        out(0));
    } else {
      expect(op.inputs[1], e->tokens * e->dim_local, "d_out");
      expect(op.outputs[0], e->vocab_local * e->dim_local, "d_weight");
      be_.embedding_bwd(e->tokens, e->vocab_local, e->dim_local, offset, e->vocab_sharded, i32(op.inputs[0]), in(1),
                        out(0));
    }
    return;
  }
  if (const auto* c = std::get_if<CrossEntropyOp>(&op.op->kind)) {
    const int64_t T = c->tokens, V = c->vocab_local, offset = c->vocab_sharded ? rank_ * V : 0;
    using S = CrossEntropyOp::Stage;
    switch (c->stage) {
      case S::row_max:
        need(1, 1), expect(op.inputs[0], T * V, "logits");
        be_.ce_row_max(T, V, in(0), sout(0));
        break;
      case S::sum_exp:
        need(2, 1), expect(op.inputs[0], T * V, "logits");
        be_.ce_sum_exp(T, V, in(0), sin(1), sout(0));
        break;
      case S::target_logit:
        need(2, 1), expect(op.inputs[0], T * V, "logits"), expect(op.inputs[1], T, "targets");
        be_.ce_target_logit(T, V, offset, in(0), i32(op.inputs[1]), sout(0));
        break;
      case S::loss:
        need(3, 1);
        be_.ce_loss(T, c->divisor(), sin(0), sin(1), sin(2), sout(0));
        break;
      case S::backward:
        need(4, 1), expect(op.inputs[0], T * V, "logits"), expect(op.outputs[0], T * V, "d_logits");
        be_.ce_backward(T, c->divisor(), V, offset, in(0), sin(1), sin(2), i32(op.inputs[3]), out(0));
        break;
    }
    return;
  }
  if (const auto* c = std::get_if<CastFp8Op>(&op.op->kind)) {
    if (c->rowwise)
      fail(op, "float8 rowwise is modelled by the simulator only; the CPU runtime runs float8 none or tensorwise");
    const int64_t n = numel_of(op.inputs[0]);
    if (c->stage == CastFp8Op::Stage::amax) {
      need(1, 1);
      be_.fp8_amax(n, in(0), sout(0));
    } else {
      need(2, 2), expect(op.outputs[0], n, "xq");
      be_.fp8_cast(n, c->to, in(0), sin(1), out(0), sout(1));
    }
    return;
  }
  fail(op, fmt::format("op kind {} is not a compute op", kind_name(op.op->kind)));
}

}  // namespace tptune
