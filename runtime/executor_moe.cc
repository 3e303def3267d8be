// Executor: a mixture of experts' ops (plans/lower/experts.cc; torchtitan 0.3.0 models/common/moe.py and
// token_dispatcher.py): the router and its backward, the dispatcher's permutations, the combine, the grouped GEMMs
// and the expert-parallel exchanges. See "Mixture of experts" in runtime/executor.h.
//
// Layouts. The routed copies of T tokens are N = T x top_k rows, copy c = token t's k-th choice (c = t K + k). The
// reorder sorts them by expert, stable (token order within an expert): position p holds copy order[p], so the rows of
// ep peer j's experts are one run. After the dispatch a rank holds its received rows rank-major (source rank i's rows,
// each source's in its local-expert order), the permute makes them expert-major (local expert e's rows from every
// source in source order): the grouped GEMMs' groups. The unpermute and the combine exchange go back the same way.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "plans/util/error.h"
#include "runtime/executor.h"

namespace tptune {

std::vector<float> Executor::download_n(int t, int64_t n) const {
  std::vector<float> v(static_cast<size_t>(n));
  be_.download(v.data(), ptr(t), n);
  return v;
}

void Executor::upload_n(int t, const std::vector<float>& v) {
  be_.upload(ptr(t), v.data(), static_cast<int64_t>(v.size()));
}

void Executor::moe_setup() {
  moe_rows_dynamic_.assign(program_.tensors.size(), 0);
  if (program_.model.moe.experts <= 0) return;
  using F = ElementwiseOp::Fn;
  int64_t copies = 0;
  for (const Segment& s : program_.segments)
    for (const Op& op : s.ops)
      if (const auto* e = std::get_if<ElementwiseOp>(&op.kind); e && e->fn == F::moe_router && !op.outputs.empty())
        copies = numel(program_.tensor(op.outputs[0]).local_shape);
  if (program_.ep <= 1) return;
  // The received rows: the dispatch's output (and the combine backward's), and every tensor computed from them but the
  // weight gradients; the exchange back (its input dynamic) returns a rank's own N copies.
  auto dyn = [this](TensorId t) { return moe_rows_dynamic_[size_t(t)] != 0; };
  for (const Segment& s : program_.segments)
    for (const Op& op : s.ops) {
      const auto* c = std::get_if<CollectiveOp>(&op.kind);
      if (c && c->group == Group::ep && c->kind == CollectiveKind::all_to_all) {
        if (op.outputs.size() == 1 && program_.tensor(op.outputs[0]).local_shape.size() == 2 && !dyn(op.inputs.at(0)))
          moe_rows_dynamic_[size_t(op.outputs[0])] = 1;
        continue;
      }
      if (c) continue;
      if (const auto* g = std::get_if<GemmOp>(&op.kind); g && g->trans_a) continue;
      // The combine and the reorder's backward write the T tokens, whatever rows they read.
      if (const auto* e = std::get_if<ElementwiseOp>(&op.kind);
          e && (e->fn == F::moe_combine || e->fn == F::moe_combine_bwd || op.inputs.size() > 1) && e->fn != F::swiglu &&
          e->fn != F::swiglu_bwd && e->fn != F::accumulate)
        continue;
      if (std::any_of(op.inputs.begin(), op.inputs.end(), dyn))
        for (TensorId t : op.outputs) moe_rows_dynamic_[size_t(t)] = 1;
    }
  // At most every copy of every peer comes to one rank.
  const int64_t capacity = copies * program_.ep;
  for (size_t t = 0; t < program_.tensors.size(); ++t) {
    if (!moe_rows_dynamic_[t]) continue;
    Shape& s = program_.tensors[t].local_shape;
    if (s.size() != 2) throw Error(fmt::format("executor: routed rows '{}' are not 2-D", program_.tensors[t].name));
    s[0] = std::max(s[0], capacity);
  }
}

Executor::MoeRouting& Executor::moe_routing(int index) { return moe_[flat_.ops[size_t(index)].layer]; }

namespace {

int64_t last_dim_of(const TensorDesc& d) { return d.local_shape.empty() ? 1 : d.local_shape.back(); }

// Expert-major position of each rank-major row: rows from source i for local expert e (recv[i E_l + e]).
std::vector<int64_t> rank_to_expert_major(const std::vector<int64_t>& recv, int64_t sources, int64_t local_experts) {
  std::vector<int64_t> rank_off(static_cast<size_t>(sources * local_experts)),
      expert_off(static_cast<size_t>(sources * local_experts));
  int64_t at = 0;
  for (int64_t i = 0; i < sources; ++i)
    for (int64_t e = 0; e < local_experts; ++e)
      rank_off[size_t(i * local_experts + e)] = at, at += recv[size_t(i * local_experts + e)];
  at = 0;
  for (int64_t e = 0; e < local_experts; ++e)
    for (int64_t i = 0; i < sources; ++i)
      expert_off[size_t(i * local_experts + e)] = at, at += recv[size_t(i * local_experts + e)];
  std::vector<int64_t> to(static_cast<size_t>(at));
  for (size_t b = 0; b < recv.size(); ++b)
    for (int64_t r = 0; r < recv[b]; ++r) to[size_t(rank_off[b] + r)] = expert_off[b] + r;
  return to;
}

}  // namespace

void Executor::run_moe(int index, const ElementwiseOp& e) {
  const FlatOp& op = flat_.ops[size_t(index)];
  using F = ElementwiseOp::Fn;
  const MoeSpec& spec = program_.model.moe;
  const int64_t E = spec.experts, K = spec.top_k, ep = program_.ep, EL = E / std::max<int64_t>(ep, 1);
  auto n_of = [&](int t) { return numel(desc(t).local_shape); };
  auto need = [&](size_t ins, size_t outs) {
    if (op.inputs.size() != ins || op.outputs.size() != outs)
      fail(op, fmt::format("{} expects {} inputs and {} outputs, the op has {} and {}", to_string(e.fn), ins, outs,
                           op.inputs.size(), op.outputs.size()));
  };
  MoeRouting& r = moe_routing(index);
  // Scores of every expert from the logits (T, E): softmax or sigmoid (TokenChoiceTopKRouter, fp32).
  auto score = [&](const std::vector<float>& logits, int64_t t, std::vector<double>& s) {
    const float* l = logits.data() + t * E;
    s.assign(size_t(E), 0.0);
    if (spec.score == RouterScore::sigmoid) {
      for (int64_t x = 0; x < E; ++x) s[size_t(x)] = 1.0 / (1.0 + std::exp(-double(l[x])));
      return;
    }
    const double mx = *std::max_element(l, l + E);
    double sum = 0;
    for (int64_t x = 0; x < E; ++x) sum += s[size_t(x)] = std::exp(double(l[x]) - mx);
    for (auto& v : s) v /= sum;
  };
  switch (e.fn) {
    case F::moe_router: {
      need(2, 3);
      const int64_t T = n_of(op.inputs[0]) / E;
      if (T * E != n_of(op.inputs[0]) || n_of(op.inputs[1]) != E || n_of(op.outputs[0]) != T * K ||
          n_of(op.outputs[2]) != E)
        fail(op, "the router's logits, expert_bias, scores and counts do not match the model's experts and top_k");
      const std::vector<float> logits = download_n(op.inputs[0], T * E), bias = download_n(op.inputs[1], E);
      std::vector<float> scores(static_cast<size_t>(T * K)), ids(static_cast<size_t>(T * K)),
          counts(static_cast<size_t>(E), 0.0f);
      std::vector<double> s;
      std::vector<int64_t> idx(static_cast<size_t>(E));
      for (int64_t t = 0; t < T; ++t) {
        score(logits, t, s);
        // The choice: the scores plus expert_bias (fp32, as torch adds them; for the choice only). Node-limited routing
        // keeps the limited_groups groups of the largest top-2 sums. Ties go to the lower expert id, the same on every
        // rank.
        std::vector<double> choice(static_cast<size_t>(E));
        for (int64_t x = 0; x < E; ++x) choice[size_t(x)] = double(float(s[size_t(x)]) + bias[size_t(x)]);
        if (spec.expert_groups > 0 && spec.limited_groups > 0 && spec.limited_groups < spec.expert_groups) {
          const int64_t G = spec.expert_groups, per = E / G;
          std::vector<std::pair<double, int64_t>> gs;
          for (int64_t g = 0; g < G; ++g) {
            std::vector<double> v(choice.begin() + g * per, choice.begin() + (g + 1) * per);
            std::sort(v.rbegin(), v.rend());
            gs.push_back({-(v[0] + (per > 1 ? v[1] : 0.0)), g});
          }
          std::sort(gs.begin(), gs.end());
          std::vector<char> keep(static_cast<size_t>(G), 0);
          for (int64_t g = 0; g < spec.limited_groups; ++g) keep[size_t(gs[size_t(g)].second)] = 1;
          for (int64_t x = 0; x < E; ++x)
            if (!keep[size_t(x / per)]) choice[size_t(x)] = -INFINITY;
        }
        std::iota(idx.begin(), idx.end(), 0);
        std::stable_sort(idx.begin(), idx.end(),
                         [&](int64_t a, int64_t b) { return choice[size_t(a)] > choice[size_t(b)]; });
        double sum = 0;
        for (int64_t k = 0; k < K; ++k) sum += s[size_t(idx[size_t(k)])];
        for (int64_t k = 0; k < K; ++k) {
          double v = s[size_t(idx[size_t(k)])];
          if (spec.route_norm) v /= sum + 1e-20;
          scores[size_t(t * K + k)] = float(v * spec.route_scale);
          ids[size_t(t * K + k)] = float(idx[size_t(k)]);
          counts[size_t(idx[size_t(k)])] += 1.0f;
        }
      }
      upload_n(op.outputs[0], scores);
      upload_n(op.outputs[1], ids);
      upload_n(op.outputs[2], counts);
      r.ids.resize(ids.size());
      for (size_t c = 0; c < ids.size(); ++c) r.ids[c] = int64_t(ids[c]);
      r.send.assign(size_t(std::max<int64_t>(ep, 1)), 0);
      r.group_rows.assign(size_t(EL), 0);
      for (int64_t x = 0; x < E; ++x) r.send[size_t(x / EL)] += int64_t(counts[size_t(x)]);
      if (ep <= 1)
        for (int64_t x = 0; x < E; ++x) r.group_rows[size_t(x)] = int64_t(counts[size_t(x)]);
      return;
    }
    case F::moe_router_bwd: {
      need(2, 1);
      const int64_t T = n_of(op.inputs[0]) / E;
      const std::vector<float> logits = download_n(op.inputs[0], T * E), ds = download_n(op.inputs[1], T * K);
      if (int64_t(r.ids.size()) != T * K) fail(op, "runs before its router");
      const std::vector<int64_t>& chosen = r.ids;
      std::vector<float> dl(static_cast<size_t>(T * E), 0.0f);
      std::vector<double> s, dsc(static_cast<size_t>(E));
      for (int64_t t = 0; t < T; ++t) {
        score(logits, t, s);
        double sum = 0;
        for (int64_t k = 0; k < K; ++k) sum += s[size_t(chosen[size_t(t * K + k)])];
        const double den = sum + 1e-20;
        double dot = 0;  // route_norm: sum_k dq_k p_k
        for (int64_t k = 0; k < K; ++k)
          dot += double(ds[size_t(t * K + k)]) * spec.route_scale * s[size_t(chosen[size_t(t * K + k)])];
        std::fill(dsc.begin(), dsc.end(), 0.0);
        for (int64_t k = 0; k < K; ++k) {
          const double dq = double(ds[size_t(t * K + k)]) * spec.route_scale;
          dsc[size_t(chosen[size_t(t * K + k)])] += spec.route_norm ? dq / den - dot / (den * den) : dq;
        }
        if (spec.score == RouterScore::sigmoid) {
          for (int64_t x = 0; x < E; ++x)
            dl[size_t(t * E + x)] = float(dsc[size_t(x)] * s[size_t(x)] * (1 - s[size_t(x)]));
        } else {
          double sd = 0;
          for (int64_t x = 0; x < E; ++x) sd += dsc[size_t(x)] * s[size_t(x)];
          for (int64_t x = 0; x < E; ++x) dl[size_t(t * E + x)] = float(s[size_t(x)] * (dsc[size_t(x)] - sd));
        }
      }
      upload_n(op.outputs[0], dl);
      return;
    }
    case F::host_sync: {
      // {counts exchanged} -> {splits}: rows to each peer (from this rank's counts), rows from each peer.
      need(1, 1);
      if (ep <= 1 || n_of(op.inputs[0]) != E || n_of(op.outputs[0]) != 2 * ep)
        fail(op, "the exchanged counts and the splits do not match the experts and the ep group");
      const std::vector<float> cx = download_n(op.inputs[0], E);
      r.recv.assign(size_t(E), 0);
      r.group_rows.assign(size_t(EL), 0);
      std::vector<float> splits(static_cast<size_t>(2 * ep), 0.0f);
      for (int64_t i = 0; i < ep; ++i) splits[size_t(i)] = float(r.send.at(size_t(i)));
      for (int64_t x = 0; x < E; ++x) {
        r.recv[size_t(x)] = int64_t(cx[size_t(x)]);
        r.group_rows[size_t(x % EL)] += r.recv[size_t(x)];
        splits[size_t(ep + x / EL)] += cx[size_t(x)];
      }
      upload_n(op.outputs[0], splits);
      return;
    }
    case F::moe_permute:
    case F::moe_unpermute: {
      const int t_out = op.outputs.at(0);
      const int64_t D = last_dim_of(desc(t_out));
      if (op.inputs.size() == 2 && e.fn == F::moe_permute) {
        // The reorder {x (T, D), ids (T, K)} -> copies (N, D): expert-sorted, stable.
        need(2, 1);
        const int64_t N = n_of(op.inputs[1]);
        const std::vector<float> ids = download_n(op.inputs[1], N), x = download_n(op.inputs[0], n_of(op.inputs[0]));
        r.order.resize(size_t(N));
        std::iota(r.order.begin(), r.order.end(), 0);
        std::stable_sort(r.order.begin(), r.order.end(),
                         [&](int64_t a, int64_t b) { return ids[size_t(a)] < ids[size_t(b)]; });
        if (int64_t(x.size()) != N / K * D || n_of(t_out) < N * D) fail(op, "the reorder's shapes do not match");
        std::vector<float> y(static_cast<size_t>(n_of(t_out)), 0.0f);
        for (int64_t p = 0; p < N; ++p) std::copy_n(x.begin() + (r.order[size_t(p)] / K) * D, D, y.begin() + p * D);
        upload_n(t_out, y);
        return;
      }
      if (op.inputs.size() == 2) {
        // The reorder's backward {d copies (N, D), ids} -> dx (T, D): each copy's gradient added into its token.
        need(2, 1);
        const int64_t N = int64_t(r.order.size());
        const std::vector<float> dc = download_n(op.inputs[0], N * D);
        std::vector<float> dx(static_cast<size_t>(n_of(t_out)), 0.0f);
        if (int64_t(dx.size()) != N / K * D) fail(op, "the reorder's backward shapes do not match");
        for (int64_t p = 0; p < N; ++p) {
          const int64_t t = r.order[size_t(p)] / K;
          for (int64_t d = 0; d < D; ++d) dx[size_t(t * D + d)] += dc[size_t(p * D + d)];
        }
        upload_n(t_out, dx);
        return;
      }
      need(1, 1);
      std::vector<float> y(static_cast<size_t>(n_of(t_out)), 0.0f);
      if (ep <= 1) {
        // One rank: the groups are the expert-sorted copies already; a copy into the padded rows or back.
        const int64_t rows = std::min(n_of(op.inputs[0]), n_of(t_out)) / D, N = int64_t(r.order.size());
        const std::vector<float> x = download_n(op.inputs[0], std::min(rows, N) * D);
        std::copy(x.begin(), x.end(), y.begin());
      } else {
        // Rank-major <-> expert-major (moe_permute: the dispatch's received rows into groups; moe_unpermute back).
        const std::vector<int64_t> to = rank_to_expert_major(r.recv, ep, EL);
        const int64_t R = int64_t(to.size());
        if (R * D > n_of(op.inputs[0]) || R * D > n_of(t_out)) fail(op, "more routed rows than the buffers hold");
        const std::vector<float> x = download_n(op.inputs[0], R * D);
        for (int64_t row = 0; row < R; ++row) {
          const int64_t from = e.fn == F::moe_permute ? row : to[size_t(row)];
          const int64_t dst = e.fn == F::moe_permute ? to[size_t(row)] : row;
          std::copy_n(x.begin() + from * D, D, y.begin() + dst * D);
        }
      }
      upload_n(t_out, y);
      return;
    }
    case F::moe_combine: {
      // {rows (N, D) expert-sorted, scores (T, K)} -> y (T, D) = sum_k score x its copy's row.
      need(2, 1);
      const int64_t N = int64_t(r.order.size()), T = N / std::max<int64_t>(K, 1), D = last_dim_of(desc(op.outputs[0]));
      if (n_of(op.inputs[1]) != N || n_of(op.outputs[0]) != T * D) fail(op, "the combine's shapes do not match");
      const std::vector<float> rows = download_n(op.inputs[0], N * D), sc = download_n(op.inputs[1], N);
      std::vector<double> acc(static_cast<size_t>(T * D), 0.0);
      for (int64_t p = 0; p < N; ++p) {
        const int64_t c = r.order[size_t(p)], t = c / K;
        for (int64_t d = 0; d < D; ++d) acc[size_t(t * D + d)] += double(sc[size_t(c)]) * rows[size_t(p * D + d)];
      }
      upload_n(op.outputs[0], std::vector<float>(acc.begin(), acc.end()));
      return;
    }
    case F::moe_combine_bwd: {
      // {dy (T, D), rows (N, D), scores (T, K)} -> {d rows, d scores}.
      need(3, 2);
      const int64_t N = int64_t(r.order.size()), T = N / std::max<int64_t>(K, 1), D = last_dim_of(desc(op.inputs[0]));
      if (n_of(op.inputs[0]) != T * D || n_of(op.inputs[2]) != N) fail(op, "the combine's shapes do not match");
      const std::vector<float> dy = download_n(op.inputs[0], T * D), rows = download_n(op.inputs[1], N * D),
                               sc = download_n(op.inputs[2], N);
      std::vector<float> drows(static_cast<size_t>(n_of(op.outputs[0])), 0.0f), dsc(static_cast<size_t>(N), 0.0f);
      for (int64_t p = 0; p < N; ++p) {
        const int64_t c = r.order[size_t(p)], t = c / K;
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) {
          drows[size_t(p * D + d)] = sc[size_t(c)] * dy[size_t(t * D + d)];
          dot += double(dy[size_t(t * D + d)]) * rows[size_t(p * D + d)];
        }
        dsc[size_t(c)] = float(dot);
      }
      upload_n(op.outputs[0], drows);
      upload_n(op.outputs[1], dsc);
      return;
    }
    case F::gate_mul:
    case F::gate_mul_bwd: {
      // Qwen2-MoE's shared-expert gate: y = a x sigmoid(g), g one value per token.
      const bool bwd = e.fn == F::gate_mul_bwd;
      need(bwd ? 3 : 2, bwd ? 2 : 1);
      const int64_t n = n_of(op.inputs[0]), T = n_of(op.inputs[1]), D = T > 0 ? n / T : 0;
      const std::vector<float> a = download_n(op.inputs[0], n), g = download_n(op.inputs[1], T);
      const std::vector<float> dy = bwd ? download_n(op.inputs[2], n) : std::vector<float>{};
      std::vector<float> y(static_cast<size_t>(n)), dg(static_cast<size_t>(T), 0.0f);
      for (int64_t t = 0; t < T; ++t) {
        const double sg = 1.0 / (1.0 + std::exp(-double(g[size_t(t)])));
        double acc = 0;
        for (int64_t d = 0; d < D; ++d) {
          const size_t i = size_t(t * D + d);
          y[i] = float(bwd ? dy[i] * sg : a[i] * sg);
          if (bwd) acc += double(dy[i]) * a[i];
        }
        dg[size_t(t)] = float(acc * sg * (1 - sg));
      }
      upload_n(op.outputs[0], y);
      if (bwd) upload_n(op.outputs[1], dg);
      return;
    }
    case F::moe_bias_update: {
      // _update_expert_bias on the summed histogram, in fp32 as torch computes it: delta = coeff x sign(mean - c),
      // expert_bias += delta - mean(delta).
      need(2, 1);
      if (n_of(op.inputs[0]) != E || n_of(op.inputs[1]) != E || op.outputs[0] != op.inputs[1])
        fail(op, "expects the summed tokens per expert and the expert_bias it updates in place, each of the experts");
      const std::vector<float> counts = download_n(op.inputs[0], E);
      std::vector<float> bias = download_n(op.inputs[1], E), delta(static_cast<size_t>(E));
      float mean = 0, delta_mean = 0;
      for (float c : counts) mean += c;
      mean /= float(E);
      const float coeff = float(spec.load_balance_coeff);
      for (int64_t x = 0; x < E; ++x) {
        const float d = mean - counts[size_t(x)];
        delta[size_t(x)] = coeff * float((d > 0) - (d < 0));
        delta_mean += delta[size_t(x)];
      }
      delta_mean /= float(E);
      for (int64_t x = 0; x < E; ++x) bias[size_t(x)] += delta[size_t(x)] - delta_mean;
      upload_n(op.outputs[0], bias);
      return;
    }
    default:
      break;
  }
  fail(op, fmt::format("{}: not run by the executor", to_string(e.fn)));
}

