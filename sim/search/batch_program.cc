#include "sim/search/batch_program.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>
#include <type_traits>
#include <utility>

#include "plans/lower/incremental.h"
#include "plans/util/error.h"

namespace tptune {

namespace {

// Walks two Programs lowered at batch sizes b1 and b2 side by side: batch-free fields must be equal, sizes may differ
// by a multiple of b2 - b1 (recorded as slots into the first Program). The first mismatch is the reason.
class Matcher {
 public:
  // b1 == b2: every field must be equal (program_difference).
  Matcher(int64_t b1, int64_t b2) : b1_(b1), b2_(b2) {}

  std::string why;
  struct Slot {
    int64_t* field;
    int64_t at_b1, per_batch;
  };
  std::vector<Slot> slots;

  bool ok() const { return why.empty(); }

  // `where` and `what` name the field in the reason (built only on a mismatch). The checks are inline, their
  // mismatch paths not: BatchProgram::make() compares every field of two Programs (thousands of calls each).
  template <class T>
  void same(const T& a, const T& b, std::string_view where, std::string_view what = "") {
    if (!(a == b) && ok()) differs(where, what);
  }
  // A size: affine in the batch.
  void size(int64_t& a, int64_t b, std::string_view where, std::string_view what = "") {
    if (a != b && ok()) size_differs(a, b, where, what);
  }
  [[gnu::noinline]] void differs(std::string_view where, std::string_view what) {
    why = fmt::format("{} {} differs between the two batch sizes", where, what);
  }
  [[gnu::noinline]] void size_differs(int64_t& a, int64_t b, std::string_view where, std::string_view what) {
    const int64_t d = b - a, db = b2_ - b1_;
    if (db == 0) {
      why = fmt::format("{} {}: {} vs {}", where, what, a, b);
      return;
    }
    if (d % db != 0) {
      why = fmt::format("{} {}: {} at local batch {} and {} at {} is not affine in the batch", where, what, a, b1_, b,
                        b2_);
      return;
    }
    slots.push_back({&a, a, d / db});
  }
  void shape(Shape& a, const Shape& b, std::string_view where, std::string_view what) {
    same(a.size(), b.size(), where, what);
    if (!ok()) return;
    for (size_t i = 0; i < a.size(); ++i) size(a[i], b[i], where, what);
  }

  void tensor(TensorDesc& a, const TensorDesc& b) {
    same(a.name, b.name, "tensor", "name");
    const std::string& n = a.name;
    same(a.per_layer, b.per_layer, n, "per_layer");
    shape(a.local_shape, b.local_shape, n, "local shape");
    shape(a.global_shape, b.global_shape, n, "global shape");
    same(a.dtype, b.dtype, n, "dtype");
    same(a.placement, b.placement, n, "placement");
    same(a.role, b.role, n, "role");
    same(a.param, b.param, n, "param");
    same(a.param_shard_dim, b.param_shard_dim, n, "param_shard_dim");
    same(a.first_layer, b.first_layer, n, "first_layer"), same(a.layer_count, b.layer_count, n, "layer_count");
  }

