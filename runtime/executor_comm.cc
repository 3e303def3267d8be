// Executor: collectives. The backend's collectives are rank-major; this file packs and unpacks tensor dims around
// them (staging buffers kept per op across steps) and runs the async TP ring steps.
#include <fmt/format.h>

#include "plans/util/error.h"
#include "runtime/executor.h"

namespace tptune {
namespace {

struct Split {
  int64_t outer = 1, inner = 1;  // elements before / after `dim`
};
Split split_at(const Shape& s, int dim) {
  Split r;
  for (int i = 0; i < dim; ++i) r.outer *= s[size_t(i)];
  for (size_t i = size_t(dim) + 1; i < s.size(); ++i) r.inner *= s[i];
  return r;
}

// dst (parts, chunk) <- src split along `dim` into `parts` equal slices: slice j of dim goes to dst + j * chunk.
void pack_split(Backend& be, DevPtr dst, DevPtr src, const Shape& shape, int dim, int parts) {
  Split s = split_at(shape, dim);
  const int64_t w = shape[size_t(dim)] / parts * s.inner, row = shape[size_t(dim)] * s.inner;
  for (int j = 0; j < parts; ++j) be.copy2d(dst.at(j * s.outer * w), w, src.at(j * w), row, s.outer, w);
}

// dst <- concatenation along `dim` of `parts` chunks of shape `chunk` stored one after another in src.
void unpack_concat(Backend& be, DevPtr dst, DevPtr src, const Shape& chunk, int dim, int parts) {
  Split s = split_at(chunk, dim);
  const int64_t w = chunk[size_t(dim)] * s.inner;
  for (int i = 0; i < parts; ++i) be.copy2d(dst.at(i * w), parts * w, src.at(i * s.outer * w), w, s.outer, w);
}

int normalized(int d, const Shape& s) { return d < 0 ? d + static_cast<int>(s.size()) : d; }

// dst <- `parts` copies of src (shape `chunk`) concatenated along `dim`: the all-gather of `parts` equal shards.
void tile_concat(Backend& be, DevPtr dst, DevPtr src, const Shape& chunk, int dim, int parts) {
  Split s = split_at(chunk, dim);
  const int64_t w = chunk[size_t(dim)] * s.inner;
  for (int i = 0; i < parts; ++i) be.copy2d(dst.at(i * w), parts * w, src, w, s.outer, w);
}

// Storages the backends add in (accumulate): float8 tensors are scaled copies, never summed.
bool summable(Storage s) { return s == Storage::f32 || s == Storage::bf16; }

// An all-to-all over `n` ranks from local shape xs into ys: gather_dim g grows and scatter_dim s shrinks by n, the
// dims told apart and inside the shape.
bool all_to_all_shapes(const Shape& xs, const Shape& ys, int g, int s, int64_t n) {
  return g != s && xs.size() == ys.size() && g >= 0 && s >= 0 && g < static_cast<int>(xs.size()) &&
         s < static_cast<int>(xs.size()) && xs[size_t(g)] * n == ys[size_t(g)] && xs[size_t(s)] == ys[size_t(s)] * n;
}

}  // namespace

void Executor::issue_collective(int index, bool eager) {
  const FlatOp& op = flat_.ops[size_t(index)];
  const CollectiveOp& c = std::get<CollectiveOp>(op.op->kind);
  if (c.kind == CollectiveKind::p2p && c.group == Group::pp) return issue_pp_transfer(index, c, eager);
  if (c.kind == CollectiveKind::p2p)
    return c.group == Group::cp ? issue_cp_p2p(index, c, eager) : issue_p2p(index, c, eager);
  if (c.group == Group::ep && c.kind == CollectiveKind::all_to_all) return issue_moe_exchange(index, c);
  const bool fsdp_gather = c.kind == CollectiveKind::all_gather && op.inputs.empty();
  const bool fsdp_reduce = c.kind == CollectiveKind::reduce_scatter && op.inputs == op.outputs;
  if ((c.group == Group::dp || c.group == Group::efsdp) && (fsdp_gather || fsdp_reduce))
    return issue_fsdp(index, c, eager);
  if (op.inputs.size() != 1 || op.outputs.size() != 1)
    fail(op, fmt::format("a {} reads one tensor and writes one", to_string(c.kind)));
  const int in = op.inputs[0], out = op.outputs[0];
  const Shape& xs = desc(in).local_shape;
  const Shape& ys = desc(out).local_shape;
  const int size = be_.group_size(c.group);
  Pending p;
  p.op = index;
  p.reads = {{in, -1}};
  p.writes = {{out, -1}};
  wait_conflicts(p.reads, p.writes);
  auto bad_shapes = [&](const std::string& why) {
    fail(op, fmt::format("{} of local shape {} into {} over {} ranks: {}", to_string(c.kind), to_string(xs),
                         to_string(ys), size, why));
  };
  auto check_dim = [&](int d, int64_t x_mult, int64_t y_mult, const char* what) {
    if (xs.size() != ys.size() || d < 0 || d >= static_cast<int>(xs.size())) bad_shapes(fmt::format("bad {}", what));
    for (size_t i = 0; i < xs.size(); ++i) {
      bool ok = static_cast<int>(i) == d ? xs[i] * x_mult == ys[i] * y_mult : xs[i] == ys[i];
      if (!ok) bad_shapes(fmt::format("shapes do not match {} {}", what, d));
    }
  };
  const int64_t nx = numel(xs), ny = numel(ys);
  const DevPtr src = ptr(in);
  const DevPtr dst = ptr(out);
  if (src.storage != dst.storage)
    fail(op, fmt::format("{} from {} storage into {}: a collective keeps the storage", to_string(c.kind),
                         to_string(src.storage), to_string(dst.storage)));
  switch (c.kind) {
    case CollectiveKind::all_reduce:
      if (nx != ny) bad_shapes("an all-reduce keeps the shape");
      p.request = be_.all_reduce(c.group, c.reduce, src, dst, nx);
      break;
    case CollectiveKind::all_gather: {
      const int d = normalized(c.gather_dim, xs);
      check_dim(d, size, 1, "gather_dim");
      if (split_at(xs, d).outer == 1) {
        p.request = be_.all_gather(c.group, src, dst, nx);
        break;
      }
      DevPtr stage = scratch(index, 0, ny, src.storage).ptr();
      p.request = be_.all_gather(c.group, src, stage, nx);
      Shape chunk = xs;
      p.finish = [this, dst, stage, chunk, d, size]() { unpack_concat(be_, dst, stage, chunk, d, size); };
      break;
    }
    case CollectiveKind::reduce_scatter: {
      const int d = normalized(c.scatter_dim, xs);
      check_dim(d, 1, size, "scatter_dim");
      if (split_at(xs, d).outer == 1) {
        p.request = be_.reduce_scatter(c.group, c.reduce, src, dst, ny);
        break;
      }
      DevPtr stage = scratch(index, 0, nx, src.storage).ptr();
      pack_split(be_, stage, src, xs, d, size);
      p.request = be_.reduce_scatter(c.group, c.reduce, stage, dst, ny);
      break;
    }
    case CollectiveKind::all_to_all: {
      const int g = normalized(c.gather_dim, xs), s = normalized(c.scatter_dim, xs);
      if (!all_to_all_shapes(xs, ys, g, s, size))
        bad_shapes(fmt::format("gather_dim {} must grow and scatter_dim {} shrink by the group size", g, s));
      DevPtr stage_in = scratch(index, 0, nx, src.storage).ptr();
      DevPtr stage_out = scratch(index, 1, nx, src.storage).ptr();
      pack_split(be_, stage_in, src, xs, s, size);
      p.request = be_.all_to_all(c.group, stage_in, stage_out, nx / size);
      Shape chunk = xs;
      chunk[size_t(s)] /= size;
      p.finish = [this, dst, stage_out, chunk, g, size]() { unpack_concat(be_, dst, stage_out, chunk, g, size); };
      break;
    }
    case CollectiveKind::p2p:
      break;
  }
  finish_or_queue(std::move(p), eager);
}

// Single-rank mode (ExecutorOptions::local_shapes_of_tp): what a skipped collective writes, from this rank's data
// alone, with the backend's copy2d and accumulate (device work, no host round trip), deterministic and the same on
// every backend. The group's degree is the Program's (tp N for the TP group), not the backend's (one process):
//   all-gather      the local shard in every rank's slot: a gather of N shards like this one, whose statistics are
//                   exactly the shard's.
//   reduce-scatter  (sum) the sum of the N slices of the local partial along scatter_dim. Each slice stands for
//                   another rank's partial of this rank's slice, so the output is a sum of N similar partials: at the
//                   real sum's scale (sqrt(N) times one independent partial's spread) and dense where one partial is
//                   sparse (a vocab-sharded embedding's partial is zero for the tokens of the other ranks' vocab: its
//                   own slice alone would leave (N-1)/N of the rows zero). (max, or a float8 tensor: the rank's own
//                   slice: a max over similar data is close to it.)
//   all-reduce      (sum) the reduce-scatter's seed along the first dim N divides, in every slot of that dim (the
//                   reduce-scatter then the all-gather a real all-reduce is); the local value when N divides no dim.
//                   (max: the local value: a max over ranks of similar data, such as an amax, is close to it.)
//   all-to-all      this rank's slice of scatter_dim, in every slot of gather_dim (a gather of similar slices).
//   async TP ring   all-gather steps: step 0 copies the local shard into its slot as in a real run, step j copies it
//                   into the slot it would have received; reduce-scatter steps: the partial sent (a similar one).
// FSDP's collectives write nothing in any mode here (parameters are whole on every rank; the gradient reduction is in
// place: the local gradient stands for the sum). Context-parallel and pipeline transfers never run in this mode (the
// executor needs the CP group's ranks; tp-run profile refuses pipelines with --local-shapes-of-tp).
void Executor::seed_skipped_collective(int index) {
  const FlatOp& op = flat_.ops[size_t(index)];
  const CollectiveOp& c = std::get<CollectiveOp>(op.op->kind);
  const int parts = c.group == Group::tp ? tp_ : c.group == Group::dp ? program_.dp : c.group == Group::cp ? cp_ : 1;
  if (c.kind == CollectiveKind::p2p) {
    if (c.group != Group::tp) return;
    const ChunkRef& ch = op.op->chunk;
    if (op.inputs.size() != 1 || op.outputs.size() != 1) fail(op, "a p2p ring step reads one tensor and writes one");
    const int in = op.inputs[0], out = op.outputs[0];
    if (ch.pattern == ChunkRef::Pattern::reduce_scatter) {
      const int64_t n = numel(desc(in).local_shape);
      if (numel(desc(out).local_shape) != n) fail(op, "a reduce-scatter ring step receives what it sends");
      be_.copy2d(ptr(out), n, ptr(in), n, 1, n);
      return;
    }
    if (ch.pattern != ChunkRef::Pattern::all_gather)
      fail(op, "a p2p op outside an async TP ring (no ChunkRef pattern)");
    if (ch.step == 0) return issue_p2p(index, c, true);  // the local copy into its own slot: no communication
    const Shape& gs = desc(out).local_shape;
    if (gs.size() != 3 || gs[1] % tp_ != 0) fail(op, fmt::format("gathered tensor {} is not (b, s, h)", to_string(gs)));
    const int64_t b = gs[0], s = gs[1], h = gs[2], chunk = s / tp_;
    const int recv_slot = ((rank_ - ch.step) % tp_ + tp_) % tp_;
    const DevPtr g = ptr(out);
    for (int64_t bb = 0; bb < b; ++bb)
      be_.copy2d(g.at((bb * s + int64_t(recv_slot) * chunk) * h), h, g.at((bb * s + int64_t(rank_) * chunk) * h), h,
                 chunk, h);
    return;
  }
  const bool fsdp_gather = c.kind == CollectiveKind::all_gather && op.inputs.empty();
  const bool fsdp_reduce = c.kind == CollectiveKind::reduce_scatter && op.inputs == op.outputs;
  if (c.group == Group::dp && (fsdp_gather || fsdp_reduce)) return;
  if (op.inputs.size() != 1 || op.outputs.size() != 1)
    fail(op, fmt::format("a {} reads one tensor and writes one", to_string(c.kind)));
  const int in = op.inputs[0], out = op.outputs[0];
  const Shape& xs = desc(in).local_shape;
  const Shape& ys = desc(out).local_shape;
  const DevPtr src = ptr(in), dst = ptr(out);
  if (src.storage != dst.storage)
    fail(op, fmt::format("{} from {} storage into {}: a collective keeps the storage", to_string(c.kind),
                         to_string(src.storage), to_string(dst.storage)));
  auto check = [&](int d, int64_t x_mult, int64_t y_mult) {
    bool ok = xs.size() == ys.size() && d >= 0 && d < static_cast<int>(xs.size());
    for (size_t i = 0; ok && i < xs.size(); ++i)
      ok = static_cast<int>(i) == d ? xs[i] * x_mult == ys[i] * y_mult : xs[i] == ys[i];
    if (!ok)
      fail(op, fmt::format("{} of local shape {} into {} over {} ranks: the shapes do not match dim {}",
                           to_string(c.kind), to_string(xs), to_string(ys), parts, d));
  };
  // dst (shape xs with dim d divided by `parts`) <- the sum of the `parts` slices of src along d (slice 0 alone
  // when summing does not apply).
  auto sum_of_slices = [&](DevPtr to, int d, bool sum) {
    Shape slice = xs;
    slice[size_t(d)] /= parts;
    const int64_t n = numel(slice);
    DevPtr chunks = src;  // the slices one after another
    if (split_at(xs, d).outer > 1) {
      chunks = scratch(index, 0, numel(xs), src.storage).ptr();
      pack_split(be_, chunks, src, xs, d, parts);
    }
    be_.copy2d(to, n, chunks.at(int64_t(rank_) * n), n, 1, n);
    if (sum && summable(src.storage))
      for (int j = 0; j < parts; ++j)
        if (j != rank_) be_.accumulate(n, chunks.at(int64_t(j) * n), to);
  };
  switch (c.kind) {
    case CollectiveKind::all_gather: {
      const int d = normalized(c.gather_dim, xs);
      check(d, parts, 1);
      tile_concat(be_, dst, src, xs, d, parts);
      return;
    }
    case CollectiveKind::reduce_scatter: {
      const int d = normalized(c.scatter_dim, xs);
      check(d, 1, parts);
      sum_of_slices(dst, d, c.reduce == ReduceOp::sum);
      return;
    }
    case CollectiveKind::all_reduce: {
      check(0, 1, 1);
      int d = 0;
      while (d < static_cast<int>(xs.size()) && xs[size_t(d)] % parts != 0) ++d;
      if (c.reduce == ReduceOp::max || parts == 1 || d == static_cast<int>(xs.size()) || !summable(src.storage)) {
        if (in != out) be_.copy2d(dst, numel(xs), src, numel(xs), 1, numel(xs));
        return;
      }
      Shape slice = xs;
      slice[size_t(d)] /= parts;
      const DevPtr sum = scratch(index, 1, numel(slice), src.storage).ptr();
      sum_of_slices(sum, d, true);
      tile_concat(be_, dst, sum, slice, d, parts);
      return;
    }
    case CollectiveKind::all_to_all: {
      const int g = normalized(c.gather_dim, xs), s = normalized(c.scatter_dim, xs);
      if (!all_to_all_shapes(xs, ys, g, s, parts))
        fail(op, fmt::format("all_to_all of local shape {} into {} over {} ranks: gather_dim {} must grow and "
                             "scatter_dim {} shrink by the group size",
                             to_string(xs), to_string(ys), parts, g, s));
      const int64_t nx = numel(xs);
      const DevPtr stage = scratch(index, 0, nx, src.storage).ptr();
      pack_split(be_, stage, src, xs, s, parts);
      Shape chunk = xs;
      chunk[size_t(s)] /= parts;
      tile_concat(be_, dst, stage.at(int64_t(rank_) * (nx / parts)), chunk, g, parts);
      return;
    }
    case CollectiveKind::p2p:
      return;
  }
}

void Executor::finish_or_queue(Pending p, bool eager) {
  if (eager) {
    wait_request(p);
    if (p.finish) p.finish();
    return;
  }
  pending_.push_back(std::move(p));
}

// Ring attention's K/V and dK/dV rotation (plans/lower/ring.cc): the input goes to cp rank + 1, the output comes from
// cp rank - 1 (torch's _AllToAllRotater and dkv rotater, a permute along the ring).
void Executor::issue_cp_p2p(int index, const CollectiveOp& c, bool eager) {
  const FlatOp& op = flat_.ops[size_t(index)];
  if (op.inputs.size() != 1 || op.outputs.size() != 1) fail(op, "a CP ring transfer reads one tensor and writes one");
  const int in = op.inputs[0], out = op.outputs[0];
  const int64_t n = numel(desc(in).local_shape);
  if (numel(desc(out).local_shape) != n) fail(op, "a CP ring transfer receives what it sends");
  Pending p;
  p.op = index;
  p.reads = {{in, -1}};
  p.writes = {{out, -1}};
  wait_conflicts(p.reads, p.writes);
  const int size = be_.group_size(c.group), rank = be_.group_rank(c.group);
  p.request = be_.send_recv(c.group, ptr(in), (rank + 1) % size, ptr(out), (rank + size - 1) % size, n);
  finish_or_queue(std::move(p), eager);
}

// A pipeline stage's transfer (plans/lower/rewrite/pipeline_stage.h): one way to or from the peer's pp rank. The tag
// names the message: (sending stage, microbatch, activation or gradient), the same on both sides.
void Executor::issue_pp_transfer(int index, const CollectiveOp& c, bool eager) {
  const FlatOp& op = flat_.ops[size_t(index)];
  const bool send = op.outputs.empty();
  if (op.inputs.size() + op.outputs.size() != 1)
    fail(op, "a pipeline transfer sends one tensor or receives one, not both");
  const Program::Stage& st = program_.stage;
  if (st.index < 0 || c.peer_stage < 0 || c.peer_stage >= st.count || c.peer < 0 || c.peer >= be_.group_size(Group::pp))
    fail(op, fmt::format("a pipeline transfer of stage {} of {} to stage {} on pp rank {}, with a pipeline group of {}",
                         st.index, st.count, c.peer_stage, c.peer, be_.group_size(Group::pp)));
  const int sender = send ? st.index : c.peer_stage;
  const int64_t tag64 =
      (int64_t{options_.pp_microbatch} * st.count + sender) * 2 + (op.op->phase == Phase::forward ? 0 : 1);
  if (options_.pp_microbatch < 0 || tag64 > be_.max_p2p_tag())
    fail(op, fmt::format("microbatch {} of {} stages needs transfer tag {}, above the backend's {}",
                         options_.pp_microbatch, st.count, tag64, be_.max_p2p_tag()));
  const int t = send ? op.inputs[0] : op.outputs[0];
  const int64_t n = numel(desc(t).local_shape);
  Pending p;
  p.op = index;
  (send ? p.reads : p.writes).push_back({t, -1});
  wait_conflicts(p.reads, p.writes);
  if (send) {
    p.request = be_.send(Group::pp, ptr(t), c.peer, n, static_cast<int>(tag64));
    p.transfer_send = true;
    pending_.push_back(std::move(p));  // never waited for here (see executor.h)
    return;
  }
  p.request = be_.recv(Group::pp, ptr(t), c.peer, n, static_cast<int>(tag64));
  finish_or_queue(std::move(p), eager);
}

// FSDP over the DP group (plans/lower/lower.cc fsdp_gather / fsdp_reduce). The runtime keeps every parameter whole on
// every rank (each initialized from the seed), so the all-gather of a unit's parameters (no inputs) has nothing to
// fetch; the gradient reduce-scatter (inputs == outputs, the unit's gradients) runs as one all-reduce (sum) of all of
// them, whose result holds every rank's reduce-scatter shard.
void Executor::issue_fsdp(int index, const CollectiveOp& c, bool eager) {
  const FlatOp& op = flat_.ops[size_t(index)];
  if (c.kind == CollectiveKind::all_gather) return;
  int64_t total = 0;
  Storage storage = Storage::f32;
  for (int t : op.inputs) {
    total += numel(desc(t).local_shape);
    storage = ptr(t).storage;
  }
  for (int t : op.inputs)
    if (ptr(t).storage != storage) fail(op, "an FSDP gradient reduction over gradients of different storages");
  Pending p;
  p.op = index;
  for (int t : op.inputs) p.reads.push_back({t, -1}), p.writes.push_back({t, -1});
  wait_conflicts(p.reads, p.writes);
  const DevPtr stage = scratch(index, 0, total, storage).ptr();
  int64_t at = 0;
  for (int t : op.inputs) {
    const int64_t n = numel(desc(t).local_shape);
    be_.copy2d(stage.at(at), n, ptr(t), n, 1, n);
    at += n;
  }
  p.request = be_.all_reduce(c.group, ReduceOp::sum, stage, stage, total);
  std::vector<int> grads = op.inputs;
  p.finish = [this, stage, grads]() {
    int64_t off = 0;
    for (int t : grads) {
      const int64_t n = numel(desc(t).local_shape);
      be_.copy2d(ptr(t), n, stage.at(off), n, 1, n);
      off += n;
    }
  };
  finish_or_queue(std::move(p), eager);
}

// Async TP ring steps (ChunkRef in plans/program/program.h).
//   all_gather pattern: the output is the gathered (b, s, h) tensor. Step 0 copies the local shard (input) into slot
//   r; step j >= 1 sends slot (r-j+1) to rank r+1 and receives slot (r-j) from rank r-1.
//   reduce_scatter pattern: step j sends its buffer (input) to rank r-1 and receives rank r+1's into the output.
// Slots are rows [slot*s/tp, (slot+1)*s/tp) of every sequence; with batch > 1 they are packed into staging buffers.
void Executor::issue_p2p(int index, const CollectiveOp& c, bool eager) {
  const FlatOp& op = flat_.ops[size_t(index)];
  const ChunkRef& ch = op.op->chunk;
  if (op.inputs.size() != 1 || op.outputs.size() != 1) fail(op, "a p2p ring step reads one tensor and writes one");
  if (ch.count != tp_) fail(op, fmt::format("ring of {} steps on a TP group of {}", ch.count, tp_));
  const int in = op.inputs[0], out = op.outputs[0];
  const int next = (rank_ + 1) % tp_, prev = (rank_ + tp_ - 1) % tp_;
  Pending p;
  p.op = index;
  if (ch.pattern == ChunkRef::Pattern::reduce_scatter) {
    const int64_t n = numel(desc(in).local_shape);
    if (numel(desc(out).local_shape) != n) fail(op, "a reduce-scatter ring step receives what it sends");
    p.reads = {{in, -1}};
    p.writes = {{out, -1}};
    wait_conflicts(p.reads, p.writes);
    p.request = be_.send_recv(c.group, ptr(in), prev, ptr(out), next, n);
  } else if (ch.pattern == ChunkRef::Pattern::all_gather) {
    const Shape& gs = desc(out).local_shape;
    if (gs.size() != 3 || gs[1] % tp_ != 0) fail(op, fmt::format("gathered tensor {} is not (b, s, h)", to_string(gs)));
    const int64_t b = gs[0], s = gs[1], h = gs[2], chunk = s / tp_;
    const DevPtr g = ptr(out);
    auto slot_ptr = [&](int slot, int64_t bb) { return g.at((bb * s + int64_t(slot) * chunk) * h); };
    if (ch.step == 0) {
      const Shape& xs = desc(in).local_shape;
      if (numel(xs) != b * chunk * h)
        fail(op, fmt::format("local shard {} is not a slot of {}", to_string(xs), to_string(gs)));
      p.reads = {{in, -1}};
      p.writes = {{out, rank_}};
      wait_conflicts(p.reads, p.writes);
      for (int64_t bb = 0; bb < b; ++bb) be_.copy2d(slot_ptr(rank_, bb), h, ptr(in).at(bb * chunk * h), h, chunk, h);
      return;
    }
    const int send_slot = ((rank_ - ch.step + 1) % tp_ + tp_) % tp_, recv_slot = ((rank_ - ch.step) % tp_ + tp_) % tp_;
    p.reads = {{out, send_slot}};
    p.writes = {{out, recv_slot}};
    if (in != out) p.reads.push_back({in, -1});
    wait_conflicts(p.reads, p.writes);
    if (b == 1) {
      p.request = be_.send_recv(c.group, slot_ptr(send_slot, 0), next, slot_ptr(recv_slot, 0), prev, chunk * h);
    } else {
      const DevPtr send = scratch(index, 0, b * chunk * h, g.storage).ptr();
      const DevPtr recv = scratch(index, 1, b * chunk * h, g.storage).ptr();
      for (int64_t bb = 0; bb < b; ++bb) be_.copy2d(send.at(bb * chunk * h), h, slot_ptr(send_slot, bb), h, chunk, h);
      p.request = be_.send_recv(c.group, send, next, recv, prev, b * chunk * h);
      const DevPtr base = g;
      p.finish = [this, base, recv, b, s, h, chunk, recv_slot]() {
        for (int64_t bb = 0; bb < b; ++bb)
          be_.copy2d(base.at((bb * s + int64_t(recv_slot) * chunk) * h), h, recv.at(bb * chunk * h), h, chunk, h);
      };
    }
  } else {
    fail(op, "a p2p op outside an async TP ring (no ChunkRef pattern)");
  }
  finish_or_queue(std::move(p), eager);
}

}  // namespace tptune
