#pragma once
// The tracer behind lower(): builds a Program while tracking DTensor values and replaying autograd.
//
// A Value is one autograd node: a tensor of the Program seen either as a plain (local) torch.Tensor or as a
// DTensor with a placement. DTensor.from_local and to_local create new nodes over the same tensor, exactly as in
// torch, so that each wrap does its own backward redistribution. Forward helpers record a backward closure on the
// tape; `run_backward` replays a range of the tape in reverse, accumulating gradients per node (adds where a
// value has several consumers) and emitting the backward ops and collectives into the current segment.
// Internal to plans/ (lower.cc and friends); not a public API.

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "plans/program/program.h"

namespace tptune::lowering {

struct Value {
  int node = -1;
  TensorId t = -1;
  bool dtensor = false;
  Placement pl;         // DTensor placement; for plain values, the placement the data was last known by (info)
  TensorId scale = -1;  // >= 0: the data is float8 with this scale tensor (real = stored * scale)
  bool valid() const { return node >= 0; }
};

class Emitter {
 public:
  // `p` may hold an earlier Program (its model, training and plan fields set, its tensors, segments and ops stale):
  // the emitter overwrites its elements in place, reusing their strings' and vectors' buffers, instead of appending
  // new ones, and finish() drops what is left over. The Program it builds is the same either way, field for field.
  Emitter(Program& p, int tp) : prog(p), tp(tp) {}
  Program& prog;
  const int tp;
  bool per_layer = false;  // new tensors are per-layer (inside block segments)
  // The layer range new per-layer tensors get (TensorDesc::first_layer, layer_count): a dense-first mixture of
  // experts' block variant (plans/program/program.h "Structure"); 0, 0: every layer.
  int first_layer = 0, layer_count = 0;
  Phase phase = Phase::forward;  // phase of emitted ops
  // false: tensors and ops get empty names (TensorDesc::name and param, Op::module and name; see lower_unfinished()).
  bool names = true;
  // a + b, the name of a tensor or op; empty without names (tensor() and op() ignore it then: not built for nothing).
  std::string cat(const std::string& a, const char* b) const { return names ? a + b : std::string(); }

  // A new segment; `first_layer`, `layer_count`: its Segment fields (0, 0: every layer).
  void begin_segment(SegmentKind kind, int repeat = 1, bool reverse = false, int first_layer = 0, int layer_count = 0);
  // Per-layer tensor names are unique within a block variant (the dense blocks' "attention.wq.weight" and the MoE
  // blocks' are two tensors of one name, in different layers): the variant whose tensors are named from now on, 0 or
  // 1. The first call splits the scope: every per-layer name taken before it is taken in both.
  void name_scope(int variant);
  Segment& seg() { return prog.segments[n_segments_ - 1]; }
  size_t segment_index() const { return n_segments_ - 1; }  // seg()'s index in prog.segments
  // Drops the elements of a recycled Program beyond those emitted; call once, after the last op.
  void finish();

  // Tensors. `global` defaults to global_shape(local, pl).
  TensorId tensor(const std::string& name, const Shape& local, DType dtype, Placement pl, TensorRole role,
                  Shape global = {});
  const TensorDesc& desc(TensorId t) const { return prog.tensor(t); }
  const Shape& shape(const Value& v) const { return desc(v.t).local_shape; }
  Shape global_of(const Value& v, const std::string& what) const;

  // Values.
  Value plain(TensorId t, Placement info = Placement::R());
  Value dtensor(TensorId t, Placement pl, TensorId scale = -1);
  // DTensor.from_local(v, pl) / v.to_local(), with their autograd.
  Value from_local(const Value& v, Placement pl, const std::string& module);
  Value to_local(const Value& v);
  // v.redistribute(dst) with its autograd (forward phase), or without autograd (raw) in any phase.
  Value redistribute(const Value& v, Placement dst, const std::string& module);
  Value redistribute_raw(const Value& v, Placement dst, const std::string& module, const std::string& label);

  // The op emitted so far in the current segment that last wrote t, or nullptr (t comes from an earlier segment).
  const Op* last_writer(TensorId t) const;

  // Ops. Returns the op id in the current segment.
  int op(const std::string& module, std::string name, OpKind kind, std::vector<TensorId> inputs,
         std::vector<TensorId> outputs, ChunkRef chunk = {});
  TensorId collective(const std::string& module, const std::string& label, CollectiveKind kind, Group group,
                      ReduceOp reduce, TensorId input, const Shape& out_local, const Shape& global, DType dtype,
                      TensorRole role, int gather_dim = -1, int scatter_dim = -1);

  // Autograd.
  void record(std::function<void()> backward) { tape.push_back(std::move(backward)); }
  size_t tape_size() const { return tape.size(); }
  void run_backward(size_t begin, size_t end);
  void add_grad(const Value& of, Value g, const std::string& module);
  std::optional<Value> grad(const Value& of) const;
  void seed_grad(const Value& of, Value g) { grads[of.node] = g; }
  TensorRole grad_role = TensorRole::gradient;

 private:
  int next_node = 0;
  // Emitted so far: tensors of prog.tensors, segments of prog.segments, ops of the current segment (a recycled
  // Program holds more, overwritten as the lowering goes and dropped by finish()).
  size_t n_tensors_ = 0, n_segments_ = 0, n_ops_ = 0;
  void trim_segment();  // drops the current segment's ops beyond n_ops_
  std::vector<std::function<void()>> tape;
  std::map<int, Value> grads;
  // Tensor names taken, per scope (per-layer or global): a new tensor's name is made unique within its scope
  // (name, name.2, name.3, ...). Views of the names in prog.tensors (a deque: they never move).
  std::unordered_set<std::string_view> layer_names, global_names;
  std::unordered_set<std::string_view> other_layer_names;  // the other block variant's (name_scope())
  int scope_ = 0;
  bool scopes_split_ = false;
};

// The local compute dtype of an op writing activations.
inline DType activation_dtype(const Program& p) { return p.training.dtype; }

// Bytes helpers for op descriptors: `numel(shape) * bytes_per_element(dtype)`.
int64_t tensor_bytes(const TensorDesc& t);

}  // namespace tptune::lowering