  void op(Op& a, const Op& b) {
    same(a.name, b.name, "op", "name");
    const std::string& n = a.name;
    same(a.id, b.id, n, "id");
    same(a.module, b.module, n, "module");
    same(a.phase, b.phase, n, "phase");
    same(a.deps, b.deps, n, "deps");
    same(a.inputs, b.inputs, n, "inputs");
    same(a.outputs, b.outputs, n, "outputs");
    same(a.chunk.pattern, b.chunk.pattern, n, "chunk");
    same(a.chunk.step, b.chunk.step, n, "chunk step");
    same(a.chunk.count, b.chunk.count, n, "chunk count");
    same(a.kind.index(), b.kind.index(), n, "kind");
    if (!ok()) return;
    std::visit(
        [&](auto& x) {
          using T = std::decay_t<decltype(x)>;
          const T& y = std::get<T>(b.kind);
          if constexpr (std::is_same_v<T, GemmOp>) {
            size(x.m, y.m, n, "m"), size(x.n, y.n, n, "n"), size(x.k, y.k, n, "k");
            same(x.a_dtype, y.a_dtype, n), same(x.b_dtype, y.b_dtype, n), same(x.c_dtype, y.c_dtype, n);
            same(x.trans_a, y.trans_a, n), same(x.trans_b, y.trans_b, n), same(x.accumulate, y.accumulate, n);
          } else if constexpr (std::is_same_v<T, AttentionOp>) {
            size(x.batch, y.batch, n, "batch"), size(x.seq, y.seq, n, "seq");
            size(x.n_heads, y.n_heads, n, "heads"), size(x.n_kv_heads, y.n_kv_heads, n, "kv heads");
            size(x.head_dim, y.head_dim, n, "head_dim");
            same(x.causal, y.causal, n), same(x.backward, y.backward, n);
          } else if constexpr (std::is_same_v<T, ElementwiseOp>) {
            same(x.fn, y.fn, n, "fn"), same(x.dim, y.dim, n, "dim"), same(x.bias_split, y.bias_split, n, "bias_split");
            same(x.amax_of, y.amax_of, n, "amax_of");
            size(x.bytes, y.bytes, n, "bytes"), size(x.flops, y.flops, n, "flops");
          } else if constexpr (std::is_same_v<T, EmbeddingOp>) {
            size(x.tokens, y.tokens, n, "tokens"), size(x.vocab_local, y.vocab_local, n, "vocab");
            size(x.dim_local, y.dim_local, n, "dim");
            same(x.vocab_sharded, y.vocab_sharded, n), same(x.backward, y.backward, n);
          } else if constexpr (std::is_same_v<T, CrossEntropyOp>) {
            same(x.stage, y.stage, n, "stage"), same(x.vocab_sharded, y.vocab_sharded, n);
            size(x.tokens, y.tokens, n, "tokens"), size(x.vocab_local, y.vocab_local, n, "vocab");
          } else if constexpr (std::is_same_v<T, CastFp8Op>) {
            same(x.stage, y.stage, n, "stage"), same(x.to, y.to, n), same(x.rowwise, y.rowwise, n);
            same(x.producer_elementwise, y.producer_elementwise, n);
            size(x.elements, y.elements, n, "elements");
          } else if constexpr (std::is_same_v<T, CollectiveOp>) {
            same(x.kind, y.kind, n, "kind"), same(x.group, y.group, n, "group");
            same(x.reduce, y.reduce, n, "reduce"), same(x.dtype, y.dtype, n, "dtype");
            same(x.gather_dim, y.gather_dim, n, "gather_dim"), same(x.scatter_dim, y.scatter_dim, n);
            size(x.bytes, y.bytes, n, "bytes");
          }
        },
        a.kind);
  }

  void program(Program& a, const Program& b) {
    same(a.tp, b.tp, "tp"), same(a.dp, b.dp, "dp"), same(a.dp_replicate, b.dp_replicate, "dp_replicate");
    same(a.cp, b.cp, "cp");
    same(a.tokens, b.tokens, "tokens"), same(a.targets, b.targets, "targets"), same(a.loss, b.loss, "loss");
    same(a.training.seq_len, b.training.seq_len, "seq_len"), same(a.training.dtype, b.training.dtype, "dtype");
    same(a.training.activation_checkpointing, b.training.activation_checkpointing, "activation checkpointing");
    same(a.training.compile, b.training.compile, "compile");
    size(a.training.local_batch_size, b.training.local_batch_size, "training.local_batch_size");
    Plan pb = b.plan;
    pb.local_batch_size = a.plan.local_batch_size;
    same(a.plan, pb, "plan"), same(a.plan.family, pb.family, "plan family"), same(a.plan.source, pb.source, "source");
    same(a.plan.provenance, pb.provenance, "plan provenance"), same(a.plan.stated, pb.stated, "plan keys stated");
    size(a.plan.local_batch_size, b.plan.local_batch_size, "plan.local_batch_size");
    same(a.model.name, b.model.name, "model"), same(a.model.n_layers, b.model.n_layers, "n_layers");
    same(a.tensors.size(), b.tensors.size(), "tensor count");
    if (ok())  // (iterators: cheaper than indexing the deques)
      for (auto [x, y] = std::pair(a.tensors.begin(), b.tensors.begin()); ok() && x != a.tensors.end(); ++x, ++y)
        tensor(*x, *y);
    same(a.segments.size(), b.segments.size(), "segment count");
    for (size_t s = 0; ok() && s < a.segments.size(); ++s) {
      Segment& x = a.segments[s];
      const Segment& y = b.segments[s];
      const std::string_view n = to_string(x.kind);
      same(x.kind, y.kind, "segment", "name"), same(x.repeat, y.repeat, n, "repeat");
      same(x.reverse, y.reverse, n, "reverse"), same(x.ops.size(), y.ops.size(), n, "op count");
      same(x.first_layer, y.first_layer, n, "first_layer"), same(x.layer_count, y.layer_count, n, "layer_count");
      for (size_t j = 0; ok() && j < x.ops.size(); ++j) op(x.ops[j], y.ops[j]);
    }
    same(a.chains.size(), b.chains.size(), "chains");
    for (size_t i = 0; ok() && i < a.chains.size(); ++i) {
      const LayerChain &x = a.chains[i], &y = b.chains[i];
      same(x.in, y.in, "chain"), same(x.out, y.out, "chain"), same(x.source, y.source, "chain");
      same(x.sink, y.sink, "chain"), same(x.reverse, y.reverse, "chain");
    }
  }