void Executor::run_grouped_gemm(int index, const GemmOp& g) {
  const FlatOp& op = flat_.ops[size_t(index)];
  if (op.inputs.size() != 2 || op.outputs.size() != 1) fail(op, "a grouped gemm reads {A, B} and writes one tensor");
  const MoeRouting& r = moe_routing(index);
  if (int64_t(r.group_rows.size()) != g.groups) fail(op, "runs before its router (no group sizes)");
  const DevPtr a = ptr(op.inputs[0]), b = ptr(op.inputs[1]), c = ptr(op.outputs[0]);
  const int64_t rows = std::accumulate(r.group_rows.begin(), r.group_rows.end(), int64_t{0});
  // Forward and input gradient: A (rows, k), B one (n, k) or (k, n) per group, C (rows, n). Weight gradient (trans_a):
  // A (rows, m), B (rows, n), C one (m, n) per group.
  const int64_t weight = g.trans_a ? g.m * g.n : g.n * g.k;
  const int64_t a_w = g.trans_a ? g.m : g.k, c_rows = g.trans_a ? g.groups * g.m : rows, c_w = g.n;
  const int t_w = g.trans_a ? op.outputs[0] : op.inputs[1];
  if (numel(desc(t_w).local_shape) != g.groups * weight || numel(desc(op.inputs[0]).local_shape) < rows * a_w ||
      numel(desc(op.outputs[0]).local_shape) < c_rows * c_w ||
      (g.trans_a && numel(desc(op.inputs[1]).local_shape) < rows * g.n))
    fail(op, fmt::format("operands do not hold {} groups of {} routed rows", g.groups, rows));
  if (!g.accumulate) be_.fill(c, numel(desc(op.outputs[0]).local_shape), 0.0f);
  int64_t at = 0;
  for (int64_t e = 0; e < g.groups; ++e) {
    const int64_t m_e = r.group_rows[size_t(e)];
    if (m_e > 0) {
      GemmArgs args;
      args.trans_a = g.trans_a, args.trans_b = g.trans_b, args.accumulate = g.accumulate;
      args.a_dtype = g.a_dtype, args.b_dtype = g.b_dtype;
      if (g.trans_a) {
        args.m = g.m, args.n = g.n, args.k = m_e;
        args.a = a.at(at * g.m), args.b = b.at(at * g.n), args.c = c.at(e * weight);
      } else {
        args.m = m_e, args.n = g.n, args.k = g.k;
        args.a = a.at(at * g.k), args.b = b.at(e * weight), args.c = c.at(at * g.n);
      }
      be_.gemm(args);
    }
    at += m_e;
  }
}

