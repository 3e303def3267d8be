// Multi-head latent attention (Layers::mla, plans/lower/layers.h) as torchtitan 0.3.0 runs and shards it
// (torchtitan/models/deepseek_v3/model.py Attention.forward; sharding.py _set_deepseek_v3_layer_sharding).
//
// Forward, on the attention's input x (b, s, dim), replicated over tp (the sequence-parallel all-gather before it):
//   q      wq (colwise: n_heads x (nope + rope) out features) when q_lora_rank is 0, else wq_a (replicated,
//          q_lora_rank out) -> q_norm (replicated) -> wq_b (colwise)
//   kv     wkv_a (replicated, kv_lora_rank + rope out), split (views) into the latent kv (kv_lora_rank) and the shared
//          rope key k_pe (rope); kv_norm (replicated) on the latent, then wkv_b (colwise: n_heads x (nope + v) out)
//   rope   on the rope part of q (its last rope features per head) and on k_pe only; q = cat(q_nope, rope(q_pe)),
//          k = cat(k_nope, k_pe expanded to the local heads): two copies
//   core   flash attention with q/k heads of nope + rope and v heads of v_head_dim (AttentionOp::v_head_dim); v is a
//          view of wkv_b's output (SDPA and flex attention take a last-dim-contiguous view without a copy)
// and the caller's wo (rowwise, in features n_heads x v_head_dim). A plan styles wq_b and wkv_b by name, or they take
// wq's style (so the presets and Llama-style plans, whose wq is colwise, shard them as torchtitan does). "Low-rank
// projections (wkv_a, wq_a, kv_norm, q_norm) stay replicated. Up-projections (wkv_b, wq_b, wq) are colwise"
// (sharding.py): every rank computes the replicated ones on the whole (gathered) tokens, and no collective is added in
// forward. Backward: torchtitan's spmd types make x's gradient Partial over tp (the gather's backward is the
// reduce-scatter), and the Partial gradient flows through the replicated projections and norms (both linear in the
// gradient): no activation all-reduce, the replicated weights' gradients are Partial and summed over tp with the other
// replicated parameters' (FSDP's pending all-reduce, Layers::finish_param_grad). The rope key's gradient is each rank's
// local heads' sum (the expand's backward), Partial as well. The splits' backward are cats (copies), the rope's its
// backward on the rope part, then a cat with the nope part (q), as autograd runs them.
#include <fmt/format.h>

#include "plans/lower/layers.h"
#include "plans/util/checked_math.h"
#include "plans/util/error.h"