 private:
  int64_t b1_, b2_;
};

// Why a mixture-of-experts Program is not affine in the local batch, or empty when it is. A MoE block's grouped GEMMs
// are sized by the busiest expert group's rows, ceil(copies x imbalance x ep / experts), padded to 16 rows with float8
// operands (plans/lower/experts.cc), copies = local batch x the rank's tokens per sequence x top_k: affine in the batch
// for every batch size only when every value is exact, i.e. imbalance 1 and tokens per sequence x top_k x ep a
// multiple of experts (x 16 with float8); then the rows are batch x that multiple and the received rows the copies.
// Otherwise two lowerings may agree on a line the other batch sizes leave (a rounding), which the Matcher could not
// see.
std::string moe_rows_not_affine(const Model& m, const Training& t, const Plan& p) {
  if (m.moe.experts <= 0) return {};
  if (t.moe_imbalance != 1.0)
    return fmt::format("training.moe_imbalance {}: the busiest expert group's rows are rounded up at each batch size",
                       t.moe_imbalance);
  const int64_t tp = std::max(p.tp_degree, 1), cp = std::max(p.cp_degree, 1), ep = std::max(p.ep_degree, 1);
  const int64_t tokens = t.seq_len / cp / (ep > 1 && tp > 1 ? tp : 1);  // the router's tokens per sequence
  const int64_t modulus = int64_t{m.moe.experts} * (p.float8 != Float8Recipe::none ? 16 : 1);  // <= 2^18
  // tokens x top_k x ep mod modulus, each factor reduced first (products below 2^36)
  const int64_t rest = tokens % modulus * (m.moe.top_k % modulus) % modulus * (ep % modulus) % modulus;
  if (rest != 0)
    return fmt::format(
        "the expert groups' rows ({} tokens x top_k {} x ep {} / {} experts{}) are rounded up at some "
        "batch sizes",
        tokens, m.moe.top_k, ep, m.moe.experts, modulus > m.moe.experts ? ", padded to 16" : "");
  return {};
}

}  // namespace

std::string program_difference(Program a, const Program& b) {
  Matcher m(0, 0);
  m.program(a, b);
  return m.why;
}

std::unique_ptr<BatchProgram> BatchProgram::make(const Model& model, const Training& training, const Plan& plan,
                                                 Program at_b1, const Program& at_b2, std::string* why_not) {
  const int64_t b1 = at_b1.plan.local_batch_size, b2 = at_b2.plan.local_batch_size;
  auto refuse = [&](const std::string& why) {
    if (why_not) *why_not = why;
    return std::unique_ptr<BatchProgram>();
  };
  if (b1 == b2) return refuse(fmt::format("both Programs are at local batch {}", b1));
  if (std::string why = moe_rows_not_affine(model, training, plan); !why.empty()) return refuse(why);
  std::unique_ptr<BatchProgram> bp(new BatchProgram());
  bp->model_ = model;
  bp->training_ = training;
  bp->plan_ = plan;
  bp->prog_ = std::move(at_b1);  // moved before the slots point into it
  bp->b1_ = b1;
  Matcher m(b1, b2);
  m.program(bp->prog_, at_b2);
  if (!m.ok()) return refuse(m.why);
  bp->slots_.reserve(m.slots.size());
  for (const Matcher::Slot& s : m.slots) bp->slots_.push_back({s.field, s.at_b1, s.per_batch});
  return bp;
}

const Program& BatchProgram::at(int64_t b) {
  plan_.local_batch_size = b;
  check_local_batch(model_, training_, plan_);  // what lower() would refuse at b
  // Within those limits every size fits int64 (lower() computes the same values with checked arithmetic).
  const int64_t db = b - b1_;
  for (const Slot& s : slots_) *s.field = s.at_b1 + db * s.per_batch;
  return prog_;
}

Program BatchProgram::release_at_first() && {
  for (const Slot& s : slots_) *s.field = s.at_b1;
  slots_.clear();
  return std::move(prog_);
}

}  // namespace tptune
