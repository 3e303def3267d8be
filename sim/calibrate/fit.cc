#include "sim/calibrate/fit.h"

#include <fmt/format.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "plans/util/error.h"
#include "sim/cost/comm_cost.h"
#include "sim/cost/compute_cost.h"
#include "sim/cost/cost_param_fields.h"
#include "sim/cost/tp_run_stack.h"
#include "sim/shared_machine.h"
#include "sim/timeline/timeline.h"

namespace tptune {

const char* const kOnlyFittable[10] = {"gemm_fp32_efficiency",     "gemm_efficiency",        "gemm_fp8_efficiency",
                                       "gemm_k_overhead",          "gemm_overhead_us",       "attention_fwd_efficiency",
                                       "attention_bwd_efficiency", "attention_fwd_score_ns", "attention_bwd_score_ns",
                                       "attention_overhead_us"};

ClusterSpec measurement_cluster(const GpuSpec& device, const Measurements& m) {
  ClusterSpec cl = make_cluster(device, 1, m.ranks);
  if (oversubscribed(m)) cl.cores_per_node = m.environment["cores"].get<int>();
  return cl;
}

OpCosts measured_run_costs(const Program& p, const GpuSpec& device, const Measurements& m, const CostParams& c,
                           Timing timing) {
  ClusterSpec cl = measurement_cluster(device, m);
  if (timing == Timing::serialized) cl.cores_per_node = 0;  // no turns
  return cost_ops(p, cl, c);
}

double model_time_us(const MeasuredOp& o, const Measurements& m, const ClusterSpec& cl, const CostParams& c) {
  switch (o.source) {
    case MeasuredOp::Source::program: {
      const Program& p = *m.program;
      return op_duration_us(p.segments[size_t(o.segment)].ops[size_t(o.op)], p, cl, c);
    }
    case MeasuredOp::Source::gemm:
      return gemm_cost(o.gemm, cl.gpu, c).time_us;
    case MeasuredOp::Source::collective: {
      // A benchmark's collective is the curve itself (no in-step factor).
      if (const MeasuredCollective* mc = c.measured(o.collective, o.group_size))
        return mc->time_us(o.collective, static_cast<double>(o.bytes));
      GroupLayout g{o.group_size, o.group_size, 1};
      return collective_cost(o.collective, o.bytes, g, cl, c).time_us;
    }
    case MeasuredOp::Source::memory:
      return memory_bound_cost(static_cast<double>(o.bytes), c.memory_bound_efficiency, c.memory_bound_overhead_us,
                               cl.gpu)
          .time_us;
  }
  return 0;
}

std::vector<double> bounded_least_squares(const std::vector<std::vector<double>>& rows, const std::vector<double>& b,
                                          const std::vector<double>& lo, const std::vector<double>& hi) {
  const size_t n = lo.size(), m = rows.size();
  std::vector<double> x(n, 0);
  std::vector<int> fixed(n, 0);  // 0 free, -1 at lo, +1 at hi
  // A coefficient whose bounds meet is held from the start: solving for it freely first would let a column collinear
  // with others (attention's per-score term at one head dim) take their share, and the active set below fixes
  // coefficients but never frees them again (seen on H200 profiles: both attention efficiencies at the bound 4 and
  // the overhead 1.4 ms, where 0.54 / 0.45 and ~0 fit exactly).
  for (size_t j = 0; j < n; ++j)
    if (lo[j] == hi[j]) {
      fixed[j] = -1;
      x[j] = lo[j];
    }
  for (size_t round = 0; round <= n; ++round) {
    std::vector<size_t> free;
    for (size_t j = 0; j < n; ++j)
      if (!fixed[j]) free.push_back(j);
    if (free.empty()) break;
    Eigen::MatrixXd A(m, free.size());
    Eigen::VectorXd r(m);
    for (size_t i = 0; i < m; ++i) {
      double rhs = b[i];
      for (size_t j = 0; j < n; ++j)
        if (fixed[j]) rhs -= rows[i][j] * x[j];
      r(Eigen::Index(i)) = rhs;
      for (size_t k = 0; k < free.size(); ++k) A(Eigen::Index(i), Eigen::Index(k)) = rows[i][free[k]];
    }
    Eigen::VectorXd sol = A.colPivHouseholderQr().solve(r);
    // Fix the coefficient that leaves its bounds furthest (relative to the range), then re-solve the others.
    double worst = 0;
    size_t worst_j = n;
    for (size_t k = 0; k < free.size(); ++k) {
      const size_t j = free[k];
      double v = sol(Eigen::Index(k));
      if (!std::isfinite(v)) v = lo[j];
      x[j] = v;
      const double out = v < lo[j] ? (lo[j] - v) : v > hi[j] ? (v - hi[j]) : 0;
      if (out > worst) {
        worst = out;
        worst_j = j;
      }
    }
    if (worst_j == n) return x;
    fixed[worst_j] = x[worst_j] < lo[worst_j] ? -1 : 1;
    x[worst_j] = fixed[worst_j] < 0 ? lo[worst_j] : hi[worst_j];
  }
  for (size_t j = 0; j < n; ++j) x[j] = std::clamp(x[j], lo[j], hi[j]);
  return x;
}

namespace {

// The largest efficiency a fit may give (sim/cost/cost_param_fields.cc: a device spec whose peak is low).
constexpr double kMaxEfficiency = 4.0;

enum class OpClass { gemm, attention, memory_bound, collective };

OpClass classify(const MeasuredOp& o, const Measurements& m) {
  switch (o.source) {
    case MeasuredOp::Source::gemm:
      return OpClass::gemm;
    case MeasuredOp::Source::collective:
      return OpClass::collective;
    case MeasuredOp::Source::memory:
      return OpClass::memory_bound;
    case MeasuredOp::Source::program:
      break;
  }
  const Op& op = m.program->segments[size_t(o.segment)].ops[size_t(o.op)];
  if (std::holds_alternative<GemmOp>(op.kind)) return OpClass::gemm;
  if (std::holds_alternative<AttentionOp>(op.kind)) return OpClass::attention;
  if (std::holds_alternative<CollectiveOp>(op.kind)) return OpClass::collective;
  return OpClass::memory_bound;
}

const Op* program_op(const MeasuredOp& o, const Measurements& m) {
  return o.source == MeasuredOp::Source::program ? &m.program->segments[size_t(o.segment)].ops[size_t(o.op)] : nullptr;
}

// The median of `v`, which it sorts; 0 when empty.
double median_of(std::vector<double>& v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t k = v.size();
  return k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
}

struct Sample {
  const MeasuredOp* op;
  const Measurements* m;
  const ClusterSpec* cluster;
};

FitResidual residual_of(const std::string& name, const std::vector<Sample>& ss, const CostParams& c) {
  FitResidual r{name, static_cast<int>(ss.size()), 0, 0};
  std::vector<double> errs;
  for (const auto& s : ss) {
    const double t = s.op->time_us, p = model_time_us(*s.op, *s.m, *s.cluster, c);
    errs.push_back(std::abs(p - t) / t);
  }
  if (errs.empty()) return r;
  r.median_rel_error = median_of(errs);  // sorts
  r.max_rel_error = errs.back();
  return r;
}

// Rows weighted by 1/t: columns built from features, target 1.
struct Problem {
  std::vector<std::vector<double>> rows;
  std::vector<double> b;
  void add(const std::vector<double>& features, double t) {
    std::vector<double> row(features.size());
    for (size_t j = 0; j < row.size(); ++j) row[j] = features[j] / t;
    rows.push_back(std::move(row));
    b.push_back(1.0);
  }
};

// Least squares robust to the stalls of a shared machine (a descheduled rank turns a 100 us collective into 100 ms
// in some iterations, and sometimes in the median): solve, drop the rows whose relative residual exceeds
// max(0.5, 4 x the median), solve again on the rest.
std::vector<double> robust_solve(const Problem& p, const std::vector<double>& lo, const std::vector<double>& hi) {
  std::vector<double> x = bounded_least_squares(p.rows, p.b, lo, hi);
  std::vector<double> res(p.rows.size());
  for (size_t i = 0; i < p.rows.size(); ++i) {
    double r = -p.b[i];
    for (size_t j = 0; j < x.size(); ++j) r += p.rows[i][j] * x[j];
    res[i] = std::abs(r);
  }
  std::vector<double> sorted = res;
  std::sort(sorted.begin(), sorted.end());
  const double cut = std::max(0.5, 4 * sorted[sorted.size() / 2]);
  Problem kept;
  for (size_t i = 0; i < p.rows.size(); ++i)
    if (res[i] <= cut) {
      kept.rows.push_back(p.rows[i]);
      kept.b.push_back(p.b[i]);
    }
  if (kept.rows.size() == p.rows.size() || kept.rows.size() < x.size()) return x;
  return bounded_least_squares(kept.rows, kept.b, lo, hi);
}

// Sum of squared relative residuals, each capped at 0.25 (an outlier counts as a 50% miss, no more).
double capped_ssr(const Problem& p, const std::vector<double>& x) {
  double s = 0;
  for (size_t i = 0; i < p.rows.size(); ++i) {
    double r = -p.b[i];
    for (size_t j = 0; j < x.size(); ++j) r += p.rows[i][j] * x[j];
    s += std::min(r * r, 0.25);
  }
  return s;
}

// Drops columns that no row touches (their parameters keep their defaults).
std::vector<bool> used_columns(const Problem& p, size_t n) {
  std::vector<bool> used(n, false);
  for (const auto& r : p.rows)
    for (size_t j = 0; j < n; ++j) used[j] = used[j] || r[j] != 0;
  return used;
}

// Which parameters a fit may move (FitOptions::only): all when `only` is empty.
struct Fittable {
  const std::vector<std::string>* only = nullptr;
  bool operator()(const char* name) const {
    return !only || only->empty() || std::find(only->begin(), only->end(), name) != only->end();
  }
  bool all() const { return !only || only->empty(); }
};

// Holds column j of a solve at `value` unless `name` may move.
void hold_unless(const Fittable& may, const char* name, size_t j, double value, std::vector<double>& lo,
                 std::vector<double>& hi) {
  if (!may(name)) lo[j] = hi[j] = value;
}

void put(Calibration& cal, const CostParams& base, CostParams& fit, const char* name, double v, const char* cls) {
  const CostParamField* f = find_cost_param(name);
  v = std::clamp(v, f->lo, f->hi);
  f->set(fit, v);
  cal.params.push_back({name, v, f->get(base), cls});
}

void fit_gemm(const std::vector<Sample>& ss, bool tie, const Fittable& may, const CostParams& base, CostParams& fit,
              Calibration& cal) {
  if (ss.empty()) return;
  const char* const eff_names[3] = {"gemm_fp32_efficiency", "gemm_efficiency", "gemm_fp8_efficiency"};
  const double eff_values[3] = {fit.gemm_fp32_efficiency, fit.gemm_efficiency, fit.gemm_fp8_efficiency};
  // Tied, the one efficiency moves when any of the three is named.
  const bool tied_may = may("gemm_fp32_efficiency") || may("gemm_efficiency") || may("gemm_fp8_efficiency");
  // Columns: fp32, bf16/fp16, float8 (or one tied column), intercept, and the micro-benchmarks' own level. A GEMM
  // timed alone in a loop (tp-run bench gemm) runs on hot caches and measured 15-20% faster here than the same shape
  // inside a profiled step, so when profiles are there the benchmarks inform the shape term (k0) and the overhead
  // but not the efficiency; without profiles they give it.
  bool has_program = false;
  for (const auto& s : ss) has_program = has_program || s.op->source == MeasuredOp::Source::program;
  auto column = [&](const Sample& s) {
    if (has_program && s.op->source != MeasuredOp::Source::program) return 4;
    DType a = DType::fp32;
    if (const Op* op = program_op(*s.op, *s.m)) {
      const auto& g = std::get<GemmOp>(op->kind);
      a = is_float8(g.a_dtype) || is_float8(g.b_dtype) ? DType::fp8_e4m3 : g.a_dtype;
    } else {
      a = s.op->gemm.a_dtype;
    }
    if (tie) return 0;
    return is_float8(a) ? 2 : a == DType::fp32 ? 0 : 1;
  };
  double best_ssr = INFINITY, best_k0 = 0;
  std::vector<double> best_x;
  std::vector<double> k0_grid{0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0};
  if (!may("gemm_k_overhead")) k0_grid = {fit.gemm_k_overhead};
  for (double k0 : k0_grid) {
    CostParams c = fit;
    c.gemm_efficiency = c.gemm_fp32_efficiency = c.gemm_fp8_efficiency = 1.0;
    c.gemm_overhead_us = 0;
    c.gemm_memory_efficiency = 1e12;  // the compute branch of the roofline
    c.gemm_k_overhead = k0;
    Problem p;
    for (const auto& s : ss) {
      std::vector<double> f(5, 0.0);
      f[size_t(column(s))] = model_time_us(*s.op, *s.m, *s.cluster, c);
      f[3] = 1.0;
      p.add(f, s.op->time_us);
    }
    std::vector<bool> used = used_columns(p, 5);
    std::vector<double> lo{1 / kMaxEfficiency, 1 / kMaxEfficiency, 1 / kMaxEfficiency, 0, 1 / kMaxEfficiency},
        hi{1e4, 1e4, 1e4, 1e4, 1e4};
    if (!used[4]) lo[4] = hi[4] = 1.0;
    for (size_t j = 0; j < 3; ++j)
      if (!used[j]) lo[j] = hi[j] = 1.0;
    if (tie) {
      if (!tied_may) lo[0] = hi[0] = 1 / eff_values[1];
    } else {
      for (size_t j = 0; j < 3; ++j)
        if (used[j]) hold_unless(may, eff_names[j], j, 1 / eff_values[j], lo, hi);
    }
    hold_unless(may, "gemm_overhead_us", 3, fit.gemm_overhead_us, lo, hi);
    std::vector<double> x = robust_solve(p, lo, hi);
    const double ssr = capped_ssr(p, x);
    if (ssr < best_ssr) {
      best_ssr = ssr;
      best_k0 = k0;
      best_x = x;
    }
  }
  std::vector<bool> used(5, false);
  for (const auto& s : ss) used[size_t(column(s))] = true;
  if (tie) {
    if (tied_may) {
      for (const char* n : eff_names) put(cal, base, fit, n, 1 / best_x[0], "gemm");
      if (may.all()) put(cal, base, fit, "gemm_fp8_rowwise_factor", 1.0, "gemm");
    }
  } else {
    for (size_t j = 0; j < 3; ++j)
      if (used[j] && may(eff_names[j])) put(cal, base, fit, eff_names[j], 1 / best_x[j], "gemm");
  }
  if (may("gemm_k_overhead")) put(cal, base, fit, "gemm_k_overhead", best_k0, "gemm");
  if (may("gemm_overhead_us")) put(cal, base, fit, "gemm_overhead_us", best_x[3], "gemm");
}

// Causal score count of an attention op (b x heads x s(s+1)/2): the per-score term's feature.
double attention_scores(const AttentionOp& a) {
  return static_cast<double>(a.batch) * static_cast<double>(a.n_heads) * static_cast<double>(a.seq) *
         static_cast<double>(a.causal ? a.seq + 1 : 2 * a.seq) / 2;
}

void fit_attention(const std::vector<Sample>& ss, const Fittable& may, const CostParams& base, CostParams& fit,
                   Calibration& cal) {
  if (ss.empty()) return;
  CostParams c = fit;
  c.attention_fwd_efficiency = c.attention_bwd_efficiency = 1.0;
  c.attention_overhead_us = 0;
  c.attention_fwd_score_ns = c.attention_bwd_score_ns = 0;
  c.memory_bound_efficiency = 1e12;  // the compute branch
  // Columns: FLOP time fwd / bwd (1/efficiency), scores fwd / bwd (ns per score, in us per 1000 scores), overhead.
  // The score columns separate only when the samples vary head_dim against seq^2 (a FLOP term at one head dim is a
  // score term times a constant): with one head dim they are left at the device's values.
  Problem p;
  std::set<int64_t> head_dims;
  for (const auto& s : ss) {
    const auto& a = std::get<AttentionOp>(program_op(*s.op, *s.m)->kind);
    head_dims.insert(a.head_dim);
    const double x = model_time_us(*s.op, *s.m, *s.cluster, c), sc = attention_scores(a) * 1e-3;
    p.add({a.backward ? 0 : x, a.backward ? x : 0, a.backward ? 0 : sc, a.backward ? sc : 0, 1.0}, s.op->time_us);
  }
  const bool scores = head_dims.size() >= 2;
  std::vector<bool> used = used_columns(p, 5);
  std::vector<double> lo{1 / kMaxEfficiency, 1 / kMaxEfficiency, 0, 0, 0}, hi{1e5, 1e5, 1e6, 1e6, 1e4};
  for (size_t j = 0; j < 2; ++j)
    if (!used[j]) lo[j] = hi[j] = 1.0;
  for (size_t j = 2; j < 4; ++j)
    if (!used[j] || !scores) lo[j] = hi[j] = (j == 2 ? fit.attention_fwd_score_ns : fit.attention_bwd_score_ns);
  const char* const names[5] = {"attention_fwd_efficiency", "attention_bwd_efficiency", "attention_fwd_score_ns",
                                "attention_bwd_score_ns", "attention_overhead_us"};
  const double held[5] = {1 / fit.attention_fwd_efficiency, 1 / fit.attention_bwd_efficiency,
                          fit.attention_fwd_score_ns, fit.attention_bwd_score_ns, fit.attention_overhead_us};
  for (size_t j = 0; j < 5; ++j)
    if (used[j]) hold_unless(may, names[j], j, held[j], lo, hi);
  std::vector<double> x = robust_solve(p, lo, hi);
  if (used[0] && may(names[0])) put(cal, base, fit, names[0], 1 / x[0], "attention");
  if (used[1] && may(names[1])) put(cal, base, fit, names[1], 1 / x[1], "attention");
  if (scores && used[2] && may(names[2])) put(cal, base, fit, names[2], x[2], "attention");
  if (scores && used[3] && may(names[3])) put(cal, base, fit, names[3], x[3], "attention");
  if (may(names[4])) put(cal, base, fit, names[4], x[4], "attention");
}

// Memory-bound sub-classes: which column an op's time goes to.
// A compiled Program's norm, rope and activation kernels (training.compile on a device that fuses: its fused ops,
// ElementwiseOp's "Fused ops") have columns of their own, which fit the compiled_*_traffic_factor terms; an eager
// Program's fit the eager factors. So compile terms are fitted to compiled kernels only.
enum MemCol {
  plain = 0,
  norm,
  rope,
  act,
  emb_bwd,
  loss,
  cast,
  adam_bytes,
  bench_plain,
  ovh,
  ovh_adam,
  c_norm,
  c_rope,
  c_act,
  n_mem_cols
};

void fit_memory(const std::vector<Sample>& ss, const CostParams& base, CostParams& fit, Calibration& cal) {
  if (ss.empty()) return;
  CostParams c = fit;
  c.memory_bound_efficiency = 1.0;
  c.memory_bound_overhead_us = c.optimizer_overhead_us = 0;
  c.norm_traffic_factor = c.rope_traffic_factor = c.activation_traffic_factor = 1.0;
  c.norm_bwd_traffic_factor = c.rope_bwd_traffic_factor = c.activation_bwd_traffic_factor = 1.0;
  c.compiled_norm_traffic_factor = c.compiled_rope_traffic_factor = c.compiled_activation_traffic_factor = 1.0;
  c.embedding_bwd_efficiency = 1.0;
  c.loss_traffic_factor = 1.0;
  c.fp8_cast_traffic_factor = 1.0;
  c.optimizer_traffic_factor = 1.0;
  Problem p;
  for (const auto& s : ss) {
    std::vector<double> f(n_mem_cols, 0.0);
    int col = plain;
    bool adam = false;
    if (const Op* op = program_op(*s.op, *s.m)) {
      using F = ElementwiseOp::Fn;
      const Program& prog = *s.m->program;
      const bool compiled = c.compile_fuses && prog.training.compiled(prog.plan.async_tp);
      if (const auto* e = std::get_if<ElementwiseOp>(&op->kind)) {
        // One column per module for both passes (below); the compiled Programs' kernels their own.
        const EagerModule m = eager_module(e->fn);
        if (m.kind == EagerModule::norm) {
          col = compiled ? c_norm : norm;
        } else if (m.kind == EagerModule::rope) {
          col = compiled ? c_rope : rope;
        } else if (m.kind == EagerModule::activation) {
          col = compiled ? c_act : act;
        } else if (e->fn == F::adamw) {
          adam = true;
          col = adam_bytes;
        }
      } else if (const auto* em = std::get_if<EmbeddingOp>(&op->kind)) {
        if (em->backward) col = emb_bwd;
      } else if (const auto* ce = std::get_if<CrossEntropyOp>(&op->kind)) {
        using S = CrossEntropyOp::Stage;
        if (ce->stage == S::sum_exp || ce->stage == S::backward) col = loss;
      } else if (const auto* cf = std::get_if<CastFp8Op>(&op->kind)) {
        if (cf->stage == CastFp8Op::Stage::cast) col = cast;
      }
    } else {
      col = bench_plain;  // a copy/add micro-benchmark (see fit_gemm on bench levels)
    }
    f[size_t(col)] = model_time_us(*s.op, *s.m, *s.cluster, c);
    f[adam ? ovh_adam : ovh] = 1.0;
    p.add(f, s.op->time_us);
  }
  std::vector<bool> used = used_columns(p, n_mem_cols);
  std::vector<double> lo(n_mem_cols, 1 / kMaxEfficiency), hi(n_mem_cols, 1e6);
  lo[ovh] = lo[ovh_adam] = 0;
  hi[ovh] = hi[ovh_adam] = 1e4;
  for (size_t j = 0; j < n_mem_cols; ++j)
    if (!used[j]) lo[j] = hi[j] = (j == ovh || j == ovh_adam) ? 0.0 : 1.0;
  std::vector<double> x = robust_solve(p, lo, hi);
  // The efficiency anchors every factor below: the Programs' plain ops (adds, copies, embedding) when profiles are
  // there, else the copy/add micro-benchmarks (their level runs on hot caches, hence a column of its own).
  if (!used[plain] && !used[bench_plain]) return;
  const double a = used[plain] ? x[plain] : x[bench_plain];
  put(cal, base, fit, "memory_bound_efficiency", 1 / a, "memory_bound");
  // One column per module for both passes: a device whose kernels are fused (the CPU backend's) pays the same
  // factor forward and backward, and its profiles cannot tell the two apart.
  for (const auto& [col, fwd, bwd] : {std::tuple{norm, "norm_traffic_factor", "norm_bwd_traffic_factor"},
                                      std::tuple{rope, "rope_traffic_factor", "rope_bwd_traffic_factor"},
                                      std::tuple{act, "activation_traffic_factor", "activation_bwd_traffic_factor"}})
    if (used[col]) {
      put(cal, base, fit, fwd, x[col] / a, "memory_bound");
      put(cal, base, fit, bwd, x[col] / a, "memory_bound");
    }
  for (const auto& [col, name] :
       {std::pair{c_norm, "compiled_norm_traffic_factor"}, std::pair{c_rope, "compiled_rope_traffic_factor"},
        std::pair{c_act, "compiled_activation_traffic_factor"}})
    if (used[col]) put(cal, base, fit, name, x[col] / a, "memory_bound");
  if (used[emb_bwd]) put(cal, base, fit, "embedding_bwd_efficiency", a / x[emb_bwd], "memory_bound");
  if (used[loss]) put(cal, base, fit, "loss_traffic_factor", x[loss] / a, "memory_bound");
  if (used[cast]) put(cal, base, fit, "fp8_cast_traffic_factor", x[cast] / a, "memory_bound");
  if (used[adam_bytes]) put(cal, base, fit, "optimizer_traffic_factor", x[adam_bytes] / a, "memory_bound");
  if (used[ovh]) put(cal, base, fit, "memory_bound_overhead_us", x[ovh], "memory_bound");
  if (used[ovh_adam]) put(cal, base, fit, "optimizer_overhead_us", x[ovh_adam], "memory_bound");
}

// Per (kind, group size): the curve from the collectives benchmark's samples where it measured two sizes or more,
// else from every sample of the group (profiles only). Then collective_step_factor: the median, over the profiles'
// collectives whose group has a benchmark curve (ranks not outnumbering cores: those wait for turns), of measured
// over curve time, from 5 samples or more. The residuals are those of the final model.
void fit_collectives(const std::vector<Sample>& ss, const CostParams& base, CostParams& fit, Calibration& cal) {
  std::map<std::pair<int, int>, std::vector<Sample>> groups;  // (kind, n)
  for (const auto& s : ss)
    if (s.op->group_size > 1 && s.op->bytes > 0)
      groups[{static_cast<int>(s.op->collective), s.op->group_size}].push_back(s);
  auto sizes_of = [](const std::vector<Sample>& g) {
    std::set<int64_t> sizes;
    for (const auto& s : g) sizes.insert(s.op->bytes);
    return sizes.size();
  };
  const size_t first = cal.collectives.size();
  std::set<std::pair<int, int>> from_bench;
  for (const auto& [key, g] : groups) {
    const auto kind = static_cast<CollectiveKind>(key.first);
    const int n = key.second;
    std::vector<Sample> bench;
    for (const auto& s : g)
      if (s.op->source == MeasuredOp::Source::collective) bench.push_back(s);
    if (sizes_of(bench) >= 2) from_bench.insert(key);
    const std::vector<Sample>& use = from_bench.count(key) ? bench : g;
    if (sizes_of(use) < 2) continue;  // alpha and beta need two sizes at least
    Problem p;
    for (const auto& s : use)
      p.add({1.0, static_cast<double>(s.op->bytes) * bus_factor(kind, n) * 1e-3}, s.op->time_us);
    std::vector<double> x = robust_solve(p, {0, 1e-4}, {1e4, 1e4});
    FittedCollective f;
    f.curve = {kind, n, x[0], 1 / x[1], {}};
    // The measured curve itself: the median time at each size (the alpha-beta line stays for larger sizes).
    std::map<int64_t, std::vector<double>> by_size;
    for (const auto& s : use) by_size[s.op->bytes].push_back(s.op->time_us);
    for (auto& [bytes, ts] : by_size) f.curve.points.push_back({static_cast<double>(bytes), median_of(ts)});
    cal.collectives.push_back(f);
    fit.measured_collectives.push_back(f.curve);
  }
  std::vector<double> ratios;
  for (const auto& s : ss)
    if (s.op->source == MeasuredOp::Source::program && !oversubscribed(*s.m) &&
        from_bench.count({static_cast<int>(s.op->collective), s.op->group_size}))
      if (const MeasuredCollective* c = fit.measured(s.op->collective, s.op->group_size))
        ratios.push_back(s.op->time_us / c->time_us(s.op->collective, static_cast<double>(s.op->bytes)));
  if (ratios.size() >= 5) put(cal, base, fit, "collective_step_factor", median_of(ratios), "collective");
  for (size_t i = first; i < cal.collectives.size(); ++i) {
    FittedCollective& f = cal.collectives[i];
    CostParams c = fit;
    c.measured_collectives = {f.curve};
    f.residual = residual_of(fmt::format("{}@{}", to_string(f.curve.kind), f.curve.ranks),
                             groups[{static_cast<int>(f.curve.kind), f.curve.ranks}], c);
  }
}

// concurrent_rank_rate (fit.h): the GEMMs of the profiles, with one efficiency column for single-rank runs and one
// for multi-rank runs (shared k0 by the same grid search as fit_gemm, shared overhead); the rate is their ratio.
void fit_concurrency(const std::vector<Measurements>& ms, const GpuSpec& device, const CostParams& base,
                     CostParams& fit, Calibration& cal) {
  CostParams c = base;
  c.concurrent_rank_rate = 1.0;
  c.gemm_efficiency = c.gemm_fp32_efficiency = c.gemm_fp8_efficiency = 1.0;
  c.gemm_overhead_us = 0;
  c.gemm_memory_efficiency = 1e12;  // the compute branch
  struct Row {
    const MeasuredOp* op;
    const Measurements* m;
    ClusterSpec cl;
  };
  std::vector<Row> rows;
  int single = 0, multi = 0;
  for (const auto& m : ms) {
    if (!m.program) continue;
    const ClusterSpec cl = at_shared_rates(measurement_cluster(device, m), c);  // c: rate 1 here
    for (const auto& o : m.ops)
      if (o.time_us > 0 && classify(o, m) == OpClass::gemm) {
        rows.push_back({&o, &m, cl});
        ++(m.ranks > 1 ? multi : single);
      }
  }
  if (single < 5 || multi < 5) return;
  double best_ssr = INFINITY;
  std::vector<double> best_x;
  for (double k0 : {0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0}) {
    c.gemm_k_overhead = k0;
    Problem p;
    for (const auto& r : rows) {
      const double x = model_time_us(*r.op, *r.m, r.cl, c);
      p.add({r.m->ranks > 1 ? 0 : x, r.m->ranks > 1 ? x : 0, 1.0}, r.op->time_us);
    }
    std::vector<double> x = robust_solve(p, {1 / kMaxEfficiency, 1 / kMaxEfficiency, 0}, {1e4, 1e4, 1e4});
    const double ssr = capped_ssr(p, x);
    if (ssr < best_ssr) {
      best_ssr = ssr;
      best_x = x;
    }
  }
  // Time multipliers: 1 / eff alone and 1 / (eff x rate) together.
  put(cal, base, fit, "concurrent_rank_rate", best_x[0] / best_x[1], "gemm");
}

// oversubscribed_efficiency (fit.h): the sweep of a gemm bench at more ranks than cores against the sweep of the same
// shapes at no more ranks than cores. Modelled, a sweep of W at full rate takes W / share: share = 1 alone,
// concurrent_rank_rate with company, times cores / ranks x the efficiency when oversubscribed, so
//   efficiency = (sweep_ref / sweep_over) x share_ref x ranks / (concurrent_rank_rate x cores).
// With several oversubscribed sweeps, the median; a reference alone (ranks 1) is preferred to one with company. A
// sweep under 10 ms is not used: ranks take turns in scheduler slices of a few ms, and a shorter sweep runs in one
// (measured here: 0.3 ms of GEMMs at 4 ranks on 2 cores in the time of 1 rank alone).
void fit_oversubscription(const std::vector<Measurements>& ms, const CostParams& base, CostParams& fit,
                          Calibration& cal) {
  auto shapes = [](const Measurements& m) {
    std::vector<std::tuple<int64_t, int64_t, int64_t, DType>> v;
    for (const auto& o : m.ops) v.emplace_back(o.gemm.m, o.gemm.n, o.gemm.k, o.gemm.a_dtype);
    return v;
  };
  auto is_sweep = [](const Measurements& m) {
    return m.format == "tptune-bench" && m.sweep_us > 0 && !m.ops.empty() &&
           m.ops.front().source == MeasuredOp::Source::gemm;
  };
  std::vector<double> effs;
  for (const auto& over : ms) {
    if (!is_sweep(over) || !oversubscribed(over) || over.sweep_us < 1e4) continue;
    const Measurements* ref = nullptr;
    for (const auto& m : ms)
      if (is_sweep(m) && !oversubscribed(m) && shapes(m) == shapes(over) && (!ref || m.ranks < ref->ranks)) ref = &m;
    if (!ref) continue;
    const double share_ref = ref->ranks > 1 ? fit.concurrent_rank_rate : 1.0;
    const int cores = over.environment["cores"].get<int>();
    effs.push_back(ref->sweep_us / over.sweep_us * share_ref * over.ranks / (fit.concurrent_rank_rate * cores));
  }
  if (effs.empty()) return;
  put(cal, base, fit, "oversubscribed_efficiency", median_of(effs), "gemm");
}

}  // namespace

Calibration fit_calibration(const std::vector<Measurements>& ms, const GpuSpec& device, const FitOptions& options) {
  if (ms.empty()) throw Error("calibrate: expected at least one profile or bench file");
  Calibration cal;
  cal.device = device.name;
  cal.environment = environment_key(ms.front().environment);
  for (const auto& m : ms) {
    cal.files.push_back(m.path);
    if (environment_key(m.environment) != cal.environment)
      throw Error(fmt::format("{}: environment '{}' differs from {}'s '{}': fit them separately (--separate)", m.path,
                              environment_key(m.environment), ms.front().path, cal.environment));
  }
  const bool tie = options.tie_gemm_dtypes.value_or(ms.front().environment.value("backend", "") == "cpu");
  std::vector<ClusterSpec> clusters;
  clusters.reserve(ms.size());  // pointers into it are kept below: no growth after this
  std::map<OpClass, std::vector<Sample>> by_class;

  const Fittable may{&options.only};
  for (size_t i = 0; i < options.only.size(); ++i) {
    const std::string& n = options.only[i];
    if (!find_cost_param(n))
      throw Error(fmt::format("--fit {}: expected a cost parameter (sim/cost_param_list.h names)", n));
    if (std::find(std::begin(kOnlyFittable), std::end(kOnlyFittable), n) == std::end(kOnlyFittable))
      throw Error(fmt::format(
          "--fit {}: a fit to profiles moves only GEMM and attention parameters one by one ({}); without --fit it "
          "fits every class",
          n, fmt::join(std::begin(kOnlyFittable), std::end(kOnlyFittable), ", ")));
    if (std::find(options.only.begin(), options.only.begin() + ptrdiff_t(i), n) != options.only.begin() + ptrdiff_t(i))
      throw Error(fmt::format("--fit {}: named twice", n));
  }
  const CostParams base = tp_run_cost_params(device);  // profiles are tp-run's: its stack (sim/cost/tp_run_stack.h)
  CostParams fit = base;
  if (may.all()) {
    fit_concurrency(ms, device, base, fit, cal);
    fit_oversubscription(ms, base, fit, cal);
  }
  for (const auto& m : ms) clusters.push_back(at_shared_rates(measurement_cluster(device, m), fit));
  for (size_t i = 0; i < ms.size(); ++i) {
    // A GEMM or copy timed alone between barriers while more ranks than cores take turns measures the scheduler
    // (which rank got a core first), not the op: such benches inform the oversubscribed sweep only. Collectives stay:
    // a step's collectives at that many ranks pay the same turns.
    const bool compute_bench = ms[i].format == "tptune-bench" && !ms[i].ops.empty() &&
                               ms[i].ops.front().source != MeasuredOp::Source::collective;
    if (compute_bench && oversubscribed(ms[i])) continue;
    for (const auto& o : ms[i].ops)
      if (o.time_us > 0) by_class[classify(o, ms[i])].push_back({&o, &ms[i], &clusters[i]});
  }
  fit_gemm(by_class[OpClass::gemm], tie, may, base, fit, cal);
  fit_attention(by_class[OpClass::attention], may, base, fit, cal);
  if (may.all()) {
    fit_memory(by_class[OpClass::memory_bound], base, fit, cal);
    fit_collectives(by_class[OpClass::collective], base, fit, cal);
  }
  for (auto [cls, name] :
       {std::pair{OpClass::gemm, "gemm"}, std::pair{OpClass::attention, "attention"},
        std::pair{OpClass::memory_bound, "memory_bound"}, std::pair{OpClass::collective, "collective"}})
    if (!by_class[cls].empty()) cal.classes.push_back(residual_of(name, by_class[cls], fit));
  // What calibrate writes, `--calibration` must load: the fit passes the file's own checks (every parameter within
  // its field's range, curves and points within theirs) or nothing is written.
  try {
    parse_calibration(calibration_yaml(cal), "the fitted calibration");
  } catch (const Error& e) {
    throw Error(
        fmt::format("calibrate: {}: the measurements fit no calibration tptune can use ({}); check that "
                    "they are times of this device",
                    fmt::join(cal.files, ", "), e.what()));
  }
  return cal;
}

std::string fit_report(const Calibration& cal, const GpuSpec& device) {
  std::string out = fmt::format("calibration of device {} from {} file(s); environment: {}\n", cal.device,
                                cal.files.size(), cal.environment);
  for (const auto& r : cal.classes) {
    out += fmt::format("\n{}: {} samples, residual median {:.1f}%, max {:.1f}%\n", r.op_class, r.samples,
                       100 * r.median_rel_error, 100 * r.max_rel_error);
    for (const auto& p : cal.params)
      if (p.op_class == r.op_class)
        out += fmt::format("  {:<28} {:>12.5g}   (default {:.5g})\n", p.name, p.value, p.default_value);
    if (r.op_class == "collective") {
      out += fmt::format("  {:<16} {:>5} {:>10} {:>11} {:>8} {:>8} {:>8}\n", "collective", "ranks", "alpha(us)",
                         "busbw(GB/s)", "samples", "median%", "max%");
      for (const auto& f : cal.collectives)
        out += fmt::format("  {:<16} {:>5} {:>10.2f} {:>11.3f} {:>8} {:>8.1f} {:>8.1f}\n", to_string(f.curve.kind),
                           f.curve.ranks, f.curve.alpha_us, f.curve.busbw_GBps, f.residual.samples,
                           100 * f.residual.median_rel_error, 100 * f.residual.max_rel_error);
    }
  }
  std::vector<std::string> kept;
  const CostParams base = tp_run_cost_params(device);  // profiles are tp-run's: its stack (sim/cost/tp_run_stack.h)
  for (const auto& f : cost_param_fields()) {
    bool fitted = false;
    for (const auto& p : cal.params) fitted = fitted || p.name == f.name;
    if (!fitted) kept.push_back(fmt::format("{}={:.4g}", f.name, f.get(base)));
  }
  out += fmt::format("\nnot determined by the data (defaults of {} kept): {}\n", device.name, fmt::join(kept, ", "));
  return out;
}

}  // namespace tptune
