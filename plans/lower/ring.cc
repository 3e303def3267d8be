// Ring attention (context parallelism): the ops of torch's _templated_ring_attention and its backward on one cp rank,
// as plans/language/context_parallel.h states them. Part of the lowering (plans/lower/layers.h,
// Layers::ring_attention).
//
// Per layer, on the rank's b x s_l tokens (s_l = seq / cp), with K/V buffers of 2 x b x s_l x hkv x head_dim elements
// (torch.cat of the flattened K and V):
//   forward   allgather: cat(K, V) (copy), all_gather on cp (issued before the diagonal block, waited for by step 1),
//             the cp blocks, a merge after each block but the first.
//             alltoall: cat(K, V), then per step i the p2p of buffer i+1 (i < cp-1) listed before block i, so it is in
//             flight while block i computes; the block reads buffer i; the merge as above.
//   backward  the K/V rotation again (cat, then the all-gather or the p2p ring), per step the block's SDPA backward
//             (dq into an fp32 accumulator; dK/dV added to the dK/dV buffer received from the previous step, fp32),
//             and the p2p of that buffer to the next rank (always a ring: torch's dkv_rotater is all-to-all), cp
//             transfers; the last received buffer is this rank's dK/dV, cast back to the activation dtype.
// Blocks: step 0 is the causal diagonal block; the others are cp_ring_step()'s (half blocks with load balancing).

#include <fmt/format.h>

#include "plans/language/context_parallel.h"
#include "plans/lower/layers.h"
#include "plans/util/checked_math.h"

