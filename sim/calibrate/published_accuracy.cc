#include "sim/calibrate/published_accuracy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "plans/util/error.h"
#include "plans/util/text_table.h"
#include "sim/calibrate/accuracy.h"

namespace tptune {

ErrorSummary summarize_errors(const std::vector<const PublishedRunResult*>& runs) {
  ErrorSummary s;
  std::vector<double> measured, predicted;
  for (const PublishedRunResult* r : runs) {
    ++s.runs;
    s.mean_abs += std::abs(r->error);
    s.signed_mean += r->error;
    s.max_abs = std::max(s.max_abs, std::abs(r->error));
    measured.push_back(r->measured);
    predicted.push_back(r->predicted);
    if (r->memory_error) {
      ++s.memory_runs;
      s.memory_mean_abs += std::abs(*r->memory_error);
      s.memory_max_abs = std::max(s.memory_max_abs, std::abs(*r->memory_error));
    }
  }
  if (s.runs > 0) s.mean_abs /= s.runs, s.signed_mean /= s.runs;
  if (s.memory_runs > 0) s.memory_mean_abs /= s.memory_runs;
  s.kendall_tau = kendall_tau(predicted, measured);
  return s;
}

PublishedRunResult run_result(const PreparedRun& run, const PublishedPrediction& prediction) {
  PublishedRunResult r;
  r.source = run.source;
  r.id = run.run->id;
  r.plan = run.run->plan.summary();
  r.gpu = run.cluster.gpu.name;
  r.measured = run.run->measured.tokens_per_second_per_gpu;
  r.predicted = prediction.tokens_per_second_per_gpu;
  r.error = (r.predicted - r.measured) / r.measured;
  r.measured_memory_gib = run.run->measured.peak_memory_gib;
  r.predicted_memory_gib = prediction.peak_memory_gib;
  if (r.measured_memory_gib)
    r.memory_error = (r.predicted_memory_gib - *r.measured_memory_gib) / *r.measured_memory_gib;
  r.measured_mfu = run.run->measured.mfu;
  r.predicted_mfu = prediction.mfu;
  return r;
}

std::vector<PublishedSourceResult> summarize_sources(const std::vector<PublishedRunResult>& results,
                                                     const std::vector<std::string>& ids) {
  std::vector<PublishedSourceResult> out;
  for (const auto& id : ids) {
    std::vector<const PublishedRunResult*> mine;
    for (const auto& r : results)
      if (r.source == id) mine.push_back(&r);
    if (!mine.empty()) out.push_back({id, summarize_errors(mine)});
  }
  return out;
}

PublishedAccuracy published_accuracy(const std::vector<PublishedSource>& sources, const PreparedRecord& rec,
                                     const std::vector<PublishedPrediction>& predictions) {
  if (predictions.size() != rec.runs.size())
    throw Error(fmt::format("published_accuracy: {} predictions for {} runs", predictions.size(), rec.runs.size()));
  PublishedAccuracy a;
  a.not_predicted = rec.not_predicted;
  std::map<std::pair<std::string, std::string>, size_t> index;  // (source, run id) -> its row in a.runs
  for (size_t i = 0; i < rec.runs.size(); ++i) {
    a.runs.push_back(run_result(rec.runs[i], predictions[i]));
    index[{a.runs.back().source, a.runs.back().id}] = i;
  }
  std::vector<const PublishedRunResult*> all;
  for (const auto& r : a.runs) all.push_back(&r);
  a.overall = summarize_errors(all);
  std::vector<std::string> ids;
  for (const auto& s : sources) ids.push_back(s.id);
  a.sources = summarize_sources(a.runs, ids);
  for (const auto& s : sources) {
    for (const auto& r : s.runs)
      if (!r.expressible()) a.not_expressible.push_back({s.id, r.id, r.not_expressible});
    for (const auto& q : s.ratios) {
      PublishedRatioResult out{s.id, q.name, q.numerator, q.denominator, 0, std::nullopt, std::nullopt};
      out.measured = s.run(q.numerator)->measured.tokens_per_second_per_gpu /
                     s.run(q.denominator)->measured.tokens_per_second_per_gpu;
      auto num = index.find({s.id, q.numerator}), den = index.find({s.id, q.denominator});
      if (num != index.end() && den != index.end()) {
        out.predicted = a.runs[num->second].predicted / a.runs[den->second].predicted;
        out.difference = *out.predicted - out.measured;
      }
      a.ratios.push_back(std::move(out));
    }
  }
  return a;
}

PublishedAccuracy published_accuracy(const std::vector<PublishedSource>& sources, const PreparedRecord& rec,
                                     const CostParamsFor& params_for) {
  std::vector<PublishedPrediction> predictions;
  for (const auto& p : rec.runs) predictions.push_back(predict_run(p, params_for(p.cluster.gpu)));
  return published_accuracy(sources, rec, predictions);
}

namespace {

std::string pct(double f) { return fmt::format("{:+.1f}%", 100 * f); }
std::string abs_pct(double f) { return fmt::format("{:.1f}%", 100 * f); }
std::string tau_text(const std::optional<double>& t) { return t ? fmt::format("{:.3f}", *t) : std::string("-"); }

std::string summary_line(const ErrorSummary& s) {
  std::string out =
      fmt::format("{} runs: tokens/s mean |error| {}, max |error| {}, signed mean {}, Kendall tau {}", s.runs,
                  abs_pct(s.mean_abs), abs_pct(s.max_abs), pct(s.signed_mean), tau_text(s.kendall_tau));
  if (s.memory_runs > 0)
    out += fmt::format("; peak memory ({} runs) mean |error| {}, max |error| {}", s.memory_runs,
                       abs_pct(s.memory_mean_abs), abs_pct(s.memory_max_abs));
  return out;
}

}  // namespace

std::string published_accuracy_text(const PublishedAccuracy& a) {
  std::string out;
  for (const auto& s : a.sources) {
    out += fmt::format("source {}\n", s.id);
    TextTable t({{"run", 24},
                 {"plan", 22},
                 {"gpu", 10},
                 {"tok/s/GPU measured", 0, Align::right, 2},
                 {"predicted", 0, Align::right},
                 {"error", 0, Align::right},
                 {"memory GiB measured", 0, Align::right, 2},
                 {"predicted", 0, Align::right},
                 {"error", 0, Align::right},
                 {"MFU measured", 0, Align::right, 2},
                 {"predicted", 0, Align::right}});
    for (const auto& r : a.runs) {
      if (r.source != s.id) continue;
      t.row({r.id, r.plan, r.gpu, fmt::format("{:.1f}", r.measured), fmt::format("{:.1f}", r.predicted), pct(r.error),
             r.measured_memory_gib ? fmt::format("{:.1f}", *r.measured_memory_gib) : "-",
             fmt::format("{:.1f}", r.predicted_memory_gib), r.memory_error ? pct(*r.memory_error) : "-",
             r.measured_mfu ? abs_pct(*r.measured_mfu) : "-", abs_pct(r.predicted_mfu)});
    }
    out += t.str("  ");
    out += fmt::format("  {}\n\n", summary_line(s.summary));
  }
  if (!a.ratios.empty()) {
    out += "ratios (tokens/s of numerator / denominator)\n";
    TextTable t({{"source", 0},
                 {"ratio", 0, Align::left, 2},
                 {"measured", 0, Align::right, 2},
                 {"predicted", 0, Align::right},
                 {"difference", 0, Align::right}});
    for (const auto& q : a.ratios)
      t.row({q.source, q.name, fmt::format("{:.3f}", q.measured),
             q.predicted ? fmt::format("{:.3f}", *q.predicted) : "-",
             q.difference ? fmt::format("{:+.3f}", *q.difference) : "not predicted"});
    out += t.str("  ") + "\n";
  }
  if (!a.not_expressible.empty()) {
    out += "not expressible (listed, not predicted)\n";
    for (const auto& n : a.not_expressible) out += fmt::format("  {} {}: {}\n", n.source, n.id, n.reason);
    out += "\n";
  }
  if (!a.not_predicted.empty()) {
    out += "not predicted (tptune refused the run)\n";
    for (const auto& n : a.not_predicted) out += fmt::format("  {} {}: {}\n", n.source, n.id, n.error);
    out += "\n";
  }
  out += fmt::format("overall: {} runs of {} sources: tokens/s mean |error| {}, max |error| {}, signed mean {}\n",
                     a.overall.runs, a.sources.size(), abs_pct(a.overall.mean_abs), abs_pct(a.overall.max_abs),
                     pct(a.overall.signed_mean));
  for (const auto& t : a.terms) out += fmt::format("parameters: {}\n", t);
  return out;
}

namespace {

nlohmann::json opt(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); }

}  // namespace

