#include "sim/calibrate/published_fit.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "plans/util/error.h"
#include "plans/util/text_table.h"
#include "sim/cost/cost_param_fields.h"

namespace tptune {

namespace {

constexpr double kStartStep = 0.6931471805599453;  // ln 2
constexpr double kEndStep = 1e-4;
constexpr double kPriorSpan = 1000;  // the log-space bounds: at most [prior / 1000, prior x 1000]

// A parameter of the fit: its table entry and log-space bounds.
struct Axis {
  const CostParamField* field = nullptr;
  double prior = 0, lo = 0, hi = 0;  // in the parameter's own units
};

std::vector<Axis> make_axes(const CostParams& prior, const PublishedFitOptions& o) {
  if (o.names.empty()) throw Error("--fit: expected one or more cost parameter names");
  std::vector<Axis> axes;
  std::set<std::string> seen;
  for (const auto& name : o.names) {
    const CostParamField* f = find_cost_param(name);
    if (f == nullptr) {
      std::vector<std::string_view> names;
      for (const auto& field : cost_param_fields())
        if (!field.integral) names.push_back(field.name);
      throw Error(fmt::format("--fit {}: unknown cost parameter; expected one of {}", name, fmt::join(names, ", ")));
    }
    if (f->integral)
      throw Error(fmt::format("--fit {}: an integral parameter (a size or a switch); the fit takes real ones", name));
    if (!seen.insert(name).second) throw Error(fmt::format("--fit {}: named twice", name));
    Axis a;
    a.field = f;
    a.prior = f->get(prior);
    if (!(a.prior > 0))
      throw Error(fmt::format("--fit {}: the prior of {} is {}; a fit in log space needs a positive prior", name, o.gpu,
                              a.prior));
    if (a.prior < f->lo || a.prior > f->hi)
      throw Error(fmt::format("--fit {}: the prior of {} is {}, outside the parameter's bounds [{}, {}]", name, o.gpu,
                              a.prior, f->lo, f->hi));
    a.lo = std::max(f->lo, a.prior / kPriorSpan);
    a.hi = std::min(f->hi, a.prior * kPriorSpan);
    if (!(a.lo > 0) || !(a.hi > a.lo))
      throw Error(fmt::format("--fit {}: no positive range to search ([{}, {}])", name, f->lo, f->hi));
    axes.push_back(a);
  }
  return axes;
}

// The runs of rec on GPU `gpu`.
// The runs a fit may use. Pipeline-parallel runs (torchtitan's Tables 5 and 6) are held out: predicted and compared
// (tp-plan accuracy --published), never fitted to, so that they test the pipeline model rather than tune it.
std::vector<const PreparedRun*> runs_on(const PreparedRecord& rec, const std::string& gpu) {
  std::vector<const PreparedRun*> out;
  for (const auto& r : rec.runs)
    if (r.cluster.gpu.name == gpu && r.plan.pp_degree <= 1) out.push_back(&r);
  return out;
}

void refuse_no_runs(const PreparedRecord& rec, const std::string& gpu) {
  std::set<std::string> gpus;
  for (const auto& r : rec.runs) gpus.insert(r.cluster.gpu.name);
  throw Error(fmt::format("--gpu {}: no predicted run of the record runs on it (its runs' GPUs: {})", gpu,
                          gpus.empty() ? std::string("none") : fmt::format("{}", fmt::join(gpus, ", "))));
}

CostParams with_values(CostParams c, const std::vector<Axis>& axes, const std::vector<double>& values) {
  for (size_t i = 0; i < axes.size(); ++i) axes[i].field->set(c, values[i]);
  return c;
}

std::vector<PublishedPrediction> predict_all(const std::vector<const PreparedRun*>& runs, const CostParams& c) {
  std::vector<PublishedPrediction> out;
  out.reserve(runs.size());
  for (const PreparedRun* r : runs) out.push_back(predict_run(*r, c));
  return out;
}

double data_objective(const std::vector<const PreparedRun*>& runs, const std::vector<PublishedPrediction>& p) {
  double tps = 0, mem = 0;
  int n_mem = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    const PublishedMeasured& m = runs[i]->run->measured;
    if (!(p[i].tokens_per_second_per_gpu > 0)) return std::numeric_limits<double>::infinity();
    tps += std::pow(std::log(p[i].tokens_per_second_per_gpu / m.tokens_per_second_per_gpu), 2);
    if (m.peak_memory_gib && p[i].peak_memory_gib > 0) {
      mem += std::pow(std::log(p[i].peak_memory_gib / *m.peak_memory_gib), 2);
      ++n_mem;
    }
  }
  return tps / static_cast<double>(runs.size()) + (n_mem > 0 ? mem / n_mem : 0.0);
}

struct SearchResult {
  std::vector<double> values;
  double before = 0, after = 0;
  int evaluations = 0;
};

SearchResult search(const std::vector<const PreparedRun*>& runs, const CostParams& prior, const std::vector<Axis>& axes,
                    double lambda, const FitProgress& progress) {
  const size_t n = axes.size();
  std::vector<double> x(n), lo(n), hi(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = std::log(axes[i].prior);
    lo[i] = std::log(axes[i].lo);
    hi[i] = std::log(axes[i].hi);
  }
  SearchResult r;
  auto objective = [&](const std::vector<double>& y) {
    ++r.evaluations;
    std::vector<double> values(n);
    double reg = 0;
    for (size_t i = 0; i < n; ++i) {
      values[i] = std::exp(y[i]);
      reg += std::pow(y[i] - std::log(axes[i].prior), 2);
    }
    return data_objective(runs, predict_all(runs, with_values(prior, axes, values))) + lambda * reg;
  };
  double f = objective(x);
  r.before = f;
  int pass = 0;
  for (double step = kStartStep; step >= kEndStep;) {
    bool moved = false;
    for (size_t i = 0; i < n; ++i)
      for (double dir : {1.0, -1.0}) {
        std::vector<double> y = x;
        y[i] = std::clamp(x[i] + dir * step, lo[i], hi[i]);
        if (y[i] == x[i]) continue;
        const double fy = objective(y);
        if (fy < f) {
          x = std::move(y), f = fy, moved = true;
          break;
        }
      }
    ++pass;
    if (progress) progress(fmt::format("pass {}: step {:.4g} (ln), objective {:.6g}", pass, step, f));
    if (!moved) step /= 2;
  }
  r.after = f;
  for (double v : x) r.values.push_back(std::exp(v));
  return r;
}

std::vector<PublishedRunResult> results(const std::vector<const PreparedRun*>& runs,
                                        const std::vector<PublishedPrediction>& p) {
  std::vector<PublishedRunResult> out;
  for (size_t i = 0; i < runs.size(); ++i) out.push_back(run_result(*runs[i], p[i]));
  return out;
}

std::vector<std::string> source_ids(const std::vector<const PreparedRun*>& runs) {
  std::vector<std::string> ids;
  for (const PreparedRun* r : runs)
    if (std::find(ids.begin(), ids.end(), r->source) == ids.end()) ids.push_back(r->source);
  return ids;
}

std::vector<PublishedSourceResult> per_source(const std::vector<PublishedRunResult>& rs,
                                              const std::vector<std::string>& ids, ErrorSummary& overall) {
  std::vector<const PublishedRunResult*> all;
  for (const auto& r : rs) all.push_back(&r);
  overall = summarize_errors(all);
  return summarize_sources(rs, ids);
}

PublishedFit fit_runs(const std::vector<const PreparedRun*>& runs, const PublishedFitOptions& o,
                      const FitProgress& progress) {
  const CostParams prior = device_cost_params(runs.front()->cluster.gpu);
  const std::vector<Axis> axes = make_axes(prior, o);
  PublishedFit f;
  f.gpu = o.gpu;
  f.runs = static_cast<int>(runs.size());
  f.sources = source_ids(runs);
  if (progress) progress(fmt::format("fitting {} parameters to {} runs of {}", axes.size(), runs.size(), o.gpu));
  const SearchResult s = search(runs, prior, axes, o.lambda, progress);
  f.objective_before = s.before;
  f.objective_after = s.after;
  f.evaluations = s.evaluations;
  for (size_t i = 0; i < axes.size(); ++i)
    f.values.push_back({std::string(axes[i].field->name), axes[i].prior, s.values[i], axes[i].lo, axes[i].hi});
  f.before = per_source(results(runs, predict_all(runs, prior)), f.sources, f.overall_before);
  f.after =
      per_source(results(runs, predict_all(runs, with_values(prior, axes, s.values))), f.sources, f.overall_after);
  return f;
}

std::string summary_cells(const ErrorSummary& s) {
  return fmt::format("mean |err| {:5.1f}%  max |err| {:5.1f}%  signed {:+5.1f}%", 100 * s.mean_abs, 100 * s.max_abs,
                     100 * s.signed_mean);
}

}  // namespace

