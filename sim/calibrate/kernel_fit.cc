#include "sim/calibrate/kernel_fit.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "plans/program/program.h"
#include "sim/cost/compute_cost.h"
#include "sim/cost/cost_param_fields.h"
#include "sim/gpu_spec.h"

namespace tptune {

namespace {

// A term of an architecture: (architecture, name, backend).
using TermKey = std::tuple<std::string, std::string, std::string>;

std::string term_name(const KernelMeasurement& m) {
  switch (m.kind) {
    case KernelKind::gemm:
      return is_float8(m.dtype) ? "gemm_fp8_efficiency" : "gemm_efficiency";
    case KernelKind::gemm_sustained:
      return "sustained_tensor_fraction";
    case KernelKind::attention_fwd:
    case KernelKind::attention_fwd_bwd:
      return "attention_fwd_efficiency";
    case KernelKind::attention_bwd:
      return "attention_bwd_efficiency";
    case KernelKind::memory_bound:
      return "memory_bound_efficiency";
    case KernelKind::grouped_gemm_fwd_bwd:
      return "grouped_gemm_factor";
    case KernelKind::all_reduce:
    case KernelKind::all_gather:
    case KernelKind::reduce_scatter:
      break;
  }
  const bool nvls = m.backend.find("nvls") != std::string::npos;
  return fmt::format("{}_busbw_efficiency@{}", nvls ? "nvls" : "ring", m.ranks);
}

bool tensor_core(const KernelMeasurement& m) {
  return m.kind == KernelKind::gemm || m.kind == KernelKind::grouped_gemm_fwd_bwd || is_attention(m.kind);
}

double prior_of(const KernelMeasurement& m, const CostParams& c) {
  const std::string t = term_name(m);
  if (is_collective(m.kind))
    return t.starts_with("nvls") ? c.nvls_busbw_efficiency.at(m.ranks) : c.ring_busbw_efficiency.at(m.ranks);
  return find_cost_param(t)->get(c);
}

// The measured figure as a fraction: of the dtype's dense peak, the HBM rate, or the NVLink rate per direction.
double measured_fraction(const KernelMeasurement& m, const GpuSpec& gpu) {
  if (m.unit == KernelUnit::fraction_of_peak) return m.figure;
  if (is_collective(m.kind)) return m.value() / (gpu.nvlink_bandwidth_GBps * 1e9);
  return m.value() / gpu.peak_flops(m.dtype);
}

// x_i: the model's fraction for the measurement at the term's efficiency 1, at the given tensor clock.
double model_fraction(const KernelMeasurement& m, const GpuSpec& gpu, CostParams c, double clock) {
  c.tensor_clock_fraction = clock;
  c.sustained_tensor_fraction = 1;  // the figures are short bursts, above the rate a saturated part sustains
  if (m.kind == KernelKind::memory_bound || is_collective(m.kind)) return 1.0;
  if (m.kind == KernelKind::grouped_gemm_fwd_bwd) {
    // The factor is relative to the dense GEMM pricing at the architecture's own GEMM terms: those stay, the factor
    // is 1. Forward and backward of y = A W^T, as plans/lower/experts.cc lowers them.
    c.grouped_gemm_factor = 1;
    const int64_t rows = m.m / m.groups;
    const DType d = m.dtype;
    GemmOp fwd{rows, m.n, m.k, d, d, d, false, true}, d_input{rows, m.k, m.n, d, d, d, false, false},
        d_weight{m.n, m.k, rows, d, d, d, true, false};
    fwd.groups = d_input.groups = d_weight.groups = m.groups;
    const double t =
        gemm_cost(fwd, gpu, c).time_us + gemm_cost(d_input, gpu, c).time_us + gemm_cost(d_weight, gpu, c).time_us;
    return 6.0 * static_cast<double>(m.m) * static_cast<double>(m.n) * static_cast<double>(m.k) / (t * 1e-6) /
           gpu.peak_flops(m.dtype);
  }
  if (m.kind == KernelKind::gemm) {
    if (!m.has_shape()) return clock;
    c.gemm_efficiency = c.gemm_fp8_efficiency = 1;
    c.gemm_overhead_us = 0;
    c.fp8_layout_copy_factor = 0;
    GemmOp g;
    g.m = m.m, g.n = m.n, g.k = m.k;
    g.a_dtype = g.b_dtype = m.dtype;
    g.c_dtype = is_float8(m.dtype) ? DType::bf16 : m.dtype;
    g.trans_b = true;
    const ComputeEstimate e = gemm_cost(g, gpu, c);
    return e.flops / (e.time_us * 1e-6) / gpu.peak_flops(m.dtype);
  }
  // Attention: a forward-and-backward figure divides 3.5 F FLOPs by both passes' times, the backward at the prior's
  // ratio to the forward.
  const double bwd_ratio = c.attention_bwd_efficiency / c.attention_fwd_efficiency;
  const double pass = m.kind == KernelKind::attention_fwd_bwd ? 3.5 / (1 + 2.5 / bwd_ratio) : 1.0;
  if (!m.has_shape()) return clock * pass;
  c.attention_fwd_efficiency = c.attention_bwd_efficiency = 1;
  c.attention_overhead_us = 0;
  AttentionOp a;
  a.batch = m.batch, a.seq = m.seq, a.n_heads = a.n_kv_heads = m.heads, a.head_dim = m.head_dim;
  a.causal = m.causal;
  a.backward = m.kind == KernelKind::attention_bwd;
  const ComputeEstimate e = attention_cost(a, m.dtype, gpu, c);
  return e.flops / (e.time_us * 1e-6) / gpu.peak_flops(m.dtype) * pass;
}

struct Row {
  const KernelSource* source;
  const KernelMeasurement* m;
  GpuSpec gpu;
  CostParams c;
  TermKey term;
  double measured = 0;
  bool capped = false;  // a power-capped part's tensor-core row: part level, not fitted
};

std::string percent(double f) { return fmt::format("{:+.1f}%", 100 * f); }

}  // namespace

std::vector<std::string> KernelFit::sources_of(const std::string& architecture) const {
  std::set<std::string> ids;
  for (const auto& r : residuals)
    if (r.fitted && r.architecture == architecture) ids.insert(r.source);
  std::vector<std::string> out;
  for (const auto& s : sources)
    if (ids.count(s)) out.push_back(s);
  return out;
}

KernelFit fit_kernels(const std::vector<KernelSource>& record) {
  KernelFit f;
  std::vector<Row> rows;
  std::map<std::string, ImpliedSustained> sustained;  // by preset
  for (const auto& s : record) {
    f.sources.push_back(s.id);
    for (const auto& m : s.measurements) {
      if (m.kind == KernelKind::gemm_sustained) {
        // A part-level figure: the sustained rate over the burst rate printed beside it.
        const double ratio = m.figure / m.burst;
        const std::string row = fmt::format("{} {:.3f}", to_string(m.dtype), ratio);
        if (m.gpu.empty()) {
          f.not_fitted.push_back(
              fmt::format("{} {}: {} has no tptune preset (sustained / burst {})", s.id, m.id, m.gpu_as_printed, row));
          continue;
        }
        ImpliedSustained& p = sustained[m.gpu];
        p.implied += std::log(ratio);  // a sum of logs until the mean below
        ++p.rows;
        p.per_row.push_back(row);
        if (std::find(p.sources.begin(), p.sources.end(), s.id) == p.sources.end()) p.sources.push_back(s.id);
        continue;
      }
      if (m.gpu.empty()) {
        f.not_fitted.push_back(fmt::format("{} {}: {} has no tptune preset", s.id, m.id, m.gpu_as_printed));
        continue;
      }
      Row r{&s, &m, gpu_preset(m.gpu, m.at + ": gpu"), {}, {}, 0, false};
      if (r.gpu.architecture.empty()) {
        f.not_fitted.push_back(fmt::format("{} {}: preset {} names no architecture", s.id, m.id, m.gpu));
        continue;
      }
      if (m.kind != KernelKind::gemm && m.kind != KernelKind::memory_bound && !is_attention(m.kind) &&
          m.kind != KernelKind::all_reduce && m.kind != KernelKind::grouped_gemm_fwd_bwd) {
        f.not_fitted.push_back(fmt::format("{} {}: {} figures fit no term yet", s.id, m.id, to_string(m.kind)));
        continue;
      }
      if (m.kind == KernelKind::grouped_gemm_fwd_bwd && m.groups == 1) {
        f.not_fitted.push_back(fmt::format(
            "{} {}: one group, which tptune prices as a dense GEMM (grouped_gemm_factor applies to more)", s.id, m.id));
        continue;
      }
      r.c = device_cost_params(r.gpu);
      r.term = {r.gpu.architecture, term_name(m), is_attention(m.kind) ? m.backend : ""};
      r.measured = measured_fraction(m, r.gpu);
      r.capped = tensor_core(m) && r.c.tensor_clock_fraction < 1;
      rows.push_back(std::move(r));
    }
  }
  // Fit each term on its uncapped rows, at the part's own clock (1 for every uncapped part).
  std::map<TermKey, std::pair<double, int>> sums;  // sum of ln(measured / x), count
  std::map<TermKey, KernelTermFit> terms;
  for (const auto& r : rows) {
    auto& t = terms[r.term];
    if (t.name.empty()) {
      t.architecture = std::get<0>(r.term);
      t.name = std::get<1>(r.term);
      t.backend = std::get<2>(r.term);
      t.prior = prior_of(*r.m, r.c);
    }
    if (r.capped) continue;
    const double x = model_fraction(*r.m, r.gpu, r.c, r.c.tensor_clock_fraction);
    sums[r.term].first += std::log(r.measured / x);
    ++sums[r.term].second;
    if (std::find(t.sources.begin(), t.sources.end(), r.source->id) == t.sources.end())
      t.sources.push_back(r.source->id);
  }
  for (auto& [key, t] : terms) {
    const auto it = sums.find(key);
    t.rows = it == sums.end() ? 0 : it->second.second;
    t.value = t.rows > 0 ? std::exp(it->second.first / t.rows) : t.prior;  // no uncapped row: the prior stays
  }
  // Residuals, and the clock each capped part's rows imply.
  std::map<std::string, std::pair<double, int>> clock_sums;
  std::map<std::string, std::vector<std::string>> clock_sources;
  for (const auto& r : rows) {
    const KernelTermFit& t = terms.at(r.term);
    KernelResidual res{r.source->id, r.m->id, r.m->at, r.m->gpu, t.architecture, t.name, r.measured, 0, !r.capped};
    if (!t.backend.empty()) res.term += " (" + t.backend + ")";
    res.predicted = t.value * model_fraction(*r.m, r.gpu, r.c, r.c.tensor_clock_fraction);
    if (r.capped) {
      clock_sums[r.m->gpu].first += std::log(r.measured / (t.value * model_fraction(*r.m, r.gpu, r.c, 1.0)));
      ++clock_sums[r.m->gpu].second;
      auto& ids = clock_sources[r.m->gpu];
      if (std::find(ids.begin(), ids.end(), r.source->id) == ids.end()) ids.push_back(r.source->id);
    }
    f.residuals.push_back(std::move(res));
  }
  for (const auto& [gpu, s] : clock_sums)
    f.clocks.push_back({gpu, device_cost_params(gpu_preset(gpu)).tensor_clock_fraction,
                        std::min(1.0, std::exp(s.first / s.second)), s.second, clock_sources[gpu]});
  for (auto& [key, t] : terms) f.terms.push_back(std::move(t));
  // Each preset's sustained_tensor_fraction, and what its own gemm_sustained rows imply.
  for (const auto& name : gpu_preset_names()) {
    const GpuSpec g = gpu_preset(name);
    if (g.architecture.empty()) continue;
    ImpliedSustained p;
    if (const auto it = sustained.find(name); it != sustained.end()) {
      p = it->second;
      p.implied = std::exp(p.implied / p.rows);
    }
    p.gpu = name;
    p.preset = device_cost_params(g).sustained_tensor_fraction;
    f.sustained.push_back(std::move(p));
  }
  f.power_clocks = power_curve_clocks(record);
  return f;
}

std::string kernel_fit_text(const KernelFit& f) {
  std::string out = fmt::format("kernel-level fit of the architecture terms to {} source{} ({})\n", f.sources.size(),
                                f.sources.size() == 1 ? "" : "s", fmt::join(f.sources, ", "));
  out += fmt::format("  {:<10} {:<38} {:>7} {:>7} {:>7} {:>5}  {}\n", "arch", "term", "prior", "fitted", "change",
                     "rows", "sources");
  for (const auto& t : f.terms) {
    const std::string name = t.backend.empty() ? t.name : t.name + " (" + t.backend + ")";
    out += fmt::format("  {:<10} {:<38} {:>7.4g} {:>7.4g} {:>7} {:>5}  {}\n", t.architecture, name, t.prior, t.value,
                       t.rows > 0 ? percent(t.value / t.prior - 1) : "-", t.rows,
                       t.rows > 0 ? fmt::format("{}", fmt::join(t.sources, ", ")) : "no uncapped row: prior kept");
  }
  // Residuals per GPU, in the order the GPUs first appear.
  std::vector<std::string> gpus;
  for (const auto& r : f.residuals)
    if (std::find(gpus.begin(), gpus.end(), r.gpu) == gpus.end()) gpus.push_back(r.gpu);
  out += "residuals per GPU (predicted / measured - 1; fractions of the datasheet peak, HBM or NVLink rate)\n";
  for (const auto& g : gpus) {
    double sum = 0;
    int n = 0;
    for (const auto& r : f.residuals)
      if (r.gpu == g && r.fitted) sum += std::fabs(r.error()), ++n;
    out += n > 0 ? fmt::format("  {}: {} fitted row{}, mean |error| {:.1f}%\n", g, n, n == 1 ? "" : "s", 100 * sum / n)
                 : fmt::format("  {}: no fitted row (a power-capped part: its rows are the part level)\n", g);
    for (const auto& r : f.residuals)
      if (r.gpu == g)
        out +=
            fmt::format("    {:<22} {:<24} {:<40} measured {:.3f} predicted {:.3f} {:>7}{}\n", r.source, r.id, r.term,
                        r.measured, r.predicted, percent(r.error()), r.fitted ? "" : "  (part level, not fitted)");
  }
  for (const auto& c : f.clocks)
    out += fmt::format(
        "part level: {} tensor_clock_fraction {:.4g} in its preset; its {} tensor-core row{} ({}) imply {:.3f} with "
        "the fitted architecture terms ({})\n",
        c.gpu, c.preset, c.rows, c.rows == 1 ? "" : "s", fmt::join(c.sources, ", "), c.implied,
        percent(c.preset / c.implied - 1));
  for (const auto& c : f.power_clocks)
    out += fmt::format(
        "part level: {} tensor_clock_fraction {:.4g} in its preset; at its {:g} W the sustained rates of its die held "
        "at other power limits ({}) imply {:.3f} of the rate at {:g} W: {} ({})\n",
        c.gpu, c.preset, c.power_W, fmt::join(c.sources, ", "), c.implied, c.reference_W, fmt::join(c.per_dtype, "; "),
        percent(c.preset / c.implied - 1));
  for (const auto& p : f.sustained)
    out += p.rows > 0 ? fmt::format(
                            "part level: {} sustained_tensor_fraction {:.4g} in its preset; its {} sustained "
                            "row{} ({}: {}) imply {:.3f} ({})\n",
                            p.gpu, p.preset, p.rows, p.rows == 1 ? "" : "s", fmt::join(p.sources, ", "),
                            fmt::join(p.per_row, ", "), p.implied, percent(p.preset / p.implied - 1))
                      : fmt::format(
                            "part level: {} sustained_tensor_fraction {:.4g} in its preset; no sustained row "
                            "of its own (its preset's source says where its value comes from)\n",
                            p.gpu, p.preset);
  for (const auto& n : f.not_fitted) out += "not fitted: " + n + "\n";
  return out;
}

}  // namespace tptune
