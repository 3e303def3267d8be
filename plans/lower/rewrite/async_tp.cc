#include "plans/lower/rewrite/async_tp.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "plans/util/error.h"

namespace tptune {

namespace {

// `s` + what + the decimal j: the names of chunks, ring steps and their tensors (as fmt "{}{}" would print them;
// appended rather than formatted: the search rewrites a Program per async-TP candidate).
void append_numbered(std::string& s, std::string_view what, int j) {
  s += what;
  s += std::to_string(j);
}

bool is_seq_collective(const Op& op, CollectiveKind kind) {
  auto* c = std::get_if<CollectiveOp>(&op.kind);
  if (!c || c->group != Group::tp || c->kind != kind) return false;
  int dim = kind == CollectiveKind::all_gather ? c->gather_dim : c->scatter_dim;
  return dim == 1;
}
// The op list a rewrite builds, one per thread: its buffer is kept from one rewrite to the next (the search rewrites
// thousands of segments), swapped with the segment's.
std::vector<Op>& rebuilt_ops(size_t size) {
  thread_local std::vector<Op> ops;
  ops.clear();
  // Room to spare: the segment's buffer, which this one becomes, grows with every rewrite.
  if (ops.capacity() < size) ops.reserve(2 * size);
  return ops;
}

// The ops a rewrite puts in place of those it removes (moved into the segment by Rewriter::replace()), one list per
// thread, emptied here: its buffer is kept from one rewrite to the next.
std::vector<Op>& new_ops() {
  thread_local std::vector<Op> ops;
  ops.clear();
  return ops;
}

// The ops drop_ops_for_reuse() kept, one list per thread (at most kSpareOps).
constexpr size_t kSpareOps = 2048;
std::vector<Op>& spare_ops() {
  thread_local std::vector<Op> ops;
  return ops;
}

// A kept op (its buffers, for the caller to assign over), or a new one.
Op spare_op() {
  std::vector<Op>& spare = spare_ops();
  if (spare.empty()) return Op();
  Op o = std::move(spare.back());
  spare.pop_back();
  return o;
}

// A gemm whose A operand holds token rows (m = tokens): y = x W^T (forward) or dx = dy W (grad input).
bool is_row_gemm(const Op& op) {
  auto* g = std::get_if<GemmOp>(&op.kind);
  return g && !g->trans_a && !g->accumulate && op.chunk.pattern == ChunkRef::Pattern::none;
}

class Rewriter {
 public:
  // The segment's ops are the pool: a rewrite appends its new ops to it and leaves the ops it removes there (moved
  // from), and `order` lists the pool's ops in the segment's order; run() moves them into that order once at the end.
  // (Rebuilding the op list at every rewrite moved every op of the segment once per rewrite.)
  Rewriter(Program& p, Segment& s) : p(p), s(s), tp(p.tp) {
    order.resize(s.ops.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  }

  void run() {
    // Rewrite one collective at a time. A rewrite leaves the ops before the first one it removes where they were, and
    // every collective among them was considered and refused (`skipped`): scanning on from that first removed position
    // finds what a rescan from the start would find.
    bool changed = false;
    for (size_t i = 0; i < order.size();) {
      size_t resume = i + 1;
      if (is_seq_collective(op(i), CollectiveKind::all_gather))
        changed |= all_gather_matmul(i, resume);
      else if (is_seq_collective(op(i), CollectiveKind::reduce_scatter))
        changed |= matmul_reduce_scatter(i, resume);
      i = resume;
    }
    if (changed) {
      std::vector<Op>& out = rebuilt_ops(order.size());
      for (int x : order) out.push_back(std::move(s.ops[static_cast<size_t>(x)]));
      s.ops.swap(out);  // (out, the pool, keeps its buffer for the next rewrite)
      out.clear();
    }
    for (size_t i = 0; i < s.ops.size(); ++i) s.ops[i].id = static_cast<int>(i);
  }

 private:
  Program& p;
  Segment& s;
  const int tp;
  std::set<TensorId> skipped;  // collectives already considered and left alone (by their output or input tensor)
  std::vector<int> order;      // into s.ops: the segment's ops in order

  // The op at position i of the segment.
  Op& op(size_t i) { return s.ops[static_cast<size_t>(order[i])]; }
  const Op& op(size_t i) const { return s.ops[static_cast<size_t>(order[i])]; }
  // Replaces the positions `removed` (ascending) by `seq`, appended to the pool and put at position `at`, one of
  // them.
  void replace(const std::vector<size_t>& removed, size_t at, std::vector<Op>& seq) {
    const int first = static_cast<int>(s.ops.size());
    s.ops.insert(s.ops.end(), std::make_move_iterator(seq.begin()), std::make_move_iterator(seq.end()));
    thread_local std::vector<int> next;
    next.resize(order.size() - removed.size() + seq.size());
    // Unchanged up to the first removed position; then the rest, removed ones left out and seq at `at`.
    const size_t from = removed.empty() ? order.size() : removed[0];
    std::copy(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(from), next.begin());
    size_t r = 0, o = from;
    for (size_t i = from; i < order.size(); ++i) {
      if (r < removed.size() && removed[r] == i) {
        ++r;
        if (i == at)
          for (size_t k = 0; k < seq.size(); ++k) next[o++] = first + static_cast<int>(k);
        continue;
      }
      next[o++] = order[i];
    }
    order.swap(next);
  }

  bool reads(size_t i, TensorId t) const {
    const Op& o = op(i);
    return std::find(o.inputs.begin(), o.inputs.end(), t) != o.inputs.end();
  }
  // Whether exactly one op of the segment reads t.
  bool one_reader(TensorId t) const {
    size_t n = 0;
    for (size_t i = 0; i < order.size() && n < 2; ++i) n += reads(i, t);
    return n == 1;
  }
  // The last op before `before` that writes t, or -1.
  int last_writer(TensorId t, size_t before) const {
    for (size_t i = before; i-- > 0;) {
      const Op& o = op(i);
      if (std::find(o.outputs.begin(), o.outputs.end(), t) != o.outputs.end()) return static_cast<int>(i);
    }
    return -1;
  }
  std::vector<size_t> readers(TensorId t, size_t from, size_t to) const {
    std::vector<size_t> r;
    for (size_t i = from; i < to; ++i)
      if (reads(i, t)) r.push_back(i);
    return r;
  }
  // A tensor like `like`, named like's name + what + j. (like's name is moved out while it is copied and the new name
  // is built at its full length: a copied name that then grows allocates twice.)
  TensorId new_tensor(TensorDesc& like, std::string_view what, int j) {
    std::string name = std::move(like.name);
    TensorDesc& d = p.tensors.emplace_back(like);
    like.name = std::move(name);
    if (!like.name.empty()) {  // (empty: lowered without names, lower_unfinished())
      d.name.reserve(like.name.size() + what.size() + 11);
      d.name += like.name;
      append_numbered(d.name, what, j);
    }
    return static_cast<TensorId>(p.tensors.size() - 1);
  }
  // A copy of op `from` named its name + what + j (its name built as new_tensor()'s), into a kept op's buffers when
  // there is one (drop_ops_for_reuse()).
  static Op numbered_copy(Op& from, std::string_view what, int j) {
    std::string name = std::move(from.name);
    Op o = spare_op();
    o = from;
    from.name = std::move(name);
    if (!from.name.empty()) {
      o.name.reserve(from.name.size() + what.size() + 11);
      o.name += from.name;
      append_numbered(o.name, what, j);
    }
    return o;
  }
  Op collective_step(const Op& base, const std::string& name, int step, int64_t bytes, std::vector<TensorId> in,
                     std::vector<TensorId> out, ChunkRef::Pattern pattern, DType dtype) {
    Op o;
    o.module = base.module;
    o.name = name;
    o.phase = base.phase;
    CollectiveOp c;
    c.kind = CollectiveKind::p2p;
    c.group = Group::tp;
    c.dtype = dtype;
    c.bytes = bytes;
    o.kind = c;
    o.inputs = std::move(in);
    o.outputs = std::move(out);
    o.chunk = {pattern, step, tp};
    return o;
  }

  // all_gather(x) -> G feeding gemms that use G as their row operand A. When it rewrites, `resume` is the position of
  // the first op it changed.
  bool all_gather_matmul(size_t ag, size_t& resume) {
    const TensorId G = op(ag).outputs[0];
    if (skipped.count(G)) return false;  // refused before
    std::vector<size_t> users = readers(G, ag + 1, order.size());
    std::vector<size_t> gemms;
    for (size_t u : users)
      if (is_row_gemm(op(u)) && op(u).inputs[0] == G) gemms.push_back(u);
    if (gemms.empty()) {
      skipped.insert(G);
      return false;
    }
    const size_t last = gemms.back();
    for (size_t u : users)  // a non-matmul reader before the last matmul would see a half-gathered tensor
      if (u < last && std::find(gemms.begin(), gemms.end(), u) == gemms.end()) {
        skipped.insert(G);
        return false;
      }
    const Op agop = std::move(op(ag));  // removed below
    const auto& c = std::get<CollectiveOp>(agop.kind);
    const int64_t chunk_bytes = c.bytes / tp;
    std::vector<Op>& seq = new_ops();
    seq.reserve(static_cast<size_t>(tp) * (gemms.size() + 1) + 2);
    // Ring steps are issued one ahead of the matmuls so that step j+1 travels while chunk j is multiplied.
    auto p2p = [&](int j) {
      std::vector<TensorId> in = j == 0 ? std::vector<TensorId>{agop.inputs[0]} : std::vector<TensorId>{G};
      return collective_step(agop, agop.name.empty() ? std::string() : fmt::format("{}.ag_step{}", agop.module, j), j,
                             j == 0 ? 0 : chunk_bytes, std::move(in), {G}, ChunkRef::Pattern::all_gather, c.dtype);
    };
    seq.push_back(p2p(0));
    if (tp > 1) seq.push_back(p2p(1));
    for (int j = 0; j < tp; ++j) {
      for (size_t gi : gemms) {
        Op g = j + 1 < tp ? numbered_copy(op(gi), ".chunk", j) : std::move(op(gi));  // (the gemms are removed below)
        auto& gm = std::get<GemmOp>(g.kind);
        gm.m /= tp;
        if (j + 1 == tp && !g.name.empty()) append_numbered(g.name, ".chunk", j);
        g.chunk = {ChunkRef::Pattern::all_gather, j, tp};
        seq.push_back(std::move(g));
      }
      if (j + 2 < tp) seq.push_back(p2p(j + 2));
    }
    std::vector<size_t> removed = gemms;  // (ascending, all after ag)
    removed.insert(removed.begin(), ag);
    replace(removed, last, seq);
    resume = ag;
    return true;
  }

  // reduce_scatter(P) where P is a gemm output or a sum (grad_sum adds) of gemm outputs. When it rewrites, `resume`
  // is the position of the first op it changed.
  bool matmul_reduce_scatter(size_t rs, size_t& resume) {
    const TensorId P = op(rs).inputs[0];
    if (skipped.count(P)) return false;  // refused before
    std::vector<size_t> gemms, adds;
    bool ok = true;
    // t's writer (the last op before rs that writes it) and, through adds, theirs.
    auto collect = [&](auto& self, TensorId t) -> void {
      const int wi = last_writer(t, rs);
      if (wi < 0) return void(ok = false);
      const size_t w_at = static_cast<size_t>(wi);
      const Op& w = op(w_at);
      // The partial must feed nothing else (it is never materialized whole).
      if (!one_reader(t)) return void(ok = false);
      if (is_row_gemm(w)) return gemms.push_back(w_at);
      auto* e = std::get_if<ElementwiseOp>(&w.kind);
      if (e && e->fn == ElementwiseOp::Fn::add) {
        adds.push_back(w_at);
        for (TensorId in : w.inputs) self(self, in);
        return;
      }
      ok = false;
    };
    collect(collect, P);
    if (!ok || gemms.empty()) {
      skipped.insert(P);
      return false;
    }
    std::sort(gemms.begin(), gemms.end());
    const Op rsop = std::move(op(rs));  // removed below
    const auto& c = std::get<CollectiveOp>(rsop.kind);
    const TensorId out_t = rsop.outputs[0];
    TensorDesc out_d = p.tensor(out_t);  // (a copy: new tensors are appended below)
    const int64_t chunk_bytes = c.bytes / tp;
    std::vector<Op>& seq = new_ops();
    seq.reserve(static_cast<size_t>(tp) * (gemms.size() + 2));
    TensorId recv = -1;
    for (int j = 0; j < tp; ++j) {
      TensorId part = new_tensor(out_d, ".partial", j);
      for (size_t k = 0; k < gemms.size(); ++k) {
        Op g = j + 1 < tp ? numbered_copy(op(gemms[k]), ".chunk", j) : std::move(op(gemms[k]));  // (removed below)
        auto& gm = std::get<GemmOp>(g.kind);
        gm.m /= tp;
        gm.accumulate = k > 0;
        g.outputs = {part};
        if (j + 1 == tp && !g.name.empty()) append_numbered(g.name, ".chunk", j);
        g.chunk = {ChunkRef::Pattern::reduce_scatter, j, tp};
        seq.push_back(std::move(g));
      }
      TensorId acc = part;
      if (j > 0) {
        acc = j == tp - 1 ? out_t : new_tensor(out_d, ".acc", j);
        Op add;
        add.module = rsop.module;
        if (!rsop.name.empty()) add.name = fmt::format("{}.rs_step{}.add", rsop.module, j);
        add.phase = rsop.phase;
        const int64_t bytes = 3 * numel(out_d.local_shape) * bytes_per_element(out_d.dtype);
        add.kind = ElementwiseOp{ElementwiseOp::Fn::add, bytes, numel(out_d.local_shape)};
        add.inputs = {part, recv};
        add.outputs = {acc};
        add.chunk = {ChunkRef::Pattern::reduce_scatter, j, tp};
        seq.push_back(std::move(add));
      } else if (tp == 1) {
        acc = out_t;
      }
      if (j < tp - 1) {
        recv = new_tensor(out_d, ".recv", j + 1);
        seq.push_back(collective_step(rsop,
                                      rsop.name.empty() ? std::string() : fmt::format("{}.rs_step{}", rsop.module, j),
                                      j, chunk_bytes, {acc}, {recv}, ChunkRef::Pattern::reduce_scatter, c.dtype));
      }
    }
    std::vector<size_t> removed = gemms;  // (all before rs)
    removed.insert(removed.end(), adds.begin(), adds.end());
    removed.push_back(rs);
    std::sort(removed.begin(), removed.end());
    removed.erase(std::unique(removed.begin(), removed.end()), removed.end());
    replace(removed, rs, seq);
    resume = std::min({rs, gemms.front(), adds.empty() ? rs : *std::min_element(adds.begin(), adds.end())});
    return true;
  }
};

}  // namespace

bool rewrite_async_tp(Program& p, size_t from, size_t to) {
  if (p.tp <= 1) return false;
  bool any = false;
  for (size_t i = from; i < to && i < p.segments.size(); ++i) {
    Segment& s = p.segments[i];
    size_t before = 0;
    for (const Op& op : s.ops) before += op.chunk.pattern != ChunkRef::Pattern::none;
    Rewriter(p, s).run();
    size_t after = 0;
    for (const Op& op : s.ops) after += op.chunk.pattern != ChunkRef::Pattern::none;
    any |= after > before;
  }
  return any;
}

void throw_no_async_tp(const Program& p) {
  throw Error(
      fmt::format("{}: async_tp needs sequence-parallel collectives (an all-gather feeding matmuls or a "
                  "matmul feeding a reduce-scatter along the sequence); plan '{}' has none",
                  p.plan.source.empty() ? "plan" : p.plan.source, p.plan.family));
}

void drop_ops_for_reuse(std::vector<Op>& ops, size_t n) {
  if (ops.size() <= n) return;
  std::vector<Op>& spare = spare_ops();
  const size_t keep = std::min(ops.size() - n, kSpareOps - std::min(kSpareOps, spare.size()));
  const auto from = ops.begin() + static_cast<std::ptrdiff_t>(n);
  spare.insert(spare.end(), std::make_move_iterator(from),
               std::make_move_iterator(from + static_cast<std::ptrdiff_t>(keep)));
  ops.erase(from, ops.end());
}

void apply_async_tp(Program& p) {
  if (p.tp <= 1) return;
  if (!rewrite_async_tp(p, 0, p.segments.size())) throw_no_async_tp(p);
}

}  // namespace tptune