nlohmann::json published_accuracy_json(const PublishedAccuracy& a) {
  nlohmann::json j;
  j["runs"] = nlohmann::json::array();
  for (const auto& r : a.runs)
    j["runs"].push_back({{"source", r.source},
                         {"id", r.id},
                         {"plan", r.plan},
                         {"gpu", r.gpu},
                         {"measured_tokens_per_second_per_gpu", r.measured},
                         {"predicted_tokens_per_second_per_gpu", r.predicted},
                         {"error", r.error},
                         {"measured_peak_memory_gib", opt(r.measured_memory_gib)},
                         {"predicted_peak_memory_gib", r.predicted_memory_gib},
                         {"memory_error", opt(r.memory_error)},
                         {"measured_mfu", opt(r.measured_mfu)},
                         {"predicted_mfu", r.predicted_mfu}});
  j["sources"] = nlohmann::json::array();
  for (const auto& s : a.sources)
    j["sources"].push_back({{"id", s.id},
                            {"runs", s.summary.runs},
                            {"mean_abs_error", s.summary.mean_abs},
                            {"max_abs_error", s.summary.max_abs},
                            {"signed_mean_error", s.summary.signed_mean},
                            {"kendall_tau", opt(s.summary.kendall_tau)},
                            {"memory_runs", s.summary.memory_runs},
                            {"memory_mean_abs_error", s.summary.memory_mean_abs},
                            {"memory_max_abs_error", s.summary.memory_max_abs}});
  j["ratios"] = nlohmann::json::array();
  for (const auto& q : a.ratios)
    j["ratios"].push_back({{"source", q.source},
                           {"name", q.name},
                           {"numerator", q.numerator},
                           {"denominator", q.denominator},
                           {"measured", q.measured},
                           {"predicted", opt(q.predicted)},
                           {"difference", opt(q.difference)}});
  j["not_expressible"] = nlohmann::json::array();
  for (const auto& n : a.not_expressible)
    j["not_expressible"].push_back({{"source", n.source}, {"id", n.id}, {"reason", n.reason}});
  j["not_predicted"] = nlohmann::json::array();
  for (const auto& n : a.not_predicted)
    j["not_predicted"].push_back({{"source", n.source}, {"id", n.id}, {"error", n.error}});
  j["overall"] = {{"runs", a.overall.runs},
                  {"sources", a.sources.size()},
                  {"mean_abs_error", a.overall.mean_abs},
                  {"max_abs_error", a.overall.max_abs}};
  j["terms"] = a.terms;
  return j;
}

