// From a search result or a simulated plan to the HTML report's input (html_report.h).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "sim/pipeline/step.h"
#include "sim/report/html_report.h"
#include "sim/report/search_report.h"
#include "sim/search/constraints.h"
#include "sim/search/search.h"

namespace tptune {

namespace {

constexpr double kGiB = 1073741824.0;

std::vector<ReportPlan> with_baselines(ReportPlan chosen, const std::vector<Baseline>& baselines) {
  std::vector<ReportPlan> plans{std::move(chosen)};
  for (const Baseline& b : baselines) plans.push_back(ReportPlan{b.name, "", b.error.empty(), b.error, b.report});
  return plans;
}

// `seq_len`: the sequence length(s) the facts state ("8192", or a search's "2048, 4096, 8192").
std::string cluster_fact(const Config& cfg, const ClusterSpec& c, const std::string& seq_len) {
  return fmt::format("cluster: {} node{} x {} {} ({} GPUs); training: seq_len {}, local batch {}, {}", c.nodes,
                     c.nodes == 1 ? "" : "s", c.gpus_per_node, c.gpu.name, c.world_size(), seq_len,
                     cfg.training.local_batch_size, to_string(cfg.training.dtype));
}

std::string model_fact(const Model& m) {
  return fmt::format("model: {} (dim {}, {} layers, {} heads / {} kv heads, ffn {}, vocab {})", m.name, m.dim,
                     m.n_layers, m.n_heads, m.n_kv_heads, m.ffn_dim, m.vocab_size);
}

}  // namespace

std::string search_html(const Config& cfg, const SearchResult& r, const std::vector<Baseline>& baselines,
                        const CostParams& cost) {
  const CandidateResult* w = r.winner();
  if (!w) throw Error("report: no plan fits, so there is no winner to report on");
  HtmlReportInput in;
  in.title = fmt::format("tp-plan search: {} on {} x {}", cfg.model.name, r.cluster.world_size(), r.cluster.gpu.name);
  in.facts = {model_fact(cfg.model), cluster_fact(cfg, r.cluster, fmt::format("{}", fmt::join(r.space.seq_lens, ", "))),
              fmt::format("{} candidates, {} feasible, objective {}, memory headroom {:g} GiB; config {}", r.evaluated,
                          r.feasible, to_string(r.space.objective), r.space.memory_headroom_gib, cfg.path)};
  in.facts.push_back(trust_text(r.trust));
  for (const auto& [reason, n] : pruned_by_text(r)) in.facts.push_back(fmt::format("pruned: {} ({})", reason, n));
  for (const CandidateResult& c : r.results.stored()) {
    // Lowered candidates (all stored: only statically pruned ones are not); not those the branch-and-bound skipped
    // (`--bound`): they have a memory but no schedule, and are not over the limit, so they have no point to draw (the
    // facts above count them).
    if (!c.has_memory || c.pruned == PruneReason::bound) continue;
    const Candidate& x = c.candidate;
    ReportPoint p;
    p.tp = x.tp_degree;
    p.float8 = x.float8 != Float8Recipe::none;
    p.async_tp = x.async_tp;
    p.scheduled = c.has_step;
    p.tokens_per_second_per_gpu = c.report.tokens_per_second_per_gpu;
    p.peak_gib = c.report.memory.peak / kGiB;
    p.label =
        fmt::format("{} tp {}, float8 {}, {}, loss parallel {}, AC {}, batch {}",
                    r.space.families[static_cast<size_t>(x.family)].name, x.tp_degree, to_string(x.float8),
                    x.async_tp ? "async" : "sync", x.loss_parallel ? "on" : "off", ac_label(x), x.local_batch_size) +
        (r.space.seq_lens.size() > 1 ? fmt::format(", seq {}", x.seq_len) : "");
    in.points.push_back(std::move(p));
  }
  in.memory_limit_gib = r.cluster.gpu.memory_bytes() / kGiB - r.space.memory_headroom_gib;
  for (const auto& [cause, n] : r.pruned)
    if (cause == PruneReason::memory) in.out_of_memory += n;
  ReportPlan win;
  win.name = "winner";
  win.ok = true;
  win.report = w->report;
  const Training wt = result_training(cfg, r, r.ranking[0]);
  const Plan wp = result_plan(r, r.ranking[0]);
  if (wp.pp_degree > 1) {
    // A pipeline's winner: its pipeline section from the pipeline simulated again (as --trace writes it, whatever
    // the search kept of it), no block timeline (html_report.h).
    win.report.pipeline = simulate_pipeline(cfg.model, wt, wp, r.cluster, cost).pipeline;
    in.plans = with_baselines(std::move(win), baselines);
    return html_report(in);
  }
  in.plans = with_baselines(std::move(win), baselines);
  // The winner's schedule, as --trace writes it.
  const Program p = lower(cfg.model, wt, wp);
  const OpCosts costs = cost_ops(p, r.cluster, cost);
  const Timeline tl = schedule(p, costs, cost);
  in.program = &p;
  in.costs = &costs;
  in.timeline = &tl;
  return html_report(in);
}

std::string simulate_html(const Config& cfg, const ClusterSpec& cluster, const CostParams& cost, const Program& p,
                          const OpCosts& costs, const Timeline& tl, const StepReport& report) {
  HtmlReportInput in;
  in.title = fmt::format("tp-plan simulate: {} on {} x {}", cfg.model.name, cluster.world_size(), cluster.gpu.name);
  in.facts = {model_fact(cfg.model), cluster_fact(cfg, cluster, std::to_string(cfg.training.seq_len)),
              fmt::format("config {}", cfg.path), trust_text(report.trust)};
  ReportPlan mine;
  mine.name = "this plan";
  mine.ok = true;
  mine.report = report;
  in.plans = with_baselines(std::move(mine),
                            plan_baselines(cfg, cluster, p.tp, cfg.search.memory_headroom_gib, cost, p.plan.framework));
  in.program = &p;
  in.costs = &costs;
  in.timeline = &tl;
  return html_report(in);
}

std::string simulate_pipeline_html(const Config& cfg, const ClusterSpec& cluster, const CostParams& cost,
                                   const Plan& plan, const StepReport& report) {
  if (report.pipeline.pp <= 1) throw Error("report: not a pipeline-parallel step (pp 1)");
  HtmlReportInput in;
  in.title = fmt::format("tp-plan simulate: {} on {} x {}", cfg.model.name, cluster.world_size(), cluster.gpu.name);
  in.facts = {
      model_fact(cfg.model), cluster_fact(cfg, cluster, std::to_string(cfg.training.seq_len)),
      fmt::format("pipeline: pp {}, {}, {} microbatches of {}", report.pipeline.pp, to_string(report.pipeline.schedule),
                  report.pipeline.microbatches, report.pipeline.microbatch_size),
      fmt::format("config {}", cfg.path), trust_text(report.trust)};
  ReportPlan mine;
  mine.name = "this plan";
  mine.ok = true;
  mine.report = report;
  in.plans = with_baselines(std::move(mine), plan_baselines(cfg, cluster, plan.tp_degree,
                                                            cfg.search.memory_headroom_gib, cost, plan.framework));
  return html_report(in);
}

}  // namespace tptune
