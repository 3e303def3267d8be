// Module shapes beyond the seed's one-Linear-per-projection model, as torchtitan 0.3 builds them: the fused q/k/v
// projection (FusedQKVLinear) and the chunked loss (ChunkedLossWrapper). Both are read from the Plan's data
// (fused_qkv, loss_chunks); the DTensor rules they go through are the ones of layers.cc.

#include <fmt/format.h>

#include <memory>

#include "plans/lower/layers.h"
#include "plans/util/error.h"

namespace tptune::lowering {

void Layers::split_qkv(const Name& att, const Value& qkv, Value& q, Value& k, Value& v) {
  const Shape xl = e.shape(qkv);  // (b, s, local groups x (hpk + 2) x hd)
  const int64_t hd = m.head_dim(), hpk = m.n_heads / m.n_kv_heads, group = (hpk + 2) * hd;
  if (xl.size() != 3 || xl[2] % group != 0 || xl[2] == 0)
    throw ModuleError(child(att, "wqkv").fqn,
                      fmt::format("tp {} does not divide the {} kv heads: a fused wqkv's colwise shard must hold whole "
                                  "kv groups ({} q heads + k + v of head_dim {}), the local output has {} features",
                                  e.tp, m.n_kv_heads, hpk, hd, xl.empty() ? 0 : xl.back()));
  const int64_t groups = xl[2] / group;
  const TensorDesc src = e.desc(qkv.t);
  auto make = [&](const std::string& what, int64_t heads) {
    Shape local = {xl[0], xl[1], groups * heads * hd};
    Shape global = src.global_shape;
    if (global.size() == 3) global[2] = global[2] / xl[2] * local[2];
    return e.tensor(e.cat(att.rel, ".") + what, local, act(), src.placement, TensorRole::activation, global);
  };
  const TensorId tq = make("q", hpk), tk = make("k", 1), tv = make("v", 1);
  // torch.split + .contiguous() of q, k and v: read the fused output once, write it once.
  const int64_t bytes = 2 * numel(xl) * bytes_per_element(act());
  e.op(att.rel, e.cat(att.rel, ".split_qkv"), ElementwiseOp{ElementwiseOp::Fn::copy, bytes, 0}, {qkv.t}, {tq, tk, tv});
  auto wrap = [&](TensorId t) { return qkv.dtensor ? e.dtensor(t, qkv.pl) : e.plain(t, qkv.pl); };
  q = wrap(tq), k = wrap(tk), v = wrap(tv);
  e.record([this, att, qkv, q, k, v, xl, src, bytes]() {
    auto gq = e.grad(q), gk = e.grad(k), gv = e.grad(v);
    if (!gq || !gk || !gv) return;
    // The split's backward concatenates the three gradients into the fused layout (torch.cat): another copy.
    TensorId d = e.tensor(e.cat(att.rel, ".wqkv.grad_output"), xl, act(), gq->dtensor ? gq->pl : src.placement,
                          TensorRole::gradient, src.global_shape);
    e.op(att.rel, e.cat(att.rel, ".concat_qkv_grad"), ElementwiseOp{ElementwiseOp::Fn::copy, bytes, 0},
         {gq->t, gk->t, gv->t}, {d});
    e.add_grad(qkv, gq->dtensor ? e.dtensor(d, gq->pl) : e.plain(d, gq->pl), att.rel);
  });
}

Layers::Head Layers::chunked_head(const Name& n, const Value& x_in, int64_t in_features, int64_t out_features,
                                  TensorId targets, int chunks) {
  Value x = x_in;
  const ParallelStyle* s = leaf_style(n, x);
  if (s && s->kind != StyleKind::colwise)
    throw ModuleError(n.fqn, fmt::format("a chunked loss (loss_chunks {}) needs the output projection colwise "
                                         "(vocab-sharded weight) or not parallelized, the plan says {}",
                                         chunks, to_string(s->kind)));
  const bool colwise = s != nullptr;
  TensorId w = linear_weight(n, {out_features, in_features}, colwise ? 0 : -1);
  const Shape wl = e.desc(w).local_shape;  // (vocab_l, dim)
  if (colwise) {
    // The input is prepared once for all chunks: the root norm's out_dst (R) in torchtitan 0.3.
    if (!x.dtensor) x = e.from_local(x, s->input_layout, n.rel);
    x = e.redistribute(x, s->desired_input_layout, n.rel);
    if (!x.pl.is_replicate()) x = e.redistribute(x, Placement::R(), n.rel);
  } else {
    require_plain_or(n, x, "its weight is a plain tensor");
  }
  const size_t backward_end = e.tape_size();
  const Shape xl = e.shape(x);  // (b, s, dim), whole sequence
  if (xl.size() != 3 || xl[2] != wl[1])
    throw ModuleError(n.fqn, fmt::format("input has local shape {} but the weight shard {} expects {} input features",
                                         to_string(xl), to_string(wl), wl[1]));
  if (xl[1] % chunks != 0)
    throw ModuleError(n.fqn, fmt::format("the sequence ({}) is not divisible by loss_chunks {} (ChunkedLossWrapper "
                                         "needs equal chunks)",
                                         xl[1], chunks));
  const int64_t cs = xl[1] / chunks, tokens = xl[0] * cs;
  const int bpe = bytes_per_element(act());
  const Shape chunk_shape = {xl[0], cs, xl[2]};
  const Placement out_pl = colwise ? Placement::S(-1) : Placement::R();
  // GradAccumulator: the chunks' input gradients are written into one fp32 (b, s, dim) buffer.
  const Placement grad_pl = colwise ? Placement::P() : Placement::R();
  TensorId acc = e.tensor(e.cat(n.rel, ".grad_accumulator"), xl, DType::fp32, grad_pl, TensorRole::gradient);
  auto dw = std::make_shared<TensorId>(-1);  // the weight gradient, created by the first chunk's backward
  TensorId loss = -1;
  for (int c = 0; c < chunks; ++c) {
    e.phase = Phase::forward;
    const size_t mark = e.tape_size();
    // torch.split(..., dim=1) + .contiguous(): one copy of the chunk (read + write).
    TensorId xc = e.tensor(e.cat(n.rel, ".chunk"), chunk_shape, act(), x.pl, TensorRole::activation, chunk_shape);
    e.op(n.rel, e.cat(n.rel, ".chunk"), ElementwiseOp{ElementwiseOp::Fn::copy, 2 * numel(chunk_shape) * bpe, 0}, {x.t},
         {xc});
    Value xcv = x.dtensor ? e.dtensor(xc, x.pl) : e.plain(xc);
    GemmOp g;
    g.m = tokens, g.n = wl[0], g.k = wl[1], g.trans_b = true;
    g.a_dtype = act(), g.b_dtype = act(), g.c_dtype = act();
    const Shape yl = {xl[0], cs, wl[0]};
    TensorId y = e.tensor(e.cat(n.rel, ".out"), yl, act(), out_pl, TensorRole::activation,
                          colwise ? global_shape(yl, out_pl, e.tp, n.fqn) : yl);
    e.op(n.rel, e.cat(n.rel, ".fwd"), g, {xc, w}, {y});
    Value yv = colwise ? e.dtensor(y, out_pl) : e.plain(y);
    const bool first = c == 0;
    e.record([this, n, xcv, yv, w, wl, yl, tokens, colwise, first, dw]() {
      auto gy = e.grad(yv);
      if (!gy) return;
      Value dy = *gy;
      if (colwise && !(dy.pl.is_shard() && dy.pl.normalized_dim(3) == 2))
        dy = e.redistribute_raw(dy, Placement::S(-1), n.rel, "bwd");
      GemmOp gi;  // grad_input (tokens, dim) = dy (tokens, vocab_l) @ W (vocab_l, dim): P over TP when colwise
      gi.m = tokens, gi.n = wl[1], gi.k = wl[0];
      gi.a_dtype = act(), gi.b_dtype = act(), gi.c_dtype = act();
      const Shape dxl = {yl[0], yl[1], wl[1]};
      const Placement dx_pl = colwise ? Placement::P() : Placement::R();
      TensorId dx = e.tensor(e.cat(n.rel, ".grad_input"), dxl, act(), dx_pl, TensorRole::gradient,
                             colwise ? global_shape(dxl, dx_pl, e.tp, n.fqn) : dxl);
      e.op(n.rel, e.cat(n.rel, ".bwd_input"), gi, {dy.t, w}, {dx});
      // grad_weight accumulates over the chunks (FSDP keeps lm_head unsharded and reduces once, at the last chunk).
      GemmOp gw;
      gw.m = wl[0], gw.n = wl[1], gw.k = tokens, gw.trans_a = true, gw.accumulate = !first;
      gw.a_dtype = act(), gw.b_dtype = act(), gw.c_dtype = act();
      if (first)
        *dw = e.tensor(e.cat(n.rel, ".weight.grad"), wl, act(), e.desc(w).placement, TensorRole::gradient,
                       e.desc(w).global_shape);
      e.op(n.rel, e.cat(n.rel, ".bwd_weight"), gw, {dy.t, xcv.t}, {*dw});
      e.add_grad(xcv, colwise ? e.dtensor(dx, dx_pl) : e.plain(dx), n.rel);
    });
    Value logits = yv;
    if (colwise) logits = e.redistribute(logits, s->output_layout, n.rel);
    if (colwise && s->use_local_output) logits = e.to_local(logits);
    TensorId tc = e.tensor("targets.chunk", {xl[0], cs}, DType::fp32, Placement::R(), TensorRole::input);
    e.op("loss", "loss.targets_chunk", ElementwiseOp{ElementwiseOp::Fn::copy, 2 * tokens * 4, 0}, {targets}, {tc});
    loss = this->loss({"loss", "loss"}, logits, tc);
    // The chunk's backward runs inside the loss call, before the next chunk's forward.
    e.phase = Phase::backward;
    e.run_backward(mark, e.tape_size());
    auto gx = e.grad(xcv);
    if (!gx) throw Error("internal: no gradient reaches the loss chunk");
    // GradAccumulator.add: the chunk's gradient into its slice of the fp32 buffer (read bf16, write fp32).
    e.op(n.rel, e.cat(n.rel, ".grad_accumulate"),
         ElementwiseOp{ElementwiseOp::Fn::copy, numel(chunk_shape) * (bpe + 4), numel(chunk_shape)}, {gx->t}, {acc});
  }
  // hidden_states.backward(accumulated_grad): the fp32 buffer cast to the activation dtype feeds the decoder.
  e.phase = Phase::backward;
  TensorId g = e.tensor(e.cat(n.rel, ".input_grad"), xl, act(), grad_pl, TensorRole::gradient,
                        colwise ? global_shape(xl, grad_pl, e.tp, n.fqn) : xl);
  e.op(n.rel, e.cat(n.rel, ".grad_cast"), ElementwiseOp{ElementwiseOp::Fn::copy, numel(xl) * (4 + bpe), 0}, {acc}, {g});
  e.add_grad(x, x.dtensor ? e.dtensor(g, grad_pl) : e.plain(g), n.rel);
  finish_param_grad(n, w, *dw, false);
  return {loss, backward_end};
}

}  // namespace tptune::lowering