PublishedFit fit_published(const PreparedRecord& rec, const PublishedFitOptions& o, const FitProgress& progress) {
  const std::vector<const PreparedRun*> runs = runs_on(rec, o.gpu);
  if (runs.empty()) refuse_no_runs(rec, o.gpu);
  return fit_runs(runs, o, progress);
}

LosoReport loso_published(const PreparedRecord& rec, const PublishedFitOptions& o, const FitProgress& progress) {
  const std::vector<const PreparedRun*> runs = runs_on(rec, o.gpu);
  if (runs.empty()) refuse_no_runs(rec, o.gpu);
  LosoReport report;
  std::vector<PublishedRunResult> pooled;
  for (const auto& held : source_ids(runs)) {
    std::vector<const PreparedRun*> train, test;
    for (const PreparedRun* r : runs) (r->source == held ? test : train).push_back(r);
    if (train.empty())
      throw Error(fmt::format("--loso: every run on {} is of source {}: nothing left to fit without it", o.gpu, held));
    if (progress) progress(fmt::format("leave out {}", held));
    const PublishedFit f = fit_runs(train, o, progress);
    CostParams c = device_cost_params(runs.front()->cluster.gpu);
    for (const auto& v : f.values) find_cost_param(v.name)->set(c, v.value);
    std::vector<PublishedRunResult> rs = results(test, predict_all(test, c));
    std::vector<const PublishedRunResult*> ptrs;
    for (const auto& r : rs) ptrs.push_back(&r);
    report.rows.push_back({held, summarize_errors(ptrs), f.values});
    pooled.insert(pooled.end(), rs.begin(), rs.end());
  }
  std::vector<const PublishedRunResult*> all;
  for (const auto& r : pooled) all.push_back(&r);
  report.pooled = summarize_errors(all);
  return report;
}