// The dispatch and combine exchanges (and their backward) on the ep group, and the counts exchange.
void Executor::issue_moe_exchange(int index, const CollectiveOp& /*c*/) {
  const FlatOp& op = flat_.ops[size_t(index)];
  if (op.inputs.empty() || op.outputs.size() != 1) fail(op, "an all-to-all reads one tensor and writes one");
  const int in = op.inputs[0], out = op.outputs[0];
  const int64_t ep = be_.group_size(Group::ep), E = program_.model.moe.experts;
  if (ep != program_.ep)
    fail(op, fmt::format("the Program is lowered for ep {} but the backend's ep group has {} ranks", program_.ep, ep));
  wait_conflicts({{in, -1}}, {{out, -1}});
  if (desc(out).local_shape.size() == 1) {  // the counts: E / ep to each peer
    if (numel(desc(in).local_shape) != E || numel(desc(out).local_shape) != E) fail(op, "the counts are not E values");
    be_.all_to_all(Group::ep, ptr(in), ptr(out), E / ep)->wait();
    return;
  }
  MoeRouting& r = moe_routing(index);
  const int64_t N = int64_t(r.order.size()), D = last_dim_of(desc(out));
  // Out to the experts (the dispatch, the combine's backward): this rank's N expert-sorted rows, send[j] to peer j,
  // rows from peer i arriving rank-major. Back (the combine, the dispatch's backward): the reverse.
  const bool outward = !moe_rows_dynamic_[size_t(flat_.tensors[size_t(in)].template_id)];
  if (outward && op.inputs.size() == 2) {  // the dispatch reads its splits as the host holds them
    const std::vector<float> sp = download_n(op.inputs[1], 2 * ep);
    int64_t sum = 0;
    for (int64_t j = 0; j < ep; ++j) {
      r.send.at(size_t(j)) = int64_t(sp[size_t(j)]);
      if (r.send[size_t(j)] < 0) fail(op, "negative dispatch splits");
      sum += r.send[size_t(j)];
    }
    if (sum != N) fail(op, fmt::format("dispatch splits send {} rows, the rank routed {}", sum, N));
  }
  std::vector<int64_t> from_peer(static_cast<size_t>(ep), 0);
  for (size_t x = 0; x < r.recv.size(); ++x) from_peer[x / size_t(E / ep)] += r.recv[x];
  const std::vector<int64_t>& sends = outward ? r.send : from_peer;
  const std::vector<int64_t>& recvs = outward ? from_peer : r.send;
  const int64_t slot = N * D;  // (copies of the buffers: a second scratch() may move the first)
  const Buffer stage_in = scratch(index, 0, ep * slot, ptr(in).storage);
  const Buffer stage_out = scratch(index, 1, ep * slot, ptr(in).storage);
  be_.fill(stage_in.ptr(), ep * slot, 0.0f);
  int64_t at = 0;
  for (int64_t j = 0; j < ep; ++j) {
    if (sends[size_t(j)] > N || (at + sends[size_t(j)]) * D > numel(desc(in).local_shape))
      fail(op, "the splits send more rows than the rank holds");
    be_.copy2d(stage_in.ptr().at(j * slot), D, ptr(in).at(at * D), D, sends[size_t(j)], D);
    at += sends[size_t(j)];
  }
  be_.all_to_all(Group::ep, stage_in.ptr(), stage_out.ptr(), slot)->wait();
  be_.fill(ptr(out), numel(desc(out).local_shape), 0.0f);
  at = 0;
  for (int64_t i = 0; i < ep; ++i) {
    if (recvs[size_t(i)] > N || (at + recvs[size_t(i)]) * D > numel(desc(out).local_shape))
      fail(op, "more rows arrive than the buffer holds");
    be_.copy2d(ptr(out).at(at * D), D, stage_out.ptr().at(i * slot), D, recvs[size_t(i)], D);
    at += recvs[size_t(i)];
  }
}

}  // namespace tptune