std::vector<std::string> figures_worse_than(const PublishedAccuracy& a, const nlohmann::json& committed,
                                            const std::string& committed_name) {
  if (!committed.is_object() || !committed.contains("sources") || !committed["sources"].is_array())
    throw Error(
        fmt::format("{}: expected a tp-plan accuracy --published --json file (with \"sources\")", committed_name));
  std::vector<std::string> worse;
  constexpr double kErrorSlack = 0.005, kTauSlack = 0.01;
  for (const auto& c : committed["sources"]) {
    auto number = [&](const char* k) -> std::optional<double> {
      if (!c.contains(k) || c[k].is_null()) return std::nullopt;
      if (!c[k].is_number()) throw Error(fmt::format("{}: sources[].{}: expected a number or null", committed_name, k));
      return c[k].get<double>();
    };
    if (!c.contains("id") || !c["id"].is_string())
      throw Error(fmt::format("{}: sources[]: expected an \"id\" string", committed_name));
    const std::string id = c["id"].get<std::string>();
    auto it = std::find_if(a.sources.begin(), a.sources.end(), [&](const auto& s) { return s.id == id; });
    if (it == a.sources.end()) {
      worse.push_back(fmt::format("{}: no run predicted now (committed in {})", id, committed_name));
      continue;
    }
    const ErrorSummary& s = it->summary;
    if (auto runs = number("runs"); runs && s.runs < *runs)
      worse.push_back(fmt::format("{}: {} runs predicted, committed {}", id, s.runs, *runs));
    auto check = [&](const char* k, double now, const char* what) {
      if (auto was = number(k); was && now > *was + kErrorSlack)
        worse.push_back(fmt::format("{}: {} {:.1f}%, committed {:.1f}% (more than 0.5 points worse)", id, what,
                                    100 * now, 100 * *was));
    };
    check("mean_abs_error", s.mean_abs, "tokens/s mean |error|");
    check("max_abs_error", s.max_abs, "tokens/s max |error|");
    check("memory_max_abs_error", s.memory_max_abs, "peak memory max |error|");
    if (auto was = number("kendall_tau"); was) {
      if (!s.kendall_tau || *s.kendall_tau < *was - kTauSlack)
        worse.push_back(fmt::format("{}: Kendall tau {}, committed {:.3f} (lower by more than 0.01)", id,
                                    tau_text(s.kendall_tau), *was));
    }
  }
  return worse;
}

}  // namespace tptune