namespace tptune::lowering {

void Layers::ring_attention(const Name& n, const Value& q, const Value& k, const Value& v, int64_t hq, int64_t hkv,
                            Value& out) {
  const int cp = plan.cp_degree;
  const bool balance = plan.cp_load_balance;
  const bool ring = plan.cp_rotate == CpRotate::alltoall;
  const int64_t hd = m.head_dim();
  const Shape ql = e.shape(q), kl = e.shape(k), vl = e.shape(v);
  const int64_t b = ql[0], s = ql[1];
  const int64_t bpe = bytes_per_element(act());
  const Shape kv_shape{b, s, 2 * hkv * hd};
  const int64_t kv_elems = numel(kv_shape);
  const int64_t o_elems = numel(ql), lse_elems = b * hq * s;
  const Placement kv_pl = e.desc(k.t).placement;
  auto name = [=, this](const std::string& what) { return e.cat(n.rel, what.c_str()); };
  auto cp_collective = [](CollectiveKind kind, DType dtype, int64_t bytes) {
    return CollectiveOp{kind, Group::cp, ReduceOp::sum, dtype, bytes, kind == CollectiveKind::all_gather ? 1 : -1, -1};
  };

  // cat(K.flatten(), V.flatten()): one copy, read and write of both.
  auto cat_kv = [=, this](const std::string& label) {
    TensorId buf = e.tensor(name(".ring." + label), kv_shape, act(), kv_pl, TensorRole::activation);
    e.op(n.rel, name(".ring." + label), ElementwiseOp{ElementwiseOp::Fn::concat, 2 * kv_elems * bpe, 0}, {k.t, v.t},
         {buf});
    return buf;
  };
  // The K/V each step reads: allgather: one all-gather of cp buffers (step 0 reads the local K and V); alltoall: the
  // p2p of step i+1 issued before step i's block (`before_block`, called at each step).
  struct Rotation {
    TensorId gathered = -1;
    std::vector<TensorId> buffers;  // alltoall: buffer i of step i (0: the local cat)
  };
  auto rotate_begin = [=, this](const std::string& phase) {
    Rotation r;
    TensorId local = cat_kv(phase + ".kv");
    if (!ring) {
      r.gathered =
          e.tensor(name(".ring." + phase + ".kv_all"), {b, s * cp, 2 * hkv * hd}, act(), kv_pl, TensorRole::activation);
      e.op(n.rel, name(".ring." + phase + ".all_gather"),
           cp_collective(CollectiveKind::all_gather, act(), checked_mul({cp, kv_elems, bpe}, "K/V all-gather bytes")),
           {local}, {r.gathered});
    }
    r.buffers.push_back(local);
    return r;
  };
  auto before_block = [=, this](Rotation& r, int i, const std::string& phase) {
    if (!ring || i + 1 >= cp) return;
    TensorId next =
        e.tensor(name(fmt::format(".ring.{}.kv.{}", phase, i + 1)), kv_shape, act(), kv_pl, TensorRole::activation);
    e.op(n.rel, name(fmt::format(".ring.{}.p2p.{}", phase, i + 1)),
         cp_collective(CollectiveKind::p2p, act(), kv_elems * bpe), {r.buffers.back()}, {next});
    r.buffers.push_back(next);
  };
  auto kv_of = [=](const Rotation& r, int i) {
    return i == 0 ? std::vector<TensorId>{k.t, v.t} : std::vector<TensorId>{ring ? r.buffers[i] : r.gathered};
  };
  auto block_op = [=](int i, bool backward) {
    const CpRingStep st = cp_ring_step(i, s, balance);
    return AttentionOp{b, st.q, hq, hkv, hd, st.causal, backward, st.causal ? 0 : st.kv, i};
  };

  // ---- forward ----
  TensorId o =
      e.tensor(name(".core.out"), ql, act(), e.desc(q.t).placement, TensorRole::activation, e.desc(q.t).global_shape);
  TensorId lse = e.tensor(name(".core.lse"), {b, hq, s}, DType::fp32, Placement::R(), TensorRole::activation);
  Rotation fwd = rotate_begin("fwd");
  for (int i = 0; i < cp; ++i) {
    before_block(fwd, i, "fwd");
    std::vector<TensorId> in{q.t};
    for (TensorId t : kv_of(fwd, i)) in.push_back(t);
    if (i == 0) {
      e.op(n.rel, name(".core.fwd"), block_op(0, false), in, {o, lse});
      continue;
    }
    TensorId bo = e.tensor(name(fmt::format(".ring.block_out.{}", i)), ql, act(), e.desc(q.t).placement,
                           TensorRole::activation, e.desc(q.t).global_shape);
    TensorId bl = e.tensor(name(fmt::format(".ring.block_lse.{}", i)), {b, hq, s}, DType::fp32, Placement::R(),
                           TensorRole::activation);
    e.op(n.rel, name(fmt::format(".core.fwd.{}", i)), block_op(i, false), in, {bo, bl});
    // _SDPAMerger in fp32: read the running out (4 B) and the block's (2 B as bf16), write out (4 B); lse read twice
    // and written (12 B); the first merge also converts step 0's output to fp32 and the last casts the result back
    // (read 4 + write 2 B, folded into the last merge).
    int64_t bytes = o_elems * (4 + bpe + 4) + lse_elems * 12;
    if (i == cp - 1) bytes += o_elems * (4 + bpe);
    e.op(n.rel, name(fmt::format(".ring.merge.{}", i)),
         ElementwiseOp{ElementwiseOp::Fn::attention_merge, bytes, 6 * o_elems}, {o, lse, bo, bl}, {o, lse});
  }
  out = q.dtensor ? e.dtensor(o, q.pl) : e.plain(o, q.pl);
  Value ov = out;

  // ---- backward ----
  e.record([=, this]() {
    auto g = e.grad(ov);
    if (!g) return;
    Rotation bwd = rotate_begin("bwd");
    const Shape acc_shape{b, s, kv_shape[2]};
    TensorId dq = e.tensor(name(".core.grad_q"), ql, DType::fp32, e.desc(q.t).placement, TensorRole::gradient,
                           e.desc(q.t).global_shape);
    TensorId dkv_in = -1;  // the dK/dV buffer received from the previous step
    for (int i = 0; i < cp; ++i) {
      before_block(bwd, i, "bwd");
      std::vector<TensorId> in{q.t};
      for (TensorId t : kv_of(bwd, i)) in.push_back(t);
      in.insert(in.end(), {o, lse, g->t});
      TensorId dq_i = i == 0 ? dq
                             : e.tensor(name(fmt::format(".ring.grad_q.{}", i)), ql, DType::fp32, e.desc(q.t).placement,
                                        TensorRole::gradient, e.desc(q.t).global_shape);
      TensorId dkv_i = e.tensor(name(fmt::format(".ring.grad_kv.{}", i)), acc_shape, DType::fp32, e.desc(k.t).placement,
                                TensorRole::gradient);
      e.op(n.rel, name(i == 0 ? std::string(".core.bwd") : fmt::format(".core.bwd.{}", i)), block_op(i, true), in,
           {dq_i, dkv_i});
      if (i > 0) {
        // grad_query += grad_query_ (fp32): read both, write one.
        e.op(n.rel, name(fmt::format(".ring.grad_q_acc.{}", i)),
             ElementwiseOp{ElementwiseOp::Fn::accumulate, o_elems * 12, o_elems}, {dq_i}, {dq});
        // grad_key/value = received buffer + this block's (fp32).
        e.op(n.rel, name(fmt::format(".ring.grad_kv_acc.{}", i)),
             ElementwiseOp{ElementwiseOp::Fn::accumulate, kv_elems * 12, kv_elems}, {dkv_in}, {dkv_i});
      }
      TensorId recv = e.tensor(name(fmt::format(".ring.grad_kv_recv.{}", i)), acc_shape, DType::fp32,
                               e.desc(k.t).placement, TensorRole::gradient);
      e.op(n.rel, name(fmt::format(".ring.grad_kv.p2p.{}", i)),
           cp_collective(CollectiveKind::p2p, DType::fp32, kv_elems * 4), {dkv_i}, {recv});
      dkv_in = recv;
    }
    // The last buffer received is this rank's dK/dV: split and cast to the activation dtype (read 4, write 2 B).
    TensorId dk = e.tensor(name(".core.grad_k"), kl, act(), e.desc(k.t).placement, TensorRole::gradient,
                           e.desc(k.t).global_shape);
    TensorId dv = e.tensor(name(".core.grad_v"), vl, act(), e.desc(v.t).placement, TensorRole::gradient,
                           e.desc(v.t).global_shape);
    e.op(n.rel, name(".ring.grad_kv.cast"), ElementwiseOp{ElementwiseOp::Fn::concat, kv_elems * (4 + bpe), 0}, {dkv_in},
         {dk, dv});
    TensorId dq_out = e.tensor(name(".core.grad_q.cast"), ql, act(), e.desc(q.t).placement, TensorRole::gradient,
                               e.desc(q.t).global_shape);
    e.op(n.rel, name(".ring.grad_q.cast"), ElementwiseOp{ElementwiseOp::Fn::concat, o_elems * (4 + bpe), 0}, {dq},
         {dq_out});
    auto wrap = [&](TensorId t, const Value& like) { return like.dtensor ? e.dtensor(t, like.pl) : e.plain(t); };
    e.add_grad(q, wrap(dq_out, q), n.rel);
    e.add_grad(k, wrap(dk, k), n.rel);
    e.add_grad(v, wrap(dv, v), n.rel);
  });
}

}  // namespace tptune::lowering
