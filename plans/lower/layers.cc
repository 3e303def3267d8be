#include "plans/lower/layers.h"

#include <fmt/format.h>

#include "plans/util/checked_math.h"
#include "plans/util/error.h"

namespace tptune::lowering {

namespace {
std::string describe(const Emitter& e, const Value& v) {
  return fmt::format("{} with local shape {}", v.dtensor ? "DTensor " + to_string(v.pl) : std::string("plain tensor"),
                     to_string(e.shape(v)));
}
bool is_token_shard(const Placement& p, int ndim) { return p.is_shard() && p.normalized_dim(ndim) < ndim - 1; }
}  // namespace

Layers::Layers(Emitter& e, const Model& m, const Training& t, const Plan& plan) : e(e), m(m), t(t), plan(plan) {}

Layers::Name Layers::child(const Name& parent, const std::string& leaf) const {
  auto join = [](const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; };
  return {join(parent.fqn, leaf), join(parent.rel, leaf)};
}

TensorId Layers::parameter(const Name& n, const std::string& pname, const Shape& full, int shard_dim) {
  Placement pl = shard_dim >= 0 ? Placement::S(shard_dim) : Placement::R();
  Shape local = local_shape(full, pl, e.tp, n.fqn);
  TensorId p = e.tensor(e.cat(n.rel, ".") + pname, local, act(), pl, TensorRole::parameter, full);
  auto& d = e.prog.tensors[static_cast<size_t>(p)];
  d.param = d.name;
  d.param_shard_dim = shard_dim >= 0 ? shard_dim : -1;
  params.push_back(p);
  return p;
}

namespace {
std::string placement_words(int shard_dim) {
  return shard_dim == 0 ? "on the vocab dim (S(0))" : shard_dim == 1 ? "on the model dim (S(1))" : "replicated (R)";
}
}  // namespace

TensorId Layers::linear_weight(const Name& n, const Shape& full, int shard_dim) {
  if (tied_weight < 0 || n.fqn != plan.output_fqn) return parameter(n, "weight", full, shard_dim);
  const TensorDesc& w = e.desc(tied_weight);
  if (w.param_shard_dim != shard_dim)
    throw ModuleError(
        n.fqn, fmt::format("its weight is tok_embeddings.weight (tie_word_embeddings), which tok_embeddings holds {} "
                           "but this style would hold {}: a tied weight is one parameter with one placement "
                           "(torchtitan refuses a tied parameter with conflicting sharding configs); make "
                           "tok_embeddings rowwise and {} colwise (both S(0)), or parallelize neither",
                           placement_words(w.param_shard_dim), placement_words(shard_dim), n.fqn));
  if (w.global_shape != full)
    throw ModuleError(n.fqn, fmt::format("its weight is tok_embeddings.weight {} (tie_word_embeddings) but it needs {}",
                                         to_string(w.global_shape), to_string(full)));
  return tied_weight;
}

void Layers::finish_param_grad(const Name& n, TensorId p, TensorId g, bool partial) {
  TensorId final_grad = g;
  if (p == tied_weight && partial && e.tp > 1 && plan.dp_shard <= 1 && !plan.fsdp_always)
    throw ModuleError(n.fqn,
                      "its gradient of the tied tok_embeddings.weight is a partial sum over TP, which only the "
                      "optimizer step would all-reduce, while the other use's is not: tptune does not model "
                      "summing the two; parallelize the output colwise or not at all");
  if (partial && e.tp > 1) {
    if (plan.dp_shard <= 1 && !plan.fsdp_always) {
      // DTensor without FSDP: the gradient stays Partial until the optimizer step reads it (Lowerer::optimizer).
      reduced_at_optimizer[p] = n.rel;
      grad_of[p] = g;
      return;
    }
    const TensorDesc gd = e.desc(g);
    // A replicated parameter whose gradient is a partial sum over TP (its input was sequence-sharded) is
    // all-reduced by FSDP2's post-backward (FSDPParam._get_grad_inner_tensor redistributes Partial -> Replicate;
    // torchtitan 0.3's norm_config: "pending BWD AR handled by FSDP"), as Megatron's allreduce_layernorm_grads.
    final_grad = e.collective(n.rel, "bwd", CollectiveKind::all_reduce, Group::tp, ReduceOp::sum, g, gd.local_shape,
                              gd.global_shape, gd.dtype, TensorRole::param_grad);
  }
  if (p == tied_weight) {
    if (tied_first_grad_ < 0) {  // the first use: held (a plain gradient) until the other use's is made
      tied_first_grad_ = final_grad;
      e.prog.tensors[static_cast<size_t>(final_grad)].role = TensorRole::gradient;
      return;
    }
    // The second use: y += the first's. Reads both, writes one: 3 x the gradient's bytes, one add per element.
    const TensorDesc gd = e.desc(final_grad);
    const int64_t elems = numel(gd.local_shape);
    e.op(n.rel, e.cat(n.rel, ".weight.grad_tied_add"),
         ElementwiseOp{ElementwiseOp::Fn::accumulate, 3 * elems * bytes_per_element(gd.dtype), elems},
         {tied_first_grad_, final_grad}, {final_grad});
  }
  set_param_grad(p, final_grad);
}

void Layers::set_param_grad(TensorId p, TensorId g) {
  const TensorDesc pd = e.desc(p);
  auto& d = e.prog.tensors[static_cast<size_t>(g)];
  d.role = TensorRole::param_grad;
  d.param = pd.param;
  d.param_shard_dim = pd.param_shard_dim;
  d.placement = pd.placement;
  d.global_shape = pd.global_shape;
  grad_of[p] = g;
}

TensorId Layers::cast_float8_tensor(const Name& n, TensorId x, bool sharded, DType to, const std::string& what,
                                    TensorId& scale) {
  const TensorDesc xd = e.desc(x);
  const int64_t elems = numel(xd.local_shape);
  TensorId q = e.tensor(xd.name + ".fp8", xd.local_shape, to, xd.placement,
                        xd.role == TensorRole::parameter ? TensorRole::activation : xd.role, xd.global_shape);
  if (is_rowwise(plan.float8)) {
    // Rowwise scaling: one scale per row, computed locally; no amax collective.
    Shape rows(xd.local_shape.begin(), xd.local_shape.end() - 1);
    scale = e.tensor(xd.name + ".fp8_scales", rows, DType::fp32, Placement::R(), TensorRole::scale);
    CastFp8Op c{CastFp8Op::Stage::cast, to, elems, true};
    e.op(n.rel, e.names ? fmt::format("{}.cast_{}", n.rel, what) : std::string(), c, {x}, {q, scale});
    return q;
  }
  // amax: read x once (bytes = elems * bpe); cast: read x, write 1 byte/element.
  TensorId amax = e.tensor(xd.name + ".amax", {1}, DType::fp32, Placement::R(), TensorRole::scale);
  CastFp8Op amax_op{CastFp8Op::Stage::amax, to, elems, false};
  const Op* producer = e.last_writer(x);
  amax_op.producer_elementwise = producer && std::holds_alternative<ElementwiseOp>(producer->kind);
  e.op(n.rel, e.names ? fmt::format("{}.amax_{}", n.rel, what) : std::string(), amax_op, {x}, {amax});
  if (sharded) {
    // Tensorwise scaling of a sharded tensor needs the global amax: all-reduce(max) of one fp32 over TP.
    amax = e.collective(n.rel, "amax_" + what, CollectiveKind::all_reduce, Group::tp, ReduceOp::max, amax, {1}, {1},
                        DType::fp32, TensorRole::scale);
  }
  scale = e.tensor(xd.name + ".scale", {1}, DType::fp32, Placement::R(), TensorRole::scale);
  e.op(n.rel, e.names ? fmt::format("{}.cast_{}", n.rel, what) : std::string(),
       CastFp8Op{CastFp8Op::Stage::cast, to, elems, false}, {x, amax}, {q, scale});
  return q;
}

Value Layers::cast_float8(const Name& n, const Value& x, DType to, const std::string& what) {
  TensorId scale = -1;
  bool sharded = x.dtensor && x.pl.is_shard() && e.tp > 1;
  TensorId q = cast_float8_tensor(n, x.t, sharded, to, what, scale);
  Value out = x.dtensor ? e.dtensor(q, x.pl, scale) : e.plain(q, x.pl);
  out.scale = scale;
  // The cast is the identity in backward (the gradient stays in high precision).
  e.record([this, x, out, n]() {
    if (auto g = e.grad(out)) e.add_grad(x, *g, n.rel);
  });
  return out;
}

Value Layers::cast_gradient_float8(const Name& n, const Value& x) {
  Value out = e.dtensor(x.t, x.pl, x.scale);
  e.record([this, x, out, n]() {
    auto g = e.grad(out);
    if (!g) return;
    Value gd = g->dtensor ? *g : e.dtensor(g->t, out.pl);
    if (gd.scale < 0) {
      // (No plan of the modelled blocks brings a Partial gradient here: the output feeds the residual stream. One
      // would need DTensor's sum before the amax, which is not modelled.)
      if (gd.pl.is_partial())
        throw ModuleError(n.fqn, "the float8 output's gradient arrives Partial: its tensorwise cast is not modelled");
      TensorId scale = -1;
      const bool sharded = gd.pl.is_shard() && e.tp > 1;
      TensorId q = cast_float8_tensor(n, gd.t, sharded, DType::fp8_e5m2, "grad_output", scale);
      gd = e.dtensor(q, gd.pl, scale);
    }
    e.add_grad(x, gd, n.rel);
  });
  return out;
}

void Layers::require_plain_or(const Name& n, const Value& x, const char* what) const {
  if (x.dtensor)
    throw ModuleError(n.fqn, fmt::format("receives a {} but is not parallelized in the plan ({}); torch would "
                                         "raise 'mixed torch.Tensor and DTensor'",
                                         describe(e, x), what));
}

Value Layers::module_input(const Name& n, const Value& x) {
  const ParallelStyle* s = style(n);
  if (!s || s->kind != StyleKind::prepare_module_input) return x;
  // torch's PrepareModuleInput: a plain input is wrapped with input_layout; a DTensor is kept; then redistributed
  // to desired_input_layout when the declared layouts differ. PrepareFloat8ModuleInput casts to e4m3 first.
  Value v = x.dtensor ? x : e.from_local(x, s->input_layout, n.rel);
  bool differs = !s->input_layout.same_as(s->desired_input_layout, static_cast<int>(e.shape(v).size()));
  if (differs && plan.float8 == Float8Recipe::tensorwise && v.scale < 0)
    v = cast_float8(n, v, DType::fp8_e4m3, "input");
  if (differs) v = e.redistribute(v, s->desired_input_layout, n.rel);
  return s->use_local_output ? e.to_local(v) : v;
}

const ParallelStyle* Layers::leaf_style(const Name& n, Value& x) {
  const ParallelStyle* s = style(n);
  if (s && s->kind == StyleKind::prepare_module_input) {
    x = module_input(n, x);  // the leaf then runs on what PrepareModuleInput hands it, with plain parameters
    return nullptr;
  }
  return s && s->kind == StyleKind::no_parallel ? nullptr : s;
}

Value Layers::linear(const Name& n, const Value& x_in, int64_t in_features, int64_t out_features, bool float8_eligible,
                     bool bias) {
  Value x = x_in;
  const ParallelStyle* s = leaf_style(n, x);
  const bool colwise = s && s->kind == StyleKind::colwise;
  const bool rowwise = s && s->kind == StyleKind::rowwise;
  const bool parallel = s != nullptr;
  const int shard_dim = colwise ? 0 : rowwise ? 1 : -1;
  TensorId w = linear_weight(n, {out_features, in_features}, shard_dim);
  const Shape wl = e.desc(w).local_shape;  // (out_l, in_l)
  // torch's _partition_linear_fn: ColwiseParallel shards the bias S(0) like the weight's rows, RowwiseParallel keeps
  // it Replicate.
  const TensorId b = bias ? parameter(n, "bias", {out_features}, colwise ? 0 : -1) : -1;
  const bool f8 = plan.float8 != Float8Recipe::none && float8_eligible;
  const bool f8_tensorwise = f8 && plan.float8 == Float8Recipe::tensorwise;

  Placement out_pl = Placement::R();
  if (parallel) {
    // ColwiseParallel / RowwiseParallel / SequenceParallel input preparation.
    if (!x.dtensor) x = e.from_local(x, s->input_layout, n.rel);
    if (f8_tensorwise && (colwise || rowwise) && x.scale < 0 &&
        !s->input_layout.same_as(s->desired_input_layout, static_cast<int>(e.shape(x).size())))
      x = cast_float8(n, x, DType::fp8_e4m3, "input");  // Float8*Parallel: cast before the redistribution
    x = e.redistribute(x, s->desired_input_layout, n.rel);
    const int nd = static_cast<int>(e.shape(x).size());
    // DTensor's linear rules: (R, W S(0)) -> S(-1); (S(-1), W S(1)) -> P; (X, W R) -> X for X not on features.
    if (colwise && !x.pl.is_replicate()) x = e.redistribute(x, Placement::R(), n.rel);
    if (rowwise && !(x.pl.is_shard() && x.pl.normalized_dim(nd) == nd - 1))
      x = e.redistribute(x, Placement::S(-1), n.rel);
    if (!colwise && !rowwise && x.pl.is_shard() && x.pl.normalized_dim(nd) == nd - 1)
      x = e.redistribute(x, Placement::R(), n.rel);
    out_pl = colwise ? Placement::S(-1) : rowwise ? Placement::P() : x.pl;
  } else {
    require_plain_or(n, x, "its weight is a plain tensor");
  }
  const Shape xl = e.shape(x);
  if (xl.size() != 3 || xl[2] != wl[1])
    throw ModuleError(n.fqn, fmt::format("input is a {} but the weight shard {} expects {} input features",
                                         describe(e, x), to_string(wl), wl[1]));
  const Value x_hp = x;  // the bf16 input, for the weight gradient of rowwise_with_gw_hp
  const bool gw_hp = f8 && plan.float8 == Float8Recipe::rowwise_with_gw_hp;
  if (f8 && x.scale < 0) x = cast_float8(n, x, DType::fp8_e4m3, "input");
  TensorId w_scale = -1, wq = w;
  if (f8) wq = cast_float8_tensor(n, w, shard_dim >= 0 && e.tp > 1, DType::fp8_e4m3, "weight", w_scale);

  const int64_t tokens = xl[0] * xl[1];
  GemmOp g;
  g.m = tokens, g.n = wl[0], g.k = wl[1], g.trans_b = true;
  g.a_dtype = e.desc(x.t).dtype, g.b_dtype = e.desc(wq).dtype, g.c_dtype = act();
  const Shape yl = {xl[0], xl[1], wl[0]};
  const Shape yg = parallel ? global_shape(yl, out_pl, e.tp, n.fqn) : yl;
  TensorId y = e.tensor(e.cat(n.rel, bias ? ".mm" : ".out"), yl, act(), out_pl, TensorRole::activation, yg);
  std::vector<TensorId> ins = {x.t, wq};
  if (f8) ins.insert(ins.end(), {x.scale, w_scale});
  e.op(n.rel, e.cat(n.rel, ".fwd"), g, ins, {y});
  if (bias) {
    // y + b, after the (float8 or bf16) matmul; reads y and b, writes the output. On a Partial output (rowwise) each
    // rank adds b / tp, so that the reduction holds b once.
    const TensorId yb = e.tensor(e.cat(n.rel, ".out"), yl, act(), out_pl, TensorRole::activation, yg);
    ElementwiseOp bias_op{ElementwiseOp::Fn::bias_add, (2 * numel(yl) + wl[0]) * bytes_per_element(act()), numel(yl)};
    bias_op.bias_split = out_pl.is_partial() && e.tp > 1 ? e.tp : 1;
    e.op(n.rel, e.cat(n.rel, ".bias_add"), bias_op, {y, b}, {yb});
    y = yb;
  }
  Value yv = parallel ? e.dtensor(y, out_pl) : e.plain(y);

  e.record([this, n, x, x_hp, yv, w, b, wq, w_scale, wl, xl, tokens, parallel, colwise, rowwise, f8, f8_tensorwise,
            gw_hp]() {
    auto gy = e.grad(yv);
    if (!gy) return;
    Value dy = *gy;
    const int nd = 3;
    // The local products need dy as S(-1) (colwise) or R (rowwise); DTensor redistributes implicitly otherwise.
    if (colwise && !(dy.pl.is_shard() && dy.pl.normalized_dim(nd) == nd - 1))
      dy = e.redistribute_raw(dy, Placement::S(-1), n.rel, "bwd");
    if (rowwise && !dy.pl.is_replicate()) dy = e.redistribute_raw(dy, Placement::R(), n.rel, "bwd");
    const bool partial = parallel && !colwise && !rowwise && is_token_shard(x.pl, nd);
    if (b >= 0) {
      // The bias gradient: dy (high precision, as autograd sees torchao's `output + bias`) summed over tokens;
      // S(0) like the bias when colwise (dy is S(-1)), Replicate when rowwise (dy is R).
      const TensorDesc bd = e.desc(b);
      TensorId db = e.tensor(e.cat(n.rel, ".bias.grad"), bd.local_shape, act(), bd.placement, TensorRole::gradient,
                             bd.global_shape);
      ElementwiseOp sum{ElementwiseOp::Fn::bias_grad, (tokens * wl[0] + wl[0]) * bytes_per_element(act()),
                        tokens * wl[0]};
      e.op(n.rel, e.cat(n.rel, ".bwd_bias"), sum, {dy.t}, {db});
      finish_param_grad(n, b, db, partial);
    }
    TensorId dyq = dy.t, dy_scale = dy.scale;
    if (f8 && dy.scale < 0) {  // (a Float8*Parallel output's gradient arrives cast: cast_gradient_float8)
      bool sharded = f8_tensorwise && dy.dtensor && dy.pl.is_shard() && e.tp > 1;
      dyq = cast_float8_tensor(n, dy.t, sharded, DType::fp8_e5m2, "grad_output", dy_scale);
    }
    // grad_input (tokens, in_l) = dy (tokens, out_l) @ W (out_l, in_l)
    GemmOp gi;
    gi.m = tokens, gi.n = wl[1], gi.k = wl[0];
    gi.a_dtype = e.desc(dyq).dtype, gi.b_dtype = e.desc(wq).dtype, gi.c_dtype = act();
    Placement dx_pl = colwise ? Placement::P() : rowwise ? Placement::S(-1) : dy.pl;
    TensorId dx =
        e.tensor(e.cat(n.rel, ".grad_input"), {xl[0], xl[1], wl[1]}, act(), dx_pl, TensorRole::gradient,
                 parallel ? global_shape({xl[0], xl[1], wl[1]}, dx_pl, e.tp, n.fqn) : Shape{xl[0], xl[1], wl[1]});
    std::vector<TensorId> ins = {dyq, wq};
    if (f8) ins.insert(ins.end(), {dy_scale, w_scale});
    e.op(n.rel, e.cat(n.rel, ".bwd_input"), gi, ins, {dx});
    // grad_weight (out_l, in_l) = dy^T (out_l, tokens) @ x (tokens, in_l)
    // rowwise_with_gw_hp keeps this GEMM in high precision: bf16 dy and the bf16 input.
    GemmOp gw;
    gw.m = wl[0], gw.n = wl[1], gw.k = tokens, gw.trans_a = true;
    const TensorId gw_a = gw_hp ? dy.t : dyq, gw_b = gw_hp ? x_hp.t : x.t;
    gw.a_dtype = e.desc(gw_a).dtype, gw.b_dtype = e.desc(gw_b).dtype, gw.c_dtype = act();
    TensorId dw = e.tensor(e.cat(n.rel, ".weight.grad"), wl, act(), e.desc(w).placement, TensorRole::gradient,
                           e.desc(w).global_shape);
    std::vector<TensorId> wins = {gw_a, gw_b};
    if (f8 && !gw_hp) wins.insert(wins.end(), {dy_scale, x.scale});
    e.op(n.rel, e.cat(n.rel, ".bwd_weight"), gw, wins, {dw});
    finish_param_grad(n, w, dw, partial);
    e.add_grad(x, parallel ? e.dtensor(dx, dx_pl) : e.plain(dx), n.rel);
  });

  if (!parallel) return yv;
  Value out = yv;
  if (colwise || rowwise) out = e.redistribute(out, s->output_layout, n.rel);
  // Float8*Parallel's output (torchao float8_tensor_parallel.py, _prepare_output_fn). Not for a Linear with a bias:
  // torchao adds the bias to the GEMM's output inside Float8Linear, and the bias gradient would then be a sum over a
  // float8 tensor, which its Float8Tensor does not implement; its gradient is cast at the GEMMs as Float8Linear does.
  if (f8_tensorwise && (colwise || rowwise) && b < 0) out = cast_gradient_float8(n, out);
  return s->use_local_output ? e.to_local(out) : out;
}

Value Layers::norm(const Name& n, const Value& x_in) {
  Value x = x_in;
  const ParallelStyle* s = leaf_style(n, x);
  if (s && s->kind != StyleKind::sequence_parallel)
    throw ModuleError(n.fqn, fmt::format("style {} applies to Linear and Embedding modules, not to a norm "
                                         "(use sequence_parallel, prepare_module_input or leave it out)",
                                         to_string(s->kind)));
  const bool sp = s != nullptr;
  if (sp) {
    x = x.dtensor ? e.redistribute(x, s->desired_input_layout, n.rel) : e.from_local(x, s->input_layout, n.rel);
    if (!x.pl.same_as(s->desired_input_layout, 3)) x = e.redistribute(x, s->desired_input_layout, n.rel);
  } else {
    require_plain_or(n, x, "its weight is a plain tensor");
  }
  const Shape xl = e.shape(x);
  if (xl.size() != 3 || xl[2] != m.dim)
    throw ModuleError(n.fqn, fmt::format("normalizes over dim {} but receives a {}", m.dim, describe(e, x)));
  const bool layernorm = m.norm == Norm::layernorm;
  TensorId w = parameter(n, "weight", {m.dim}, -1);
  TensorId b = layernorm ? parameter(n, "bias", {m.dim}, -1) : -1;
  Shape rows = {xl[0], xl[1]};
  TensorId y = e.tensor(e.cat(n.rel, ".out"), xl, act(), x.dtensor ? x.pl : Placement::R(), TensorRole::activation,
                        e.global_of(x, n.fqn));
  TensorId rstd = e.tensor(e.cat(n.rel, ".rstd"), rows, DType::fp32, Placement::R(), TensorRole::activation);
  TensorId mean =
      layernorm ? e.tensor(e.cat(n.rel, ".mean"), rows, DType::fp32, Placement::R(), TensorRole::activation) : -1;
  const int64_t bytes = 2 * numel(xl) * bytes_per_element(act());
  // ~4 flops/element (square, sum, scale, weight); layernorm ~7.
  ElementwiseOp op{layernorm ? ElementwiseOp::Fn::layernorm : ElementwiseOp::Fn::rmsnorm, bytes,
                   (layernorm ? 7 : 4) * numel(xl)};
  if (layernorm)
    e.op(n.rel, e.cat(n.rel, ".fwd"), op, {x.t, w, b}, {y, mean, rstd});
  else
    e.op(n.rel, e.cat(n.rel, ".fwd"), op, {x.t, w}, {y, rstd});
  Value yv = sp ? e.dtensor(y, x.pl) : e.plain(y);
  e.record([this, n, x, yv, w, b, rstd, mean, xl, layernorm, sp, bytes]() {
    auto gy = e.grad(yv);
    if (!gy) return;
    Value dy = *gy;
    if (dy.dtensor && !dy.pl.same_as(x.pl, 3)) dy = e.redistribute_raw(dy, x.pl, n.rel, "bwd");
    TensorId dx = e.tensor(e.cat(n.rel, ".grad_input"), xl, act(), x.dtensor ? x.pl : Placement::R(),
                           TensorRole::gradient, e.global_of(x, n.fqn));
    TensorId dw = e.tensor(e.cat(n.rel, ".weight.grad"), {m.dim}, act(), Placement::R(), TensorRole::gradient);
    TensorId db =
        layernorm ? e.tensor(e.cat(n.rel, ".bias.grad"), {m.dim}, act(), Placement::R(), TensorRole::gradient) : -1;
    // Reads x and dy, writes dx: 3 activations = 1.5x the forward's 2; ~8 flops/element (12 for layernorm).
    ElementwiseOp op{layernorm ? ElementwiseOp::Fn::layernorm_bwd : ElementwiseOp::Fn::rmsnorm_bwd, 3 * bytes / 2,
                     (layernorm ? 12 : 8) * numel(xl)};
    if (layernorm)
      e.op(n.rel, e.cat(n.rel, ".bwd"), op, {x.t, w, mean, rstd, dy.t}, {dx, dw, db});
    else
      e.op(n.rel, e.cat(n.rel, ".bwd"), op, {x.t, w, rstd, dy.t}, {dx, dw});
    bool partial = sp && is_token_shard(x.pl, 3);
    finish_param_grad(n, w, dw, partial);
    if (layernorm) finish_param_grad(n, b, db, partial);
    e.add_grad(x, sp ? e.dtensor(dx, x.pl) : e.plain(dx), n.rel);
  });
  if (sp && s->use_local_output) return e.to_local(yv);
  return yv;
}

Value Layers::embedding(const Name& n, const Value& tokens_in) {
  const ParallelStyle* s = style(n);
  if (s && s->kind == StyleKind::no_parallel) s = nullptr;
  if (s && s->kind != StyleKind::colwise && s->kind != StyleKind::rowwise)
    throw ModuleError(
        n.fqn, fmt::format("style {} does not apply to an Embedding (use colwise or rowwise)", to_string(s->kind)));
  const bool rowwise = s && s->kind == StyleKind::rowwise;
  const bool colwise = s && s->kind == StyleKind::colwise;
  TensorId w = parameter(n, "weight", {m.vocab_size, m.dim}, rowwise ? 0 : colwise ? 1 : -1);
  if (m.tie_word_embeddings) tied_weight = w;
  const Shape wl = e.desc(w).local_shape;
  Value tok = tokens_in;
  if (s) {
    tok = e.from_local(tok, s->input_layout, n.rel);
    if (!tok.pl.is_replicate())
      throw ModuleError(n.fqn, fmt::format("token ids must be replicated (R) for an Embedding, the plan declares {}",
                                           to_string(tok.pl)));
  }
  const Shape tl = e.shape(tok);
  const bool sharded_rows = rowwise && e.tp > 1;
  Placement out_pl = rowwise   ? (e.tp > 1 ? Placement::P() : Placement::R())
                     : colwise ? Placement::S(-1)
                               : Placement::R();
  Shape out_local = {tl[0], tl[1], wl[1]};
  TensorId out = e.tensor(e.cat(n.rel, ".out"), out_local, act(), out_pl, TensorRole::activation,
                          s ? global_shape(out_local, out_pl, e.tp, n.fqn) : out_local);
  EmbeddingOp op{tl[0] * tl[1], wl[0], wl[1], sharded_rows, false};
  e.op(n.rel, e.cat(n.rel, ".fwd"), op, {tok.t, w}, {out});
  Value ov = s ? e.dtensor(out, out_pl) : e.plain(out);
  e.record([this, n, tok, ov, w, wl, tl, sharded_rows, colwise, rowwise]() {
    auto gy = e.grad(ov);
    if (!gy) return;
    Value dy = *gy;
    if (rowwise && !dy.pl.is_replicate()) dy = e.redistribute_raw(dy, Placement::R(), n.rel, "bwd");
    if (colwise && !(dy.pl.is_shard() && dy.pl.normalized_dim(3) == 2))
      dy = e.redistribute_raw(dy, Placement::S(-1), n.rel, "bwd");
    TensorId dw = e.tensor(e.cat(n.rel, ".weight.grad"), wl, act(), e.desc(w).placement, TensorRole::gradient,
                           e.desc(w).global_shape);
    e.op(n.rel, e.cat(n.rel, ".bwd"), EmbeddingOp{tl[0] * tl[1], wl[0], wl[1], sharded_rows, true}, {tok.t, dy.t},
         {dw});
    finish_param_grad(n, w, dw, false);
  });
  if (!s) return ov;
  Value o = e.redistribute(ov, s->output_layout, n.rel);
  return s->use_local_output ? e.to_local(o) : o;
}

Value Layers::rope(const Name& n, const Value& x) {
  const Shape xl = e.shape(x);
  // With context parallelism the "whole sequence" is this cp rank's shard, at the positions of its head and tail
  // chunks (torchtitan shards the rope positions with the inputs): the same op on seq/cp tokens.
  if (xl[1] != local_seq())
    throw ModuleError(n.fqn, fmt::format("rotary embedding and attention need the whole sequence but receive a {} "
                                         "(sequence {} of {}): the input must be all-gathered (R) before attention",
                                         describe(e, x), xl[1], local_seq()));
  const int64_t bytes = 2 * numel(xl) * bytes_per_element(act());
  TensorId y = e.tensor(e.desc(x.t).name + ".rope", xl, act(), e.desc(x.t).placement, TensorRole::activation,
                        e.desc(x.t).global_shape);
  e.op(n.rel, e.cat(n.rel, ".rope"), ElementwiseOp{ElementwiseOp::Fn::rope, bytes, 3 * numel(xl)}, {x.t}, {y});
  Value yv = x.dtensor ? e.dtensor(y, x.pl) : e.plain(y, x.pl);
  e.record([this, n, x, yv, xl, bytes]() {
    auto g = e.grad(yv);
    if (!g) return;
    TensorId dx = e.tensor(e.desc(g->t).name + ".rope_bwd", xl, act(), e.desc(g->t).placement, TensorRole::gradient,
                           e.desc(g->t).global_shape);
    e.op(n.rel, e.cat(n.rel, ".rope_bwd"), ElementwiseOp{ElementwiseOp::Fn::rope_bwd, bytes, 3 * numel(xl)}, {g->t},
         {dx});
    e.add_grad(x, g->dtensor ? e.dtensor(dx, g->pl) : e.plain(dx), n.rel);
  });
  return yv;
}

void Layers::attention_core(const Name& n, const Value& q, const Value& k, const Value& v, Value& out) {
  const int64_t hd = m.head_dim();
  const Shape ql = e.shape(q), kl = e.shape(k), vl = e.shape(v);
  auto heads = [&](const Shape& s, int64_t total, const char* proj) {
    if (s.back() % hd != 0 || total % (total * hd / s.back()) != 0)
      throw ModuleError(child(n, proj).fqn,
                        fmt::format("tp {} does not divide the {} heads: the local output has {} features, {} "
                                    "heads of head_dim {}",
                                    e.tp, total, s.back(), static_cast<double>(s.back()) / hd, hd));
    return s.back() / hd;
  };
  const int64_t hq = heads(ql, m.n_heads, "wq");
  const int64_t hkv = heads(kl, m.n_kv_heads, "wk");
  const int64_t hv = heads(vl, m.n_kv_heads, "wv");
  if (hv != hkv)  // e.g. wk colwise but wv declaring output R: each rank would attend over mismatched kv heads
    throw ModuleError(n.fqn, fmt::format("local key heads ({}) and value heads ({}) differ: wk and wv must be "
                                         "sharded alike",
                                         hkv, hv));
  if (kl.size() != ql.size() || vl.size() != ql.size() || kl[0] != ql[0] || kl[1] != ql[1] || vl[1] != ql[1])
    throw ModuleError(n.fqn, fmt::format("q, k and v must have the same local batch and sequence: {}, {}, {}",
                                         to_string(ql), to_string(kl), to_string(vl)));
  if (hkv == 0 || hq % hkv != 0 || hq / hkv != m.n_heads / m.n_kv_heads)
    throw ModuleError(n.fqn, fmt::format("local query heads ({}) and kv heads ({}) do not keep the model's grouping "
                                         "{} / {}",
                                         hq, hkv, m.n_heads, m.n_kv_heads));
  if (q.dtensor != k.dtensor || q.dtensor != v.dtensor)
    throw ModuleError(n.fqn, "q, k and v must all be plain tensors or all DTensors");
  Value qr = rope(child(n, "q"), q), kr = rope(child(n, "k"), k);
  Value vr = v;
  int64_t hkv_sdpa = hkv;  // the key/value heads SDPA (or the ring around it) receives
  if (m.gqa == Gqa::repeat_kv && hq > hkv) {
    kr = repeat_kv(child(n, "k"), kr, hq / hkv);
    vr = repeat_kv(child(n, "v"), v, hq / hkv);
    hkv_sdpa = hq;
  }
  if (plan.cp_degree > 1) return ring_attention(n, qr, kr, vr, hq, hkv_sdpa, out);
  AttentionOp a{ql[0], ql[1], hq, hkv_sdpa, hd, true, false};
  TensorId o = e.tensor(e.cat(n.rel, ".core.out"), ql, act(), e.desc(q.t).placement, TensorRole::activation,
                        e.desc(q.t).global_shape);
  TensorId lse =
      e.tensor(e.cat(n.rel, ".core.lse"), {ql[0], hq, ql[1]}, DType::fp32, Placement::R(), TensorRole::activation);
  e.op(n.rel, e.cat(n.rel, ".core.fwd"), a, {qr.t, kr.t, vr.t}, {o, lse});
  out = q.dtensor ? e.dtensor(o, q.pl) : e.plain(o, q.pl);
  Value ov = out;
  e.record([this, n, qr, kr, vr, ov, o, lse, a, ql]() {
    auto g = e.grad(ov);
    if (!g) return;
    AttentionOp b = a;
    b.backward = true;
    TensorId dq = e.tensor(e.cat(n.rel, ".core.grad_q"), ql, act(), e.desc(qr.t).placement, TensorRole::gradient,
                           e.desc(qr.t).global_shape);
    TensorId dk = e.tensor(e.cat(n.rel, ".core.grad_k"), e.shape(kr), act(), e.desc(kr.t).placement,
                           TensorRole::gradient, e.desc(kr.t).global_shape);
    TensorId dv = e.tensor(e.cat(n.rel, ".core.grad_v"), e.shape(vr), act(), e.desc(vr.t).placement,
                           TensorRole::gradient, e.desc(vr.t).global_shape);
    e.op(n.rel, e.cat(n.rel, ".core.bwd"), b, {qr.t, kr.t, vr.t, o, lse, g->t}, {dq, dk, dv});
    auto wrap = [&](TensorId t, const Value& like) { return like.dtensor ? e.dtensor(t, like.pl) : e.plain(t); };
    e.add_grad(qr, wrap(dq, qr), n.rel);
    e.add_grad(kr, wrap(dk, kr), n.rel);
    e.add_grad(vr, wrap(dv, vr), n.rel);
  });
}

Value Layers::repeat_kv(const Name& n, const Value& x, int64_t rep) {
  const Shape xl = e.shape(x);
  const Shape yl{xl[0], xl[1], checked_mul({xl[2], rep}, "repeated kv width")};
  Shape yg = e.desc(x.t).global_shape;
  yg.back() = checked_mul({yg.back(), rep}, "repeated kv width");
  // Read the kv heads, write r copies; the backward reads the r copies' gradients and writes their sum.
  const int64_t bytes = (numel(xl) + numel(yl)) * bytes_per_element(act());
  TensorId y = e.tensor(e.desc(x.t).name + ".repeat_kv", yl, act(), e.desc(x.t).placement, TensorRole::activation, yg);
  e.op(n.rel, e.cat(n.rel, ".repeat_kv"), ElementwiseOp{ElementwiseOp::Fn::repeat_kv, bytes, 0}, {x.t}, {y});
  Value yv = x.dtensor ? e.dtensor(y, x.pl) : e.plain(y, x.pl);
  e.record([this, n, x, yv, xl, bytes, rep]() {
    auto g = e.grad(yv);
    if (!g) return;
    TensorId dx = e.tensor(e.desc(g->t).name + ".repeat_kv_bwd", xl, act(), e.desc(g->t).placement,
                           TensorRole::gradient, e.desc(x.t).global_shape);
    e.op(n.rel, e.cat(n.rel, ".repeat_kv_bwd"),
         ElementwiseOp{ElementwiseOp::Fn::repeat_kv_bwd, bytes, numel(xl) * (rep - 1)}, {g->t}, {dx});
    e.add_grad(x, g->dtensor ? e.dtensor(dx, g->pl) : e.plain(dx), n.rel);
  });
  return yv;
}

static void check_same_layout(const Emitter& e, const Layers::Name& n, const Value& a, const Value& b) {
  if (a.dtensor != b.dtensor || (a.dtensor && !a.pl.same_as(b.pl, 3)) || e.shape(a) != e.shape(b))
    throw ModuleError(n.fqn, fmt::format("combines a {} with a {}", describe(e, a), describe(e, b)));
}

Value Layers::swiglu(const Name& n, const Value& a, const Value& b) {
  check_same_layout(e, n, a, b);
  const Shape s = e.shape(a);
  const int64_t bpe = bytes_per_element(act());
  TensorId y = e.tensor(e.cat(n.rel, ".swiglu"), s, act(), e.desc(a.t).placement, TensorRole::activation,
                        e.desc(a.t).global_shape);
  e.op(n.rel, e.cat(n.rel, ".swiglu"), ElementwiseOp{ElementwiseOp::Fn::swiglu, 3 * numel(s) * bpe, 6 * numel(s)},
       {a.t, b.t}, {y});
  Value yv = a.dtensor ? e.dtensor(y, a.pl) : e.plain(y, a.pl);
  e.record([this, n, a, b, yv, s, bpe]() {
    auto g = e.grad(yv);
    if (!g) return;
    TensorId da = e.tensor(e.cat(n.rel, ".swiglu.grad_a"), s, act(), e.desc(a.t).placement, TensorRole::gradient,
                           e.desc(a.t).global_shape);
    TensorId db = e.tensor(e.cat(n.rel, ".swiglu.grad_b"), s, act(), e.desc(b.t).placement, TensorRole::gradient,
                           e.desc(b.t).global_shape);
    e.op(n.rel, e.cat(n.rel, ".swiglu_bwd"),
         ElementwiseOp{ElementwiseOp::Fn::swiglu_bwd, 5 * numel(s) * bpe, 10 * numel(s)}, {a.t, b.t, g->t}, {da, db});
    e.add_grad(a, a.dtensor ? e.dtensor(da, a.pl) : e.plain(da), n.rel);
    e.add_grad(b, b.dtensor ? e.dtensor(db, b.pl) : e.plain(db), n.rel);
  });
  return yv;
}

Value Layers::gelu(const Name& n, const Value& a) {
  const Shape s = e.shape(a);
  const int64_t bpe = bytes_per_element(act());
  TensorId y = e.tensor(e.cat(n.rel, ".gelu"), s, act(), e.desc(a.t).placement, TensorRole::activation,
                        e.desc(a.t).global_shape);
  e.op(n.rel, e.cat(n.rel, ".gelu"), ElementwiseOp{ElementwiseOp::Fn::gelu, 2 * numel(s) * bpe, 8 * numel(s)}, {a.t},
       {y});
  Value yv = a.dtensor ? e.dtensor(y, a.pl) : e.plain(y, a.pl);
  e.record([this, n, a, yv, s, bpe]() {
    auto g = e.grad(yv);
    if (!g) return;
    TensorId da = e.tensor(e.cat(n.rel, ".gelu.grad"), s, act(), e.desc(a.t).placement, TensorRole::gradient,
                           e.desc(a.t).global_shape);
    e.op(n.rel, e.cat(n.rel, ".gelu_bwd"),
         ElementwiseOp{ElementwiseOp::Fn::gelu_bwd, 3 * numel(s) * bpe, 12 * numel(s)}, {a.t, g->t}, {da});
    e.add_grad(a, a.dtensor ? e.dtensor(da, a.pl) : e.plain(da), n.rel);
  });
  return yv;
}

Value Layers::add(const Name& n, const Value& a, const Value& b) {
  check_same_layout(e, n, a, b);
  const Shape s = e.shape(a);
  TensorId y = e.tensor(e.cat(n.rel, ".residual"), s, act(), e.desc(a.t).placement, TensorRole::activation,
                        e.desc(a.t).global_shape);
  e.op(n.rel, e.cat(n.rel, ".residual"),
       ElementwiseOp{ElementwiseOp::Fn::add, 3 * numel(s) * bytes_per_element(act()), numel(s)}, {a.t, b.t}, {y});
  Value yv = a.dtensor ? e.dtensor(y, a.pl) : e.plain(y, a.pl);
  // d(a+b) passes the gradient unchanged to both operands.
  e.record([this, n, a, b, yv]() {
    auto g = e.grad(yv);
    if (!g) return;
    e.add_grad(a, *g, n.rel);
    e.add_grad(b, *g, n.rel);
  });
  return yv;
}

TensorId Layers::loss(const Name& n, const Value& logits, TensorId targets) {
  const Shape ll = e.shape(logits);
  const int nd = static_cast<int>(ll.size());
  const bool vocab_parallel = logits.dtensor && logits.pl.is_shard() && logits.pl.normalized_dim(nd) == nd - 1;
  const bool lp = plan.loss_parallel && e.tp > 1;
  if (lp && !vocab_parallel)
    throw ModuleError("output", fmt::format("loss_parallel needs vocab-sharded logits (output: colwise with "
                                            "output_layouts S(-1), use_local_output false) but the loss receives a {}",
                                            describe(e, logits)));
  if (!lp && logits.dtensor && !logits.pl.is_replicate())
    throw ModuleError("output", fmt::format("the logits are a {} but loss_parallel is off: enable loss_parallel or "
                                            "gather them (output_layouts R, use_local_output true)",
                                            describe(e, logits)));
  const Shape tg = e.desc(targets).local_shape;
  if (ll[0] != tg[0] || ll[1] != tg[1])
    throw ModuleError("output", fmt::format("logits {} do not line up with the targets {}: the sequence must be "
                                            "whole (R or vocab-sharded) for the loss",
                                            describe(e, logits), to_string(tg)));
  const int64_t T = ll[0] * ll[1], V = ll[2];
  const bool vp = vocab_parallel && e.tp > 1;
  auto stat = [&](const std::string& name) {
    return e.tensor("loss." + name, {ll[0], ll[1]}, DType::fp32, Placement::R(), TensorRole::scale);
  };
  auto reduce = [&](TensorId x, ReduceOp r, const std::string& label) {
    if (!vp) return x;
    return e.collective(n.rel, label, CollectiveKind::all_reduce, Group::tp, r, x, {ll[0], ll[1]}, {ll[0], ll[1]},
                        DType::fp32, TensorRole::scale);
  };
  using S = CrossEntropyOp::Stage;
  // The global token count of one microbatch (CrossEntropyOp::mean_over): FSDP sums over dp_shard x cp and HSDP over
  // dp_replicate, each rank holding T of them.
  const int64_t mean_over =
      checked_mul({T, int64_t{plan.dp_shard}, int64_t{plan.cp_degree}, int64_t{plan.dp_replicate}}, "loss tokens");
  auto ce = [&](S stage) {
    CrossEntropyOp op{stage, T, V, vp};
    op.mean_over = mean_over;
    return op;
  };
  TensorId mx = stat("max");
  e.op(n.rel, e.cat(n.rel, ".row_max"), ce(S::row_max), {logits.t}, {mx});
  mx = reduce(mx, ReduceOp::max, "max");
  TensorId se = stat("sumexp");
  e.op(n.rel, e.cat(n.rel, ".sum_exp"), ce(S::sum_exp), {logits.t, mx}, {se});
  se = reduce(se, ReduceOp::sum, "sumexp");
  TensorId tl = stat("target_logit");
  e.op(n.rel, e.cat(n.rel, ".target_logit"), ce(S::target_logit), {logits.t, targets}, {tl});
  tl = reduce(tl, ReduceOp::sum, "target_logit");
  TensorId loss = e.tensor("loss", {1}, DType::fp32, Placement::R(), TensorRole::loss);
  e.op(n.rel, e.cat(n.rel, ".loss"), ce(S::loss), {mx, se, tl}, {loss});
  e.record([this, n, logits, mx, se, targets, ll, backward = ce(S::backward)]() {
    TensorId d = e.tensor("output.grad_logits", ll, act(), e.desc(logits.t).placement, TensorRole::gradient,
                          e.desc(logits.t).global_shape);
    e.op(n.rel, e.cat(n.rel, ".bwd"), backward, {logits.t, mx, se, targets}, {d});
    e.add_grad(logits, logits.dtensor ? e.dtensor(d, logits.pl) : e.plain(d), n.rel);
  });
  return loss;
}

}  // namespace tptune::lowering