Calibration published_calibration(const PublishedFit& f, const std::string& dir) {
  Calibration cal;
  cal.device = f.gpu;
  cal.environment = fmt::format("public record {} (tp-plan calibrate --published)", dir);
  cal.files = f.sources;
  const std::string source =
      fmt::format("fitted to {} runs of {} (tp-plan calibrate --published)", f.runs, fmt::join(f.sources, ", "));
  for (const auto& v : f.values) {
    FittedParam p;
    p.name = v.name;
    p.value = v.value;
    p.default_value = v.prior;
    p.op_class = "end_to_end";
    p.source = source;
    cal.params.push_back(p);
  }
  return cal;
}

std::string published_fit_text(const PublishedFit& f) {
  std::string out = fmt::format("fit of {} to {} runs of {} ({} evaluations)\n", f.gpu, f.runs,
                                fmt::join(f.sources, ", "), f.evaluations);
  TextTable t({{"parameter", 0},
               {"fitted", 0, Align::right, 2},
               {"prior", 0, Align::right, 2},
               {"change", 0, Align::right, 2},
               {"bounds", 0, Align::left, 2}});
  for (const auto& v : f.values)
    t.row({v.name, fmt::format("{:.4g}", v.value), fmt::format("{:.4g}", v.prior),
           fmt::format("{:+.1f}%", 100 * (v.value / v.prior - 1)), fmt::format("[{:.4g}, {:.4g}]", v.lo, v.hi)});
  out += t.str("  ");
  out += fmt::format("objective {:.6g} -> {:.6g}\n", f.objective_before, f.objective_after);
  out += "tokens/s error before -> after the fit\n";
  for (size_t i = 0; i < f.before.size(); ++i)
    out += fmt::format("  {:<32} {:>2} runs  before: {}\n  {:<32}           after:  {}\n", f.before[i].id,
                       f.before[i].summary.runs, summary_cells(f.before[i].summary), "",
                       summary_cells(f.after[i].summary));
  out += fmt::format("  {:<32} {:>2} runs  before: {}\n  {:<32}           after:  {}\n", "all", f.overall_before.runs,
                     summary_cells(f.overall_before), "", summary_cells(f.overall_after));
  return out;
}

std::string loso_text(const LosoReport& r) {
  std::string out = "leave-one-source-out (each source predicted by the fit on the others)\n";
  for (const auto& row : r.rows) {
    std::vector<std::string> vals;
    for (const auto& v : row.values) vals.push_back(fmt::format("{} {:.4g}", v.name, v.value));
    out += fmt::format("  {:<32} {:>2} runs  {}   (fit: {})\n", row.source, row.held_out.runs,
                       summary_cells(row.held_out), fmt::join(vals, ", "));
  }
  out += fmt::format("  leave-one-source-out mean |error| {:.1f}% over {} runs (max {:.1f}%, signed {:+.1f}%)\n",
                     100 * r.pooled.mean_abs, r.pooled.runs, 100 * r.pooled.max_abs, 100 * r.pooled.signed_mean);
  return out;
}

}  // namespace tptune
