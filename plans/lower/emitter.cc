#include "plans/lower/emitter.h"

#include <fmt/format.h>

#include <algorithm>

#include "plans/util/error.h"

namespace tptune::lowering {

int64_t tensor_bytes(const TensorDesc& t) { return numel(t.local_shape) * bytes_per_element(t.dtype); }

void Emitter::trim_segment() {
  if (n_segments_ == 0) return;
  std::vector<Op>& ops = seg().ops;
  if (ops.size() > n_ops_) ops.erase(ops.begin() + static_cast<std::ptrdiff_t>(n_ops_), ops.end());
}

void Emitter::begin_segment(SegmentKind kind, int repeat, bool reverse, int first_layer, int layer_count) {
  trim_segment();
  if (n_segments_ == prog.segments.size()) prog.segments.emplace_back();
  Segment& s = prog.segments[n_segments_++];
  s.kind = kind;
  s.repeat = repeat;
  s.reverse = reverse;
  s.first_layer = first_layer;  // (a recycled Program's segment may hold another range)
  s.layer_count = layer_count;
  n_ops_ = 0;
}

void Emitter::name_scope(int variant) {
  if (!scopes_split_) {
    other_layer_names = layer_names;  // the names taken so far: the variants' shared tensors
    scopes_split_ = true;
  }
  if (variant == scope_) return;
  std::swap(layer_names, other_layer_names);
  scope_ = variant;
}

void Emitter::finish() {
  trim_segment();
  prog.segments.resize(n_segments_);
  prog.tensors.resize(n_tensors_);
}

TensorId Emitter::tensor(const std::string& name, const Shape& local, DType dtype, Placement pl, TensorRole role,
                         Shape global) {
  std::unordered_set<std::string_view>& taken = per_layer ? layer_names : global_names;
  if (n_tensors_ == prog.tensors.size()) prog.tensors.emplace_back();
  TensorDesc& d = prog.tensors[n_tensors_];  // a new one, or a recycled Program's: every field is set here
  if (names) {
    d.name = name;
    for (int i = 2; taken.count(d.name); ++i) d.name = fmt::format("{}.{}", name, i);
    taken.insert(d.name);  // a view of the name in the deque: it neither moves nor changes later
  } else {
    d.name.clear();
  }
  d.per_layer = per_layer;
  d.first_layer = per_layer ? first_layer : 0;
  d.layer_count = per_layer ? layer_count : 0;
  d.local_shape = local;
  if (global.empty())
    d.global_shape = global_shape(local, pl, tp, name);
  else
    d.global_shape = std::move(global);
  d.dtype = dtype;
  d.placement = pl;
  d.role = role;
  d.param.clear();
  d.param_shard_dim = -1;
  d.expert = false;  // (experts.cc sets it after; a recycled tensor may hold a routed expert's flag)
  return static_cast<TensorId>(n_tensors_++);
}

Shape Emitter::global_of(const Value& v, const std::string& what) const {
  return v.dtensor ? global_shape(shape(v), v.pl, tp, what) : desc(v.t).global_shape;
}

Value Emitter::plain(TensorId t, Placement info) { return Value{next_node++, t, false, info, -1}; }
Value Emitter::dtensor(TensorId t, Placement pl, TensorId scale) { return Value{next_node++, t, true, pl, scale}; }

Value Emitter::from_local(const Value& v, Placement pl, const std::string& module) {
  if (v.dtensor) return v;
  Value d = dtensor(v.t, pl, v.scale);
  // Backward (torch's _FromTorchTensor): bring the gradient back to the declared placement, hand back the local.
  record([this, v, d, pl, module]() {
    auto g = grad(d);
    if (!g) return;
    Value gl = *g;
    if (gl.dtensor && !gl.pl.same_as(pl, static_cast<int>(shape(gl).size())))
      gl = redistribute_raw(gl, pl, module, "bwd");
    add_grad(v, plain(gl.t, pl), module);
  });
  return d;
}

Value Emitter::to_local(const Value& v) {
  if (!v.dtensor) return v;
  Value l = plain(v.t, v.pl);
  l.scale = v.scale;
  // Backward (torch's _ToTorchTensor): the plain gradient is wrapped with the forward placement.
  record([this, v, l]() {
    auto g = grad(l);
    if (!g) return;
    add_grad(v, dtensor(g->t, v.pl), "");
  });
  return l;
}

Value Emitter::redistribute_raw(const Value& v, Placement dst, const std::string& module, const std::string& label) {
  const Shape& local = shape(v);
  const int ndim = static_cast<int>(local.size());
  std::string what = module.empty() ? "redistribute" : module;
  Redistribution r = plan_redistribution(v.pl, dst, ndim, what);
  if (!r.collective && !r.local_slice) return dtensor(v.t, dst, v.scale);
  Shape global = global_shape(local, v.pl, tp, what);
  // (the error context only: without names it is not built, and an error is reported by lowering again with names)
  Shape out_local =
      local_shape(global, dst, tp, names ? fmt::format("{}: {} -> {}", what, to_string(v.pl), to_string(dst)) : what);
  const TensorDesc& in = desc(v.t);
  TensorRole role = in.role == TensorRole::param_grad ? TensorRole::gradient : in.role;
  if (r.local_slice) {
    TensorId out = tensor(in.name + ".slice", out_local, in.dtype, dst, role, global);
    ElementwiseOp e{ElementwiseOp::Fn::slice, tensor_bytes(in) + tensor_bytes(desc(out)), 0, r.scatter_dim};
    op(module, names ? fmt::format("{}.{}.slice", module, label) : std::string(), e, {v.t}, {out});
    return dtensor(out, dst, v.scale);
  }
  TensorId out = collective(module, label, *r.collective, Group::tp, ReduceOp::sum, v.t, out_local, global, in.dtype,
                            role, r.gather_dim, r.scatter_dim);
  return dtensor(out, dst, v.scale);
}

Value Emitter::redistribute(const Value& v, Placement dst, const std::string& module) {
  if (v.pl.same_as(dst, static_cast<int>(shape(v).size()))) return v;
  Value out = redistribute_raw(v, dst, module, "fwd");
  Placement src = v.pl;
  record([this, v, out, src, module]() {
    auto g = grad(out);
    if (!g) return;
    Value gd = g->dtensor ? *g : dtensor(g->t, out.pl);
    add_grad(v, redistribute_raw(gd, gradient_target(src), module, "bwd"), module);
  });
  return out;
}

const Op* Emitter::last_writer(TensorId t) const {
  const auto& ops = prog.segments[n_segments_ - 1].ops;
  for (size_t i = n_ops_; i-- > 0;)
    if (std::find(ops[i].outputs.begin(), ops[i].outputs.end(), t) != ops[i].outputs.end()) return &ops[i];
  return nullptr;
}

int Emitter::op(const std::string& module, std::string name, OpKind kind, std::vector<TensorId> inputs,
                std::vector<TensorId> outputs, ChunkRef chunk) {
  std::vector<Op>& ops = seg().ops;
  const int id = static_cast<int>(n_ops_++);
  if (static_cast<size_t>(id) == ops.size()) {  // a new op: built before the list grows (`module` may be in it)
    Op o;
    o.id = id;
    if (names) {
      o.module = module;
      o.name = std::move(name);
    }
    o.phase = phase;
    o.kind = std::move(kind);
    o.inputs = std::move(inputs);
    o.outputs = std::move(outputs);
    o.chunk = chunk;
    ops.push_back(std::move(o));
    return id;
  }
  Op& o = ops[static_cast<size_t>(id)];  // a recycled Program's: every field is set here, reusing its buffers
  o.id = id;
  if (!names) {
    o.module.clear();
    o.name.clear();
  } else {
    o.module = module;
    if (o.name.capacity() >= name.size())
      o.name = name;  // into the recycled buffer
    else
      o.name = std::move(name);
  }
  o.phase = phase;
  o.deps.clear();
  o.kind = std::move(kind);
  o.inputs.assign(inputs.begin(), inputs.end());
  o.outputs.assign(outputs.begin(), outputs.end());
  o.chunk = chunk;
  return id;
}

TensorId Emitter::collective(const std::string& module, const std::string& label, CollectiveKind kind, Group group,
                             ReduceOp reduce, TensorId input, const Shape& out_local, const Shape& global, DType dtype,
                             TensorRole role, int gather_dim, int scatter_dim) {
  std::string base = desc(input).name;
  Placement out_pl = kind == CollectiveKind::reduce_scatter ? Placement::S(scatter_dim) : Placement::R();
  TensorId out = tensor(names ? fmt::format("{}.{}", base, to_string(kind)) : std::string(), out_local, dtype, out_pl,
                        role, global);
  CollectiveOp c;
  c.kind = kind;
  c.group = group;
  c.reduce = reduce;
  c.dtype = dtype;
  c.bytes = collective_bytes(global, bytes_per_element(dtype));
  c.gather_dim = gather_dim;
  c.scatter_dim = scatter_dim;
  std::string name = !names           ? std::string()
                     : module.empty() ? std::string(to_string(kind))
                                      : fmt::format("{}.{}.{}", module, label, to_string(kind));
  op(module, name, c, {input}, {out});
  return out;
}

std::optional<Value> Emitter::grad(const Value& of) const {
  auto it = grads.find(of.node);
  if (it == grads.end()) return std::nullopt;
  return it->second;
}

void Emitter::add_grad(const Value& of, Value g, const std::string& module) {
  auto it = grads.find(of.node);
  if (it == grads.end()) {
    grads[of.node] = g;
    return;
  }
  Value& acc = it->second;
  const int ndim = static_cast<int>(shape(g).size());
  if (acc.dtensor != g.dtensor || (g.dtensor && !acc.pl.same_as(g.pl, ndim)))
    throw ModuleError(module.empty() ? desc(of.t).name : module,
                      fmt::format("gradients of '{}' arrive as {} and {}: they cannot be summed without a "
                                  "redistribution the plan does not declare",
                                  desc(of.t).name, acc.dtensor ? to_string(acc.pl) : "a plain tensor",
                                  g.dtensor ? to_string(g.pl) : "a plain tensor"));
  if (shape(acc) != shape(g))
    throw ModuleError(module.empty() ? desc(of.t).name : module,
                      fmt::format("gradients of '{}' have local shapes {} and {}", desc(of.t).name,
                                  to_string(shape(acc)), to_string(shape(g))));
  const TensorDesc& a = desc(acc.t);
  TensorId sum = tensor(a.name + ".sum", a.local_shape, a.dtype, a.placement, TensorRole::gradient, a.global_shape);
  ElementwiseOp e{ElementwiseOp::Fn::add, 3 * tensor_bytes(a), numel(a.local_shape)};
  op(module.empty() ? "grad" : module,
     names ? fmt::format("{}.grad_sum", module.empty() ? "grad" : module) : std::string(), e, {acc.t, g.t}, {sum});
  acc = g.dtensor ? dtensor(sum, g.pl) : plain(sum, g.pl);
}

void Emitter::run_backward(size_t begin, size_t end) {
  for (size_t i = end; i > begin; --i) tape[i - 1]();
}

}  // namespace tptune::lowering
