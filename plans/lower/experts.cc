// A mixture-of-experts block's MLP as torchtitan 0.3.0 runs it (Layers::moe, plans/lower/layers.h), and Qwen3's q/k
// norms (Layers::head_norm). Read in torchtitan 0.3.0's sources (the wheel's torchtitan/models/common/moe.py,
// token_dispatcher.py, moe_sharding.py; the mesh and styles are plans/language/expert_parallel.h):
//
// Forward, per rank, on T local tokens (b x s/tp with EP on and TP: the router's Shard(1) input; else b x s) with
// N = T x top_k routed copies:
//   router      gate GEMM (T, dim) x (experts, dim)^T in fp32 (TokenChoiceTopKRouter computes the gate in float32),
//               then one moe_router op: softmax or sigmoid, expert_bias for the choice, torch.topk, the gathered
//               scores and the tokens-per-expert histogram (MoE.forward's routing_map sum)
//   reorder     moe_permute: the N token copies gathered in expert order (LocalTokenDispatcher._local_reorder)
//   EP on (AllToAllTokenDispatcher.dispatch):
//     counts all-to-all of the experts' token counts on the ep group (_token_count_exchange), then host_sync: the
//     .tolist() that sizes the dispatch (_sync_token_count_exchange, a device-to-host copy the host waits for);
//     dispatch all-to-all of the N rows (_dispatch_token_exchange; variable splits: under balanced routing each rank
//     sends N / ep rows to each peer and receives N); moe_permute rank-major -> expert-major (_permute)
//   grouped GEMMs  w1 and w3 (rows, dim) -> (rows, ffn), swiglu, w2 -> (rows, dim): torch._grouped_mm per local
//               expert (GroupedExperts), `groups` = experts / ep, m = the busiest group's rows: N x imbalance x ep /
//               experts (balanced: each local expert gets top_k x tokens x ep / experts rows), padded to 16 rows with
//               float8 operands (TorchAOTokenDispatcher's permute_and_pad; bf16 pads nothing)
//   EP on: moe_unpermute, then the combine all-to-all back (_combine_token_exchange)
//   combine     moe_combine: each row times its score (fp32) and scatter-added into its token
//   shared      the shared expert on the replicated tokens (colwise w1/w3, rowwise w2; Qwen2-MoE's sigmoid gate), after
//               the routed experts as MoE.forward runs them (in 0.3.0's eager order the shared expert does not overlap
//               the combine all-to-all: it is issued after the combine's result is used)
// Every all-to-all's bytes: ep x the busiest rank's buffer (Group::ep in plans/program/program.h), i.e. for the
// dispatch and combine ep x N x imbalance x dim x 2 B (bf16).
// Backward mirrors it: the combine's backward gives the rows' and the scores' gradients, the combine all-to-all's
// backward is an all-to-all the dispatch's way, the grouped GEMMs' backward are grouped GEMMs (input: dY W; weight:
// groups products of (ffn, rows) x (rows, dim)), the dispatch all-to-all's backward the combine's way, the reorder's a
// scatter-add, the router's its softmax/sigmoid backward and the gate GEMM's two. The counts exchange is under no_grad.
// EP off with TP: every expert is TP-sharded on its ffn dim (w1/w3 Shard(1), w2 Shard(2)), the routed output is Partial
// over tp and is reduced together with the shared expert's.
#include <fmt/format.h>

#include <cmath>

#include "plans/lower/layers.h"
#include "plans/util/checked_math.h"
#include "plans/util/error.h"

