// Executor: context parallelism's compute ops — ring attention's blocks and merges (torch's
// _templated_ring_attention and its backward, plans/language/context_parallel.h) and rope at the cp rank's positions.
#include <fmt/format.h>

#include <limits>

#include "plans/util/error.h"
#include "runtime/executor.h"
#include "runtime/ring/schedule.h"

namespace tptune {

// A block of the ring (AttentionOp::ring_step, plans/program/program.h). The rank's RingStep (runtime/ring/schedule.h)
// says which rows of its q and of the held K/V shard the block uses, or that it skips the shard. Forward: the block's
// (o, lse) of the whole local query, rows it does not touch left empty (o 0, lse -inf) so that the merge keeps the
// running values there. Backward: the block's dq and dK/dV shares (zero where it does not touch).
void Executor::run_ring_attention(int index, const AttentionOp& a) {
  const FlatOp& op = flat_.ops[size_t(index)];
  const bool diagonal = a.ring_step == 0;  // step 0 reads the local k and v; a later step the K/V buffer it holds
  const size_t kv_inputs = diagonal ? 2 : 1;
  const size_t n_in = 1 + kv_inputs + (a.backward ? 3 : 0), n_out = 2;
  if (op.inputs.size() != n_in || op.outputs.size() != n_out)
    fail(op,
         fmt::format("ring attention step {} ({}) expects {} inputs and {} outputs, the op has {} and {}", a.ring_step,
                     a.backward ? "backward" : "forward", n_in, n_out, op.inputs.size(), op.outputs.size()));
  if (a.ring_step >= cp_) fail(op, fmt::format("ring attention step {} on a CP group of {} ranks", a.ring_step, cp_));
  const Shape& qs = desc(op.inputs[0]).local_shape;
  if (qs.size() != 3 || qs[2] != a.n_heads * a.head_dim || qs[0] != a.batch)
    fail(op, fmt::format("ring attention: q of local shape {} is not (batch {}, seq, {} heads x {})", to_string(qs),
                         a.batch, a.n_heads, a.head_dim));
  const int64_t b = qs[0], s = qs[1], kv_width = a.n_kv_heads * a.head_dim;
  const int64_t q_elems = b * s * qs[2], kv_elems = b * s * kv_width, lse_elems = b * a.n_heads * s;
  const SeqLayout layout = program_.plan.cp_load_balance ? SeqLayout::head_tail : SeqLayout::contiguous;
  const RingStep st = ring_step(cp_rank_, cp_, a.ring_step, layout, s);

  // The K and V this step holds.
  DevPtr k, v;
  if (diagonal) {
    if (numel(desc(op.inputs[1]).local_shape) != kv_elems || numel(desc(op.inputs[2]).local_shape) != kv_elems)
      fail(op, "ring attention: the local k and v must be (batch, seq, kv heads x head_dim)");
    k = ptr(op.inputs[1]), v = ptr(op.inputs[2]);
  } else {
    const int t = op.inputs[1];
    const int64_t held = numel(desc(t).local_shape);
    if (held == 2 * kv_elems) {  // the buffer received from the previous cp rank (alltoall rotation)
      k = ptr(t);
    } else if (held == 2 * kv_elems * cp_) {
      // The all-gathered (b, cp s, 2 kv width) buffer: rows [j s, (j+1) s) of each batch are cp rank j's buffer,
      // itself (b, s, 2 kv width) holding K then V flattened. Rebuild the source's buffer.
      const DevPtr all = ptr(t);
      k = scratch(index, 0, 2 * kv_elems, all.storage).ptr();
      const int64_t row = 2 * kv_width;
      for (int64_t bb = 0; bb < b; ++bb)
        be_.copy2d(k.at(bb * s * row), row, all.at((bb * cp_ + st.source) * s * row), row, s, row);
    } else {
      fail(op, fmt::format("ring attention: K/V buffer '{}' holds {} elements, expected {} (one shard) or {} (all "
                           "{} gathered)",
                           flat_.tensors[size_t(t)].fqn, held, 2 * kv_elems, 2 * kv_elems * cp_, cp_));
    }
    v = k.at(kv_elems);
  }
  const kernels::BlockHeads h{b, a.n_heads, a.n_kv_heads, a.head_dim};
  // The causal mask is only used on the local diagonal, where local row order is global order
  // (runtime/ring/schedule.h).
  const kernels::SeqRows q_rows{s, st.q_begin, st.q_len, st.q_begin}, kv_rows{s, st.kv_begin, st.kv_len, st.kv_begin};
  const size_t rest = 1 + kv_inputs;  // index of the forward's o in a backward's inputs

  if (!a.backward) {
    if (numel(desc(op.outputs[0]).local_shape) != q_elems || numel(desc(op.outputs[1]).local_shape) != lse_elems)
      fail(op, "ring attention: the outputs must be o (like q) and lse (batch, heads, seq)");
    const DevPtr o = ptr(op.outputs[0]);
    float* lse = stat(op.outputs[1]);
    be_.fill(o, q_elems, 0.0f);
    be_.fill(lse, lse_elems, -std::numeric_limits<float>::infinity());
    if (!st.skip) be_.attention_block_fwd(h, st.mask, q_rows, kv_rows, ptr(op.inputs[0]), k, v, o, lse);
    return;
  }
  if (numel(desc(op.outputs[0]).local_shape) != q_elems || numel(desc(op.outputs[1]).local_shape) != 2 * kv_elems)
    fail(op, "ring attention: the backward's outputs must be dq (like q) and dK/dV (twice k)");
  const DevPtr dq = ptr(op.outputs[0]), dkv = ptr(op.outputs[1]);
  be_.fill(dq, q_elems, 0.0f);
  be_.fill(dkv, 2 * kv_elems, 0.0f);
  if (!st.skip)
    be_.attention_block_bwd(h, st.mask, q_rows, kv_rows, ptr(op.inputs[0]), k, v, ptr(op.inputs[rest]),
                            stat(op.inputs[rest + 1]), ptr(op.inputs[rest + 2]), dq, dkv, dkv.at(kv_elems));
}

// {o, lse, block_o, block_lse} -> {o, lse}: every row merged (a row the block did not touch has lse -inf and keeps
// the running values).
void Executor::run_attention_merge(int index) {
  const FlatOp& op = flat_.ops[size_t(index)];
  if (op.inputs.size() != 4 || op.outputs.size() != 2 || op.outputs[0] != op.inputs[0] || op.outputs[1] != op.inputs[1])
    fail(op, "attention_merge updates {o, lse} in place from {o, lse, block_o, block_lse}");
  const Shape& os = desc(op.inputs[0]).local_shape;
  const Shape& ls = desc(op.inputs[1]).local_shape;
  if (os.size() != 3 || ls.size() != 3 || ls[0] != os[0] || ls[2] != os[1] || ls[1] <= 0 || os[2] % ls[1] != 0 ||
      desc(op.inputs[2]).local_shape != os || desc(op.inputs[3]).local_shape != ls)
    fail(op, fmt::format("attention_merge: o {} and lse {} are not (batch, seq, heads x head_dim) and (batch, heads, "
                         "seq), or the block's differ",
                         to_string(os), to_string(ls)));
  const kernels::BlockHeads h{os[0], ls[1], ls[1], os[2] / ls[1]};
  be_.attention_merge(h, {os[1], 0, os[1], 0}, ptr(op.inputs[0]), stat(op.inputs[1]), ptr(op.inputs[2]),
                      stat(op.inputs[3]));
}

// Rope of a (batch, seq, heads x head_dim) tensor whose row i holds sequence row first_row + i of this cp rank:
// one backend call per batch and run of consecutive global positions (two runs per batch under load balancing).
void Executor::rope_rows(const RopeShape& s, bool backward, DevPtr x, DevPtr y, int64_t first_row) {
  const int64_t width = s.heads * s.head_dim;
  if (first_row < 0 || first_row + s.seq > static_cast<int64_t>(cp_positions_.size()))
    throw Error(fmt::format("executor: rope of rows [{}, {}) of a context-parallel shard of {} rows", first_row,
                            first_row + s.seq, cp_positions_.size()));
  for (int64_t bb = 0; bb < s.batch; ++bb) {
    for (int64_t i = 0; i < s.seq;) {
      int64_t run = 1;
      const int64_t pos = cp_positions_[size_t(first_row + i)];
      while (i + run < s.seq && cp_positions_[size_t(first_row + i + run)] == pos + run) ++run;
      RopeShape part = s;
      part.batch = 1, part.seq = run, part.offset = pos;
      const int64_t at = (bb * s.seq + i) * width;
      if (backward)
        be_.rope_bwd(part, x.at(at), y.at(at));
      else
        be_.rope_fwd(part, x.at(at), y.at(at));
      i += run;
    }
  }
}

}  // namespace tptune