namespace tptune::lowering {

namespace {
std::string what_is(const Emitter& e, const Value& v) {
  return fmt::format("{} with local shape {}", v.dtensor ? "DTensor " + to_string(v.pl) : std::string("plain tensor"),
                     to_string(e.shape(v)));
}
}  // namespace

Value Layers::latent_linear(const Name& n, const Value& x, int64_t in_features, int64_t out_features) {
  const ParallelStyle* s = style(n);
  if (s && s->kind != StyleKind::no_parallel)
    throw ModuleError(n.fqn, fmt::format("style {}: torchtitan 0.3.0 keeps latent attention's low-rank projections "
                                         "replicated (a Replicate weight); leave {} out of the plan",
                                         to_string(s->kind), n.fqn));
  const Shape xl = e.shape(x);
  if ((x.dtensor && !x.pl.is_replicate()) || xl.size() != 3 || xl[2] != in_features)
    throw ModuleError(n.fqn, fmt::format("a replicated projection of {} features needs a replicated input, got a {}",
                                         in_features, what_is(e, x)));
  const TensorId w = parameter(n, "weight", {out_features, in_features}, -1);
  const int64_t tokens = xl[0] * xl[1];
  GemmOp g;
  g.m = tokens, g.n = out_features, g.k = in_features, g.trans_b = true;
  g.a_dtype = g.b_dtype = g.c_dtype = act();
  const Shape yl = {xl[0], xl[1], out_features};
  const TensorId y = e.tensor(e.cat(n.rel, ".out"), yl, act(), Placement::R(), TensorRole::activation, yl);
  e.op(n.rel, e.cat(n.rel, ".fwd"), g, {x.t, w}, {y});
  const Value yv = x.dtensor ? e.dtensor(y, Placement::R()) : e.plain(y);
  e.record([this, n, x, yv, w, xl, tokens, in_features, out_features]() {
    auto gy = e.grad(yv);
    if (!gy) return;
    const Value dy = *gy;
    const Placement pl = dy.dtensor ? dy.pl : Placement::R();
    // grad_input (tokens, in) = dy (tokens, out) @ W (out, in), in dy's placement.
    GemmOp gi;
    gi.m = tokens, gi.n = in_features, gi.k = out_features;
    gi.a_dtype = gi.b_dtype = gi.c_dtype = act();
    const Shape dxl = {xl[0], xl[1], in_features};
    const TensorId dx = e.tensor(e.cat(n.rel, ".grad_input"), dxl, act(), pl, TensorRole::gradient, dxl);
    e.op(n.rel, e.cat(n.rel, ".bwd_input"), gi, {dy.t, w}, {dx});
    // grad_weight (out, in) = dy^T (out, tokens) @ x (tokens, in): Partial when dy is.
    GemmOp gw;
    gw.m = out_features, gw.n = in_features, gw.k = tokens, gw.trans_a = true;
    gw.a_dtype = gw.b_dtype = gw.c_dtype = act();
    const Shape wl = {out_features, in_features};
    const TensorId dw = e.tensor(e.cat(n.rel, ".weight.grad"), wl, act(), Placement::R(), TensorRole::gradient, wl);
    e.op(n.rel, e.cat(n.rel, ".bwd_weight"), gw, {dy.t, x.t}, {dw});
    finish_param_grad(n, w, dw, dy.dtensor && pl.is_partial() && e.tp > 1);
    e.add_grad(x, x.dtensor ? e.dtensor(dx, pl) : e.plain(dx), n.rel);
  });
  return yv;
}

Value Layers::latent_norm(const Name& n, const Value& x, int64_t width) {
  const ParallelStyle* s = style(n);
  if (s && s->kind != StyleKind::no_parallel)
    throw ModuleError(n.fqn, fmt::format("style {}: torchtitan 0.3.0 keeps latent attention's norms replicated; "
                                         "leave {} out of the plan",
                                         to_string(s->kind), n.fqn));
  const Shape xl = e.shape(x);  // (b, s, W >= width): the norm reads the first `width` features (a view)
  const Shape yl = {xl[0], xl[1], width};
  const TensorId w = parameter(n, "weight", {width}, -1);
  const TensorId y = e.tensor(e.cat(n.rel, ".out"), yl, act(), Placement::R(), TensorRole::activation, yl);
  const TensorId rstd =
      e.tensor(e.cat(n.rel, ".rstd"), {xl[0], xl[1]}, DType::fp32, Placement::R(), TensorRole::activation);
  const int64_t bytes = 2 * numel(yl) * bytes_per_element(act());
  e.op(n.rel, e.cat(n.rel, ".fwd"), ElementwiseOp{ElementwiseOp::Fn::rmsnorm, bytes, 4 * numel(yl)}, {x.t, w},
       {y, rstd});
  const Value yv = x.dtensor ? e.dtensor(y, Placement::R()) : e.plain(y);
  e.record([this, n, x, yv, w, rstd, yl, bytes, width]() {
    auto gy = e.grad(yv);
    if (!gy) return;
    const Placement pl = gy->dtensor ? gy->pl : Placement::R();
    const TensorId dx = e.tensor(e.cat(n.rel, ".grad_input"), yl, act(), pl, TensorRole::gradient, yl);
    const TensorId dw = e.tensor(e.cat(n.rel, ".weight.grad"), {width}, act(), Placement::R(), TensorRole::gradient);
    e.op(n.rel, e.cat(n.rel, ".bwd"), ElementwiseOp{ElementwiseOp::Fn::rmsnorm_bwd, 3 * bytes / 2, 8 * numel(yl)},
         {x.t, w, rstd, gy->t}, {dx, dw});
    finish_param_grad(n, w, dw, gy->dtensor && pl.is_partial() && e.tp > 1);
    e.add_grad(x, x.dtensor ? e.dtensor(dx, pl) : e.plain(dx), n.rel);
  });
  return yv;
}

Value Layers::mla(const Name& n, const Value& x_in) {
  const MlaSpec& a = m.mla;
  const int64_t H = m.n_heads, rope_d = a.qk_rope_head_dim, v_d = a.v_head_dim;
  const int64_t qk = a.qk_nope_head_dim + rope_d, nope_v = a.qk_nope_head_dim + v_d;
  // The up-projections' styles: the plan's for wq_b and wkv_b, else wq's (the presets' and a Llama plan's colwise q
  // projection: torchtitan's DeepSeek-V3 sharding shards wq, wq_b and wkv_b alike).
  const std::string wq = child(n, "wq").fqn;
  const Name up = child(n, a.q_lora_rank == 0 ? "wq" : "wq_b"), kv_up = child(n, "wkv_b");
  style_of_[up.fqn] = style_of_[kv_up.fqn] = wq;
  for (const Name& c : {up, kv_up}) {
    const ParallelStyle* s = style(c);
    if (e.tp > 1 && s && s->kind == StyleKind::colwise && H % e.tp != 0)
      throw ModuleError(c.fqn, fmt::format("tp {} does not divide the {} heads: a colwise latent-attention "
                                           "up-projection shards whole heads",
                                           e.tp, H));
  }
  Value x = x_in;
  // A plain replicated input (no PrepareModuleInput on the attention) enters the sharded heads as a Replicate
  // DTensor once, so that every branch's gradient is the same Partial sum (from_local's backward all-reduces it).
  if (e.tp > 1 && !x.dtensor && style(up)) x = e.from_local(x, Placement::R(), n.rel);
  if (x.dtensor && !x.pl.is_replicate()) x = e.redistribute(x, Placement::R(), n.rel);

  // q: (b, s, local heads x (nope + rope)).
  Value q;
  if (a.q_lora_rank == 0) {
    q = linear(up, x, m.dim, checked_mul(H, qk, "wq width"), true);
  } else {
    const Value qa = latent_linear(child(n, "wq_a"), x, m.dim, a.q_lora_rank);
    const Value qn = latent_norm(child(n, "q_norm"), qa, a.q_lora_rank);
    q = linear(up, qn, a.q_lora_rank, checked_mul(H, qk, "wq_b width"), true);
  }
  if (q.dtensor) q = e.to_local(q);

  // kv: wkv_a's output split into the latent and the rope key (views); the split's backward concatenates the two
  // gradients (recorded first: it runs after both).
  const Value kva = latent_linear(child(n, "wkv_a"), x, m.dim, a.kv_lora_rank + rope_d);
  const auto view = [&](const Value& v) { return v.dtensor ? e.dtensor(v.t, v.pl) : e.plain(v.t, v.pl); };
  const Value kv_part = view(kva), pe_part = view(kva);
  const Shape kval = e.shape(kva);
  e.record([this, n, kva, kv_part, pe_part, kval]() {
    auto g1 = e.grad(kv_part), g2 = e.grad(pe_part);
    if (!g1 || !g2) throw Error(fmt::format("internal: {}.wkv_a's output lacks a gradient", n.fqn));
    if (g1->dtensor != g2->dtensor || (g1->dtensor && !g1->pl.same_as(g2->pl, 3)))
      throw ModuleError(n.fqn, fmt::format("the gradients of the kv latent and of the rope key arrive as {} and {}",
                                           what_is(e, *g1), what_is(e, *g2)));
    const Placement pl = g1->dtensor ? g1->pl : Placement::R();
    const TensorId d = e.tensor(e.cat(n.rel, ".wkv_a.grad_cat"), kval, act(), pl, TensorRole::gradient, kval);
    e.op(n.rel, e.cat(n.rel, ".kv_split_bwd"),
         ElementwiseOp{ElementwiseOp::Fn::copy, 2 * numel(kval) * bytes_per_element(act()), 0}, {g1->t, g2->t}, {d});
    e.add_grad(kva, g1->dtensor ? e.dtensor(d, pl) : e.plain(d), n.rel);
  });
  const Value kvn = latent_norm(child(n, "kv_norm"), kv_part, a.kv_lora_rank);
  Value kvb = linear(kv_up, kvn, a.kv_lora_rank, checked_mul(H, nope_v, "wkv_b width"), true);
  if (kvb.dtensor) kvb = e.to_local(kvb);

  const Shape ql = e.shape(q), bl = e.shape(kvb);
  if (ql[2] % qk != 0 || bl[2] % nope_v != 0 || ql[2] / qk != bl[2] / nope_v)
    throw ModuleError(n.fqn, fmt::format("{} gives {} local features ({} per head) and wkv_b {} ({} per head): the two "
                                         "up-projections must shard the {} heads alike (both colwise)",
                                         up.rel, ql[2], qk, bl[2], nope_v, H));
  const int64_t B = ql[0], S = ql[1], h = ql[2] / qk;
  if (S != local_seq())
    throw ModuleError(n.fqn, fmt::format("rotary embedding and attention need the whole sequence but q is a {} "
                                         "(sequence {} of {}): the input must be all-gathered (R) before attention",
                                         what_is(e, q), S, local_seq()));
  const int64_t bpe = bytes_per_element(act());
  const Placement hpl = e.desc(q.t).placement;  // the heads' placement (S(-1) when sharded), as info
  // (captured by the backward closures: by value)
  const auto heads_tensor = [this, hpl, fqn = n.fqn](const std::string& name, const Shape& local, TensorRole role) {
    const Shape global = hpl.is_shard() ? global_shape(local, hpl, e.tp, fqn) : local;
    return e.tensor(name, local, act(), hpl, role, global);
  };

  // q = cat(q_nope, rope(q_pe)): rope on the rope part of each local head, then the copy.
  const Shape pel = {B, S, h * rope_d}, qkl = {B, S, h * qk};
  const TensorId qpe = heads_tensor(e.cat(n.rel, ".q_pe.rope"), pel, TensorRole::activation);
  e.op(n.rel, e.cat(n.rel, ".q.rope"), ElementwiseOp{ElementwiseOp::Fn::rope, 2 * numel(pel) * bpe, 3 * numel(pel)},
       {q.t}, {qpe});
  const TensorId qc_t = heads_tensor(e.cat(n.rel, ".q.cat"), qkl, TensorRole::activation);
  e.op(n.rel, e.cat(n.rel, ".q.cat"), ElementwiseOp{ElementwiseOp::Fn::copy, 2 * numel(qkl) * bpe, 0}, {q.t, qpe},
       {qc_t});
  const Value qc = e.plain(qc_t, hpl);
  e.record([this, n, q, qc, pel, qkl, bpe, heads_tensor]() {
    auto g = e.grad(qc);
    if (!g) return;
    const TensorId dpe = heads_tensor(e.cat(n.rel, ".q_pe.rope_bwd"), pel, TensorRole::gradient);
    e.op(n.rel, e.cat(n.rel, ".q.rope_bwd"),
         ElementwiseOp{ElementwiseOp::Fn::rope_bwd, 2 * numel(pel) * bpe, 3 * numel(pel)}, {g->t}, {dpe});
    const TensorId dq = heads_tensor(e.cat(n.rel, ".q.grad_cat"), qkl, TensorRole::gradient);
    e.op(n.rel, e.cat(n.rel, ".q.cat_bwd"), ElementwiseOp{ElementwiseOp::Fn::copy, 2 * numel(qkl) * bpe, 0},
         {g->t, dpe}, {dq});
    e.add_grad(q, e.plain(dq, q.pl), n.rel);
  });

  // k_pe: rope on wkv_a's rope part (b, s, rope), replicated like wkv_a's output.
  const Shape kpel = {B, S, rope_d};
  const Placement rpl = kva.dtensor ? kva.pl : Placement::R();
  const TensorId kpe_t = e.tensor(e.cat(n.rel, ".k_pe.rope"), kpel, act(), rpl, TensorRole::activation, kpel);
  e.op(n.rel, e.cat(n.rel, ".k_pe.rope"),
       ElementwiseOp{ElementwiseOp::Fn::rope, 2 * numel(kpel) * bpe, 3 * numel(kpel)}, {kva.t}, {kpe_t});
  const Value kpe = kva.dtensor ? e.dtensor(kpe_t, rpl) : e.plain(kpe_t);
  e.record([this, n, pe_part, kpe, kpel, bpe]() {
    auto g = e.grad(kpe);
    if (!g) return;
    const Placement pl = g->dtensor ? g->pl : Placement::R();
    const TensorId d = e.tensor(e.cat(n.rel, ".k_pe.rope_bwd"), kpel, act(), pl, TensorRole::gradient, kpel);
    e.op(n.rel, e.cat(n.rel, ".k_pe.rope_bwd"),
         ElementwiseOp{ElementwiseOp::Fn::rope_bwd, 2 * numel(kpel) * bpe, 3 * numel(kpel)}, {g->t}, {d});
    e.add_grad(pe_part, g->dtensor ? e.dtensor(d, pl) : e.plain(d), n.rel);
  });

  // k = cat(k_nope, k_pe expanded over the local heads); v a view of wkv_b's output. Their backward: the expand's
  // sum over the local heads (a partial sum over tp when the heads are sharded), and cat(dk_nope, dv) into wkv_b's
  // output gradient.
  const TensorId kc_t = heads_tensor(e.cat(n.rel, ".k.cat"), qkl, TensorRole::activation);
  e.op(n.rel, e.cat(n.rel, ".k.cat"), ElementwiseOp{ElementwiseOp::Fn::copy, 2 * numel(qkl) * bpe, 0}, {kvb.t, kpe_t},
       {kc_t});
  const Value kc = e.plain(kc_t, hpl), v = e.plain(kvb.t, hpl);
  const bool heads_sharded = kpe.dtensor && h < H && e.tp > 1;
  e.record([this, n, kvb, kpe, kc, v, kpel, bl, h, bpe, heads_sharded]() {
    auto gk = e.grad(kc), gv = e.grad(v);
    if (!gk || !gv) throw Error(fmt::format("internal: {}'s k or v lacks a gradient", n.fqn));
    const Placement pl = heads_sharded ? Placement::P() : kpe.dtensor ? kpe.pl : Placement::R();
    const TensorId dpe = e.tensor(e.cat(n.rel, ".k_pe.grad_sum"), kpel, act(), pl, TensorRole::gradient, kpel);
    // Reads the rope part of each local head's dk and writes their sum (the expand's backward).
    e.op(n.rel, e.cat(n.rel, ".k_pe.expand_bwd"),
         ElementwiseOp{ElementwiseOp::Fn::repeat_kv_bwd, (h + 1) * numel(kpel) * bpe, (h - 1) * numel(kpel)}, {gk->t},
         {dpe});
    e.add_grad(kpe, kpe.dtensor ? e.dtensor(dpe, pl) : e.plain(dpe), n.rel);
    const Placement hpl = e.desc(kvb.t).placement;
    const Shape gbl = hpl.is_shard() ? global_shape(bl, hpl, e.tp, n.fqn) : bl;
    const TensorId dkvb = e.tensor(e.cat(n.rel, ".wkv_b.grad_cat"), bl, act(), hpl, TensorRole::gradient, gbl);
    e.op(n.rel, e.cat(n.rel, ".kv_b_split_bwd"), ElementwiseOp{ElementwiseOp::Fn::copy, 2 * numel(bl) * bpe, 0},
         {gk->t, gv->t}, {dkvb});
    e.add_grad(kvb, e.plain(dkvb, kvb.pl), n.rel);
  });

  // The core: q/k heads of nope + rope, v heads of v_head_dim (no grouped-query heads: one k and v per q head).
  AttentionOp core{B, S, h, h, qk, true, false};
  core.v_head_dim = v_d;
  const Shape ol = {B, S, h * v_d};
  const TensorId o = heads_tensor(e.cat(n.rel, ".core.out"), ol, TensorRole::activation);
  const TensorId lse =
      e.tensor(e.cat(n.rel, ".core.lse"), {B, h, S}, DType::fp32, Placement::R(), TensorRole::activation);
  e.op(n.rel, e.cat(n.rel, ".core.fwd"), core, {qc_t, kc_t, kvb.t}, {o, lse});
  const Value out = e.plain(o, hpl);
  e.record([this, n, qc, kc, v, out, o, lse, core, qkl, ol, heads_tensor]() {
    auto g = e.grad(out);
    if (!g) return;
    AttentionOp b = core;
    b.backward = true;
    const TensorId dq = heads_tensor(e.cat(n.rel, ".core.grad_q"), qkl, TensorRole::gradient);
    const TensorId dk = heads_tensor(e.cat(n.rel, ".core.grad_k"), qkl, TensorRole::gradient);
    const TensorId dv = heads_tensor(e.cat(n.rel, ".core.grad_v"), ol, TensorRole::gradient);
    e.op(n.rel, e.cat(n.rel, ".core.bwd"), b, {qc.t, kc.t, v.t, o, lse, g->t}, {dq, dk, dv});
    e.add_grad(qc, e.plain(dq, qc.pl), n.rel);
    e.add_grad(kc, e.plain(dk, kc.pl), n.rel);
    e.add_grad(v, e.plain(dv, v.pl), n.rel);
  });
  return out;
}

}  // namespace tptune::lowering