namespace tptune::lowering {

namespace {
bool head_sharded(const Value& x, int tp) { return tp > 1 && x.pl.is_shard() && x.pl.normalized_dim(3) == 2; }
}  // namespace

Value Layers::head_norm(const Name& n, const Value& x, int64_t head_dim) {
  const Shape xl = e.shape(x);
  if (xl.size() != 3 || xl[2] % head_dim != 0)
    throw ModuleError(n.fqn, fmt::format("normalizes whole heads of {} but receives {} columns per rank: q/k norms "
                                         "need tp to divide n_heads and n_kv_heads",
                                         head_dim, xl.size() == 3 ? xl[2] : 0));
  TensorId w = parameter(n, "weight", {head_dim}, -1);
  TensorId y = e.tensor(e.cat(n.rel, ".out"), xl, act(), e.desc(x.t).placement, TensorRole::activation,
                        e.desc(x.t).global_shape);
  TensorId rstd = e.tensor(e.cat(n.rel, ".rstd"), {xl[0], xl[1], xl[2] / head_dim}, DType::fp32, Placement::R(),
                           TensorRole::activation);
  const int64_t bytes = 2 * numel(xl) * bytes_per_element(act());
  e.op(n.rel, e.cat(n.rel, ".fwd"), ElementwiseOp{ElementwiseOp::Fn::rmsnorm, bytes, 4 * numel(xl)}, {x.t, w},
       {y, rstd});
  Value yv = x.dtensor ? e.dtensor(y, x.pl) : e.plain(y, x.pl);
  e.record([this, n, x, yv, w, rstd, xl, bytes, head_dim]() {
    auto gy = e.grad(yv);
    if (!gy) return;
    TensorId dx = e.tensor(e.cat(n.rel, ".grad_input"), xl, act(), e.desc(x.t).placement, TensorRole::gradient,
                           e.desc(x.t).global_shape);
    TensorId dw = e.tensor(e.cat(n.rel, ".weight.grad"), {head_dim}, act(), Placement::R(), TensorRole::gradient);
    e.op(n.rel, e.cat(n.rel, ".bwd"), ElementwiseOp{ElementwiseOp::Fn::rmsnorm_bwd, 3 * bytes / 2, 8 * numel(xl)},
         {x.t, w, rstd, gy->t}, {dx, dw});
    // The weight is shared by every head: with the heads sharded over tp (a colwise projection's output) each rank's
    // gradient is its heads' share, a partial sum over tp.
    finish_param_grad(n, w, dw, head_sharded(x, e.tp));
    e.add_grad(x, x.dtensor ? e.dtensor(dx, x.pl) : e.plain(dx, x.pl), n.rel);
  });
  return yv;
}

namespace {

// The busiest expert group's rows (see the header comment), padded when `pad` > 1.
int64_t group_rows(int64_t copies, double imbalance, int ep, int64_t experts, int64_t pad) {
  const double m = std::ceil(static_cast<double>(copies) * imbalance * ep / static_cast<double>(experts));
  int64_t rows = static_cast<int64_t>(m);
  if (pad > 1) rows = (rows + pad - 1) / pad * pad;
  return rows;
}

}  // namespace

Value Layers::moe(const Name& n, const Value& x_in) {
  const MoeSpec& spec = m.moe;
  const int tp = e.tp, ep = plan.ep_degree;
  const bool ep_on = ep > 1, tp_experts = !ep_on && tp > 1;
  const int64_t E = spec.experts, K = spec.top_k, D = m.dim, F = spec.expert_ffn_dim;
  const int64_t e_local = E / ep, f_local = tp_experts ? F / tp : F;
  const DType dt = act();
  const int64_t bpe = bytes_per_element(dt);
  const bool f8 = plan.float8 != Float8Recipe::none;
  const DType mm_in = f8 ? DType::fp8_e4m3 : dt;
  const Name router = child(n, "router"), routed = child(n, "routed_experts"), shared = child(n, "shared_experts");

  // ---- Entry: the routed path's tokens and the shared expert's (the SP region's conversions, with autograd) ----
  // Each submodule declares its own input layout (models/common/moe_sharding.py), so the router's and the shared
  // expert's inputs are converted separately: EP on, the router's to S(1) (a local slice when the block's input is
  // replicated), EP off to Replicate (an all-gather under SP); the shared expert's to Replicate.
  Value x = x_in;
  if (tp > 1 && !x.dtensor) x = e.from_local(x, Placement::R(), n.rel);
  const Placement out_pl = tp > 1 ? x.pl : Placement::R();
  Value x_routed = x;
  if (tp > 1) {
    const bool seq = x.pl.is_shard() && x.pl.normalized_dim(3) == 1;
    if (ep_on && !seq) x_routed = e.redistribute(x, Placement::S(1), n.rel);
    if (!ep_on && !x.pl.is_replicate()) x_routed = e.redistribute(x, Placement::R(), n.rel);
    x_routed = e.to_local(x_routed);
  }
  const Shape rl = e.shape(x_routed);  // (b, s_routed, dim)
  const int64_t T = rl[0] * rl[1];
  const int64_t N = checked_mul(T, K, "routed token copies");
  // The busiest rank's received rows and its groups' rows (padded with float8).
  const int64_t m_rows = group_rows(N, t.moe_imbalance, ep, E, f8 ? 16 : 1);
  const int64_t rows = checked_mul(m_rows, e_local, "routed rows");
  const int64_t received = ep_on ? std::min(rows, static_cast<int64_t>(std::ceil(N * t.moe_imbalance))) : N;

  // (the three helpers capture nothing of this frame by reference: the backward closures below copy them and run
  // after moe() returned)
  auto tensor = [this](const Name& w, const char* what, const Shape& s, DType d,
                       TensorRole role = TensorRole::activation,
                       Placement pl = Placement::R()) { return e.tensor(e.cat(w.rel, what), s, d, pl, role, s); };
  auto ew = [this](const Name& w, const char* what, ElementwiseOp::Fn fn, int64_t bytes, int64_t flops,
                   std::vector<TensorId> ins, std::vector<TensorId> outs) {
    e.op(w.rel, e.cat(w.rel, what), ElementwiseOp{fn, bytes, flops}, std::move(ins), std::move(outs));
  };
  // `sized_by` (>= 0): the host's splits the all-to-all waits for, a second input (the dispatch's).
  auto a2a = [this, ep, D, bpe, dt](const Name& w, const char* what, TensorId in, const Shape& out, int64_t rows_moved,
                                    TensorRole role, TensorId sized_by = -1) {
    const int64_t bytes = checked_mul({int64_t{ep}, rows_moved, D, bpe}, "all-to-all bytes");
    const TensorId y = e.tensor(e.cat(w.rel, what), out, dt, Placement::R(), role, out);
    std::vector<TensorId> inputs{in};
    if (sized_by >= 0) inputs.push_back(sized_by);
    e.op(w.rel, e.cat(w.rel, what), CollectiveOp{CollectiveKind::all_to_all, Group::ep, ReduceOp::sum, dt, bytes},
         std::move(inputs), {y});
    return y;
  };

  // ---- Router ----
  const TensorId gate_w = parameter(router, "gate.weight", {E, D}, -1);
  const TensorId logits = tensor(router, ".logits", {T, E}, DType::fp32);
  GemmOp gate{T, E, D, DType::fp32, DType::fp32, DType::fp32, false, true};
  e.op(router.rel, e.cat(router.rel, ".gate.fwd"), gate, {x_routed.t, gate_w}, {logits});
  const TensorId scores = tensor(router, ".scores", {T, K}, DType::fp32);
  const TensorId ids = tensor(router, ".expert_ids", {T, K}, DType::fp32);
  const TensorId counts = tensor(router, ".tokens_per_expert", {E}, DType::fp32);
  // The aux-loss-free balancing's buffer (MoE.expert_bias_E, fp32, replicated): added to the scores for the choice.
  const TensorId bias = tensor(router, ".expert_bias", {E}, DType::fp32, TensorRole::scale);
  router_buffers = {counts, bias};
  // Reads the logits (score function) and the bias, writes and reads the scores (top-k), writes the top-k scores and
  // ids (8 B ids) and the histogram.
  ew(router, ".route", ElementwiseOp::Fn::moe_router, checked_mul({3, T, E, 4}, "router bytes") + T * K * 12 + E * 12,
     5 * T * E, {logits, bias}, {scores, ids, counts});

  // ---- Dispatch ----
  const TensorId copies = tensor(routed, ".reordered", {N, D}, dt);
  ew(routed, ".reorder", ElementwiseOp::Fn::moe_permute, 2 * N * D * bpe + N * 8, 0, {x_routed.t, ids}, {copies});
  TensorId expert_in = copies;
  if (ep_on) {
    const TensorId counts_x =
        e.tensor(e.cat(routed.rel, ".counts_exchanged"), {E}, DType::fp32, Placement::R(), TensorRole::activation, {E});
    e.op(routed.rel, e.cat(routed.rel, ".counts.all_to_all"),
         CollectiveOp{CollectiveKind::all_to_all, Group::ep, ReduceOp::sum, DType::fp32, int64_t{ep} * E * 8}, {counts},
         {counts_x});
    const TensorId splits = tensor(routed, ".splits", {2 * int64_t{ep}}, DType::fp32);
    ew(routed, ".counts.tolist", ElementwiseOp::Fn::host_sync, E * 8, 0, {counts_x}, {splits});
    // (its splits an input of the op: not pushed onto seg().ops.back(), which in a recycled Program is another op)
    const TensorId recv =
        a2a(routed, ".dispatch.all_to_all", copies, {received, D}, received, TensorRole::activation, splits);
    expert_in = tensor(routed, ".permuted", {rows, D}, dt);
    ew(routed, ".permute", ElementwiseOp::Fn::moe_permute, (received + rows) * D * bpe, 0, {recv}, {expert_in});
  } else if (rows != N) {
    // Local dispatch: the groups padded (float8) or the busiest group's rows over the mean (imbalance).
    const TensorId padded = tensor(routed, ".permuted", {rows, D}, dt);
    ew(routed, ".permute", ElementwiseOp::Fn::moe_permute, (N + rows) * D * bpe, 0, {copies}, {padded});
    expert_in = padded;
  }

  // ---- Grouped GEMMs ----
  // EP on: whole experts per ep rank (Shard(0) on ep), not TP-sharded; EP off with TP: w1/w3 Shard(1), w2 Shard(2).
  auto expert_weight = [&](const char* pname, const Shape& full, int tp_dim) {
    Shape local = full;
    local[0] = e_local;
    if (tp_experts) local[static_cast<size_t>(tp_dim)] /= tp;
    const Placement pl = tp_experts ? Placement::S(tp_dim) : Placement::R();
    const TensorId w = e.tensor(e.cat(routed.rel, ".") + pname, local, dt, pl, TensorRole::parameter, full);
    auto& d = e.prog.tensors[static_cast<size_t>(w)];
    d.param = d.name;
    d.param_shard_dim = tp_experts ? tp_dim : -1;
    d.expert = true;
    params.push_back(w);
    return w;
  };
  const TensorId w1 = expert_weight("w1", {E, F, D}, 1), w3 = expert_weight("w3", {E, F, D}, 1),
                 w2 = expert_weight("w2", {E, D, F}, 2);
  auto grouped = [&](const char* what, TensorId a, TensorId w, int64_t n_out, int64_t k_in) {
    GemmOp g{m_rows, n_out, k_in, mm_in, mm_in, dt, false, true};
    g.groups = e_local;
    const TensorId y = tensor(routed, what, {rows, n_out}, dt);
    e.op(routed.rel, e.cat(routed.rel, what), g, {a, w}, {y});
    return y;
  };
  const TensorId h1 = grouped(".w1.fwd", expert_in, w1, f_local, D);
  const TensorId h3 = grouped(".w3.fwd", expert_in, w3, f_local, D);
  const TensorId act_h = tensor(routed, ".swiglu", {rows, f_local}, dt);
  ew(routed, ".swiglu", ElementwiseOp::Fn::swiglu, 3 * rows * f_local * bpe, 6 * rows * f_local, {h1, h3}, {act_h});
  const TensorId expert_out = grouped(".w2.fwd", act_h, w2, D, f_local);

  // ---- Combine ----
  TensorId back = expert_out;
  if (ep_on) {
    const TensorId unperm = tensor(routed, ".unpermuted", {received, D}, dt);
    ew(routed, ".unpermute", ElementwiseOp::Fn::moe_unpermute, (rows + received) * D * bpe, 0, {expert_out}, {unperm});
    back = a2a(routed, ".combine.all_to_all", unperm, {N, D}, received, TensorRole::activation);
  } else if (rows != N) {
    back = tensor(routed, ".unpermuted", {N, D}, dt);
    ew(routed, ".unpermute", ElementwiseOp::Fn::moe_unpermute, (rows + N) * D * bpe, 0, {expert_out}, {back});
  }
  const Placement routed_pl = tp_experts ? Placement::P() : ep_on && tp > 1 ? Placement::S(1) : Placement::R();
  const Shape routed_global = ep_on && tp > 1 ? Shape{rl[0], rl[1] * tp, D} : rl;
  const TensorId routed_y = e.tensor(e.cat(routed.rel, ".out"), rl, dt, tp > 1 ? routed_pl : Placement::R(),
                                     TensorRole::activation, tp > 1 ? routed_global : rl);
  ew(routed, ".combine", ElementwiseOp::Fn::moe_combine, (N * D + 2 * T * D) * bpe + N * 4, 2 * N * D, {back, scores},
     {routed_y});
  // Under TP a DTensor of its placement (S(1) with EP on, Partial over tp with TP-sharded experts); its gradient is
  // brought to what the backward needs: the local tokens' (S(1)), or every token's (R) for a Partial output.
  const Value routed_v = tp > 1 ? e.dtensor(routed_y, routed_pl) : e.plain(routed_y, routed_pl);
  const Placement routed_grad_pl = routed_pl.is_partial() ? Placement::R() : routed_pl;

  // The routed path's backward, in one closure (its ops mirror the forward's in reverse).
  e.record([=, this]() {
    auto gy = e.grad(routed_v);
    if (!gy) return;
    if (gy->dtensor && !gy->pl.same_as(routed_grad_pl, 3))
      gy = e.redistribute_raw(*gy, routed_grad_pl, routed.rel, "bwd");
    const TensorId d_back = tensor(routed, ".combine.grad_rows", {N, D}, dt, TensorRole::gradient);
    const TensorId d_scores = tensor(router, ".scores.grad", {T, K}, DType::fp32, TensorRole::gradient);
    ew(routed, ".combine_bwd", ElementwiseOp::Fn::moe_combine_bwd, (T * D + 2 * N * D) * bpe + 2 * N * 4, 4 * N * D,
       {gy->t, back, scores}, {d_back, d_scores});
    TensorId d_out = d_back;
    if (ep_on) {
      const TensorId d_unperm =
          a2a(routed, ".combine.all_to_all_bwd", d_back, {received, D}, received, TensorRole::gradient);
      d_out = tensor(routed, ".unpermute.grad", {rows, D}, dt, TensorRole::gradient);
      ew(routed, ".unpermute_bwd", ElementwiseOp::Fn::moe_permute, (rows + received) * D * bpe, 0, {d_unperm}, {d_out});
    } else if (rows != N) {
      d_out = tensor(routed, ".unpermute.grad", {rows, D}, dt, TensorRole::gradient);
      ew(routed, ".unpermute_bwd", ElementwiseOp::Fn::moe_permute, (rows + N) * D * bpe, 0, {d_back}, {d_out});
    }
    // Grouped GEMM backward: d input = dY W per group; d weight = groups products of (n_out, rows) x (rows, k_in).
    auto grouped_bwd = [&](const char* what, TensorId dy, TensorId a, TensorId w, int64_t n_out, int64_t k_in,
                           TensorId& dw) {
      GemmOp gi{m_rows, k_in, n_out, mm_in, mm_in, dt, false, false};
      gi.groups = e_local;
      const TensorId dx =
          tensor(routed, fmt::format("{}.grad_input", what).c_str(), {rows, k_in}, dt, TensorRole::gradient);
      e.op(routed.rel, e.cat(routed.rel, (std::string(what) + ".bwd_input").c_str()), gi, {dy, w}, {dx});
      GemmOp gw{n_out, k_in, m_rows, mm_in, mm_in, dt, true, false};
      gw.groups = e_local;
      const TensorDesc wd = e.desc(w);
      dw = e.tensor(e.cat(routed.rel, (std::string(what) + ".weight.grad").c_str()), wd.local_shape, dt, wd.placement,
                    TensorRole::gradient, wd.global_shape);
      e.op(routed.rel, e.cat(routed.rel, (std::string(what) + ".bwd_weight").c_str()), gw, {dy, a}, {dw});
      return dx;
    };
    TensorId dw1 = -1, dw2 = -1, dw3 = -1;
    const TensorId d_act = grouped_bwd(".w2", d_out, act_h, w2, D, f_local, dw2);
    const TensorId d_h1 = tensor(routed, ".swiglu.grad_a", {rows, f_local}, dt, TensorRole::gradient);
    const TensorId d_h3 = tensor(routed, ".swiglu.grad_b", {rows, f_local}, dt, TensorRole::gradient);
    ew(routed, ".swiglu_bwd", ElementwiseOp::Fn::swiglu_bwd, 5 * rows * f_local * bpe, 10 * rows * f_local,
       {h1, h3, d_act}, {d_h1, d_h3});
    const TensorId d_in1 = grouped_bwd(".w1", d_h1, expert_in, w1, f_local, D, dw1);
    const TensorId d_in3 = grouped_bwd(".w3", d_h3, expert_in, w3, f_local, D, dw3);
    e.op(routed.rel, e.cat(routed.rel, ".grad_input.accumulate"),
         ElementwiseOp{ElementwiseOp::Fn::accumulate, 3 * rows * D * bpe, rows * D}, {d_in3, d_in1}, {d_in1});
    for (auto [w, dw] : {std::pair{w1, dw1}, std::pair{w2, dw2}, std::pair{w3, dw3}}) {
      finish_param_grad(routed, w, dw, false);
      e.prog.tensors[static_cast<size_t>(dw)].expert = true;
    }
    TensorId d_copies = d_in1;
    if (ep_on) {
      const TensorId d_recv = tensor(routed, ".permute.grad", {received, D}, dt, TensorRole::gradient);
      ew(routed, ".permute_bwd", ElementwiseOp::Fn::moe_unpermute, (rows + received) * D * bpe, 0, {d_in1}, {d_recv});
      d_copies = a2a(routed, ".dispatch.all_to_all_bwd", d_recv, {N, D}, received, TensorRole::gradient);
    } else if (rows != N) {
      d_copies = tensor(routed, ".permute.grad", {N, D}, dt, TensorRole::gradient);
      ew(routed, ".permute_bwd", ElementwiseOp::Fn::moe_unpermute, (rows + N) * D * bpe, 0, {d_in1}, {d_copies});
    }
    // The reorder's backward: the N copies' gradients scatter-added into their T tokens.
    const TensorId dx_reorder = tensor(routed, ".reorder.grad", rl, dt, TensorRole::gradient);
    ew(routed, ".reorder_bwd", ElementwiseOp::Fn::moe_unpermute, (N * D + 2 * T * D) * bpe + N * 8, N * D,
       {d_copies, ids}, {dx_reorder});
    // The router's backward: the scores' gradient through top-k and the score function, then the gate GEMM's.
    const TensorId d_logits = tensor(router, ".logits.grad", {T, E}, DType::fp32, TensorRole::gradient);
    // EP off with TP: each rank's rows are its ffn shard's share of every expert's output, so the scores' gradient
    // (rows . dy) is a partial sum over tp, which DTensor all-reduces before the replicated router reads it (tp-run
    // verify fails without it: every gradient upstream of the router differs).
    TensorId d_scores_all = d_scores;
    if (tp_experts)
      d_scores_all = e.redistribute_raw(e.dtensor(d_scores, Placement::P()), Placement::R(), router.rel, "bwd").t;
    ew(router, ".route_bwd", ElementwiseOp::Fn::moe_router_bwd, 2 * T * E * 4 + T * K * 12, 4 * T * E,
       {logits, d_scores_all}, {d_logits});
    GemmOp gi{T, D, E, DType::fp32, DType::fp32, dt, false, false};
    const TensorId dx_router = tensor(router, ".gate.grad_input", rl, dt, TensorRole::gradient);
    e.op(router.rel, e.cat(router.rel, ".gate.bwd_input"), gi, {d_logits, gate_w}, {dx_router});
    GemmOp gw{E, D, T, DType::fp32, DType::fp32, dt, true, false};
    const TensorId d_gate = tensor(router, ".gate.weight.grad", {E, D}, dt, TensorRole::gradient);
    e.op(router.rel, e.cat(router.rel, ".gate.bwd_weight"), gw, {d_logits, x_routed.t}, {d_gate});
    // The gate is replicated; with EP on and TP its tokens are sequence-sharded over tp: a partial sum over tp.
    finish_param_grad(child(router, "gate"), gate_w, d_gate, ep_on && tp > 1);
    // EP off with TP: the TP-sharded experts' input gradient is a partial sum over tp, the router's is whole on every
    // rank; DTensor all-reduces the partial one before the two are summed.
    TensorId dx_experts = dx_reorder;
    if (tp_experts)  // (raw: no autograd is recorded while the tape replays)
      dx_experts = e.redistribute_raw(e.dtensor(dx_reorder, Placement::P()), Placement::R(), routed.rel, "bwd").t;
    e.add_grad(x_routed, e.plain(dx_experts, x_routed.pl), routed.rel);
    e.add_grad(x_routed, e.plain(dx_router, x_routed.pl), router.rel);
  });

  // ---- Shared expert (and Qwen2-MoE's gate on it) ----
  Value out_v = routed_v;
  if (spec.shared_ffn_dim > 0) {
    const int64_t fs = spec.shared_ffn_dim;
    Value x_rep = x;  // (a DTensor under TP: its input gradient is each rank's partial sum)
    if (tp > 1 && !x.pl.is_replicate()) x_rep = e.redistribute(x, Placement::R(), n.rel);
    const bool rep_is_input = x_rep.node == x.node;
    const Shape sl = e.shape(x_rep);
    const int64_t Ts = sl[0] * sl[1], fs_local = tp > 1 ? fs / tp : fs;
    const Name sw1 = child(shared, "w1"), sw2 = child(shared, "w2"), sw3 = child(shared, "w3");
    const TensorId p1 = parameter(sw1, "weight", {fs, D}, tp > 1 ? 0 : -1);
    const TensorId p3 = parameter(sw3, "weight", {fs, D}, tp > 1 ? 0 : -1);
    const TensorId p2 = parameter(sw2, "weight", {D, fs}, tp > 1 ? 1 : -1);
    auto mm = [&](const Name& w, TensorId a, TensorId wt, int64_t n_out, int64_t k_in, const Shape& out) {
      GemmOp g{Ts, n_out, k_in, mm_in, mm_in, dt, false, true};
      const TensorId y = tensor(w, ".out", out, dt);
      e.op(w.rel, e.cat(w.rel, ".fwd"), g, {a, wt}, {y});
      return y;
    };
    const TensorId s1 = mm(sw1, x_rep.t, p1, fs_local, D, {sl[0], sl[1], fs_local});
    const TensorId s3 = mm(sw3, x_rep.t, p3, fs_local, D, {sl[0], sl[1], fs_local});
    const TensorId sa = tensor(shared, ".swiglu", {sl[0], sl[1], fs_local}, dt);
    ew(shared, ".swiglu", ElementwiseOp::Fn::swiglu, 3 * Ts * fs_local * bpe, 6 * Ts * fs_local, {s1, s3}, {sa});
    TensorId so = mm(sw2, sa, p2, D, fs_local, sl);
    const Name sg = child(n, "shared_gate");
    TensorId gate_p = -1, gate_logit = -1, so_ungated = so;
    if (spec.shared_gate) {
      gate_p = parameter(sg, "weight", {1, D}, -1);
      gate_logit = tensor(sg, ".out", {sl[0], sl[1], 1}, dt);
      e.op(sg.rel, e.cat(sg.rel, ".fwd"), GemmOp{Ts, 1, D, dt, dt, dt, false, true}, {x_rep.t, gate_p}, {gate_logit});
      so = tensor(shared, ".gated", sl, dt);
      ew(shared, ".gate_mul", ElementwiseOp::Fn::gate_mul, 2 * Ts * D * bpe + Ts * bpe, 4 * Ts * D,
         {so_ungated, gate_logit}, {so});
    }
    // (Partial over tp under TP: each rank's share of the rowwise w2; its gradient is every token's, R)
    const Value shared_v = tp > 1 ? e.dtensor(so, Placement::P()) : e.plain(so);
    e.record([=, this]() {
      auto gy = e.grad(shared_v);
      if (!gy) return;
      if (gy->dtensor && !gy->pl.is_replicate()) gy = e.redistribute_raw(*gy, Placement::R(), shared.rel, "bwd");
      // The input gradient of the colwise w1/w3 is a partial sum over tp: x_rep's redistribution reduces it (to the
      // block's S(1)); when the block's input is replicated already (no redistribution), DTensor all-reduces it before
      // it is summed with the routed path's.
      auto in_grad = [&](TensorId g) {
        if (tp == 1) return e.plain(g);
        const Value p = e.dtensor(g, Placement::P());
        return rep_is_input ? e.redistribute_raw(p, Placement::R(), shared.rel, "bwd") : p;
      };
      TensorId d_so = gy->t;
      if (spec.shared_gate) {
        d_so = tensor(shared, ".gated.grad", sl, dt, TensorRole::gradient);
        const TensorId d_gl = tensor(sg, ".out.grad", {sl[0], sl[1], 1}, dt, TensorRole::gradient);
        ew(shared, ".gate_mul_bwd", ElementwiseOp::Fn::gate_mul_bwd, 3 * Ts * D * bpe + 2 * Ts * bpe, 6 * Ts * D,
           {so_ungated, gate_logit, gy->t}, {d_so, d_gl});
        const TensorId dxg = tensor(sg, ".grad_input", sl, dt, TensorRole::gradient);
        e.op(sg.rel, e.cat(sg.rel, ".bwd_input"), GemmOp{Ts, D, 1, dt, dt, dt, false, false}, {d_gl, gate_p}, {dxg});
        const TensorId dgw = tensor(sg, ".weight.grad", {1, D}, dt, TensorRole::gradient);
        e.op(sg.rel, e.cat(sg.rel, ".bwd_weight"), GemmOp{1, D, Ts, dt, dt, dt, true, false}, {d_gl, x_rep.t}, {dgw});
        // (the gate's output is a Partial sum of the shared expert's: its gradient is each rank's share)
        finish_param_grad(sg, gate_p, dgw, tp > 1);
        e.add_grad(x_rep, in_grad(dxg), sg.rel);
      }
      auto mm_bwd = [&](const Name& w, TensorId dy, TensorId a, TensorId wt, int64_t n_out, int64_t k_in,
                        const Shape& in_shape) {
        const TensorId dx = tensor(w, ".grad_input", in_shape, dt, TensorRole::gradient);
        e.op(w.rel, e.cat(w.rel, ".bwd_input"), GemmOp{Ts, k_in, n_out, mm_in, mm_in, dt, false, false}, {dy, wt},
             {dx});
        const TensorDesc wd = e.desc(wt);
        const TensorId dw = e.tensor(e.cat(w.rel, ".weight.grad"), wd.local_shape, dt, wd.placement,
                                     TensorRole::gradient, wd.global_shape);
        e.op(w.rel, e.cat(w.rel, ".bwd_weight"), GemmOp{n_out, k_in, Ts, mm_in, mm_in, dt, true, false}, {dy, a}, {dw});
        finish_param_grad(w, wt, dw, false);
        return dx;
      };
      const TensorId d_sa = mm_bwd(sw2, d_so, sa, p2, D, fs_local, {sl[0], sl[1], fs_local});
      const TensorId d1 = tensor(shared, ".swiglu.grad_a", {sl[0], sl[1], fs_local}, dt, TensorRole::gradient);
      const TensorId d3 = tensor(shared, ".swiglu.grad_b", {sl[0], sl[1], fs_local}, dt, TensorRole::gradient);
      ew(shared, ".swiglu_bwd", ElementwiseOp::Fn::swiglu_bwd, 5 * Ts * fs_local * bpe, 10 * Ts * fs_local,
         {s1, s3, d_sa}, {d1, d3});
      const TensorId dx1 = mm_bwd(sw1, d1, x_rep.t, p1, fs_local, D, sl);
      const TensorId dx3 = mm_bwd(sw3, d3, x_rep.t, p3, fs_local, D, sl);
      // Colwise: each rank's input gradient is a partial sum over tp, which x_rep's redistribution reduces.
      e.add_grad(x_rep, in_grad(dx1), sw1.rel);
      e.add_grad(x_rep, in_grad(dx3), sw3.rel);
    });
    // The shared expert's Partial output reduced to the routed output's layout (with EP on), then the sum.
    Value sd = shared_v;
    if (tp > 1 && !routed_pl.is_partial()) sd = e.redistribute(sd, routed_pl, n.rel);
    out_v = add(n, routed_v, sd);
  }
  // ---- Exit: back to the block's layout (the SP region's reduce-scatter or all-gather) ----
  if (tp > 1) {
    if (!out_v.pl.same_as(out_pl, 3)) out_v = e.redistribute(out_v, out_pl, n.rel);
    if (!x_in.dtensor) out_v = e.to_local(out_v);
  }
  return out_v;
}

}  // namespace tptune::lowering
