#pragma once
// The HTML report of `tp-plan search --report FILE` and `tp-plan simulate --report FILE`: one self-contained file
// (inline SVG and CSS; no script, no network), well-formed XHTML, printable. It shows
//   1. (search) every evaluated candidate: tokens/s per GPU against peak memory per GPU, colour by TP degree, shape
//      by float8 / async TP, the memory limit as a line, the Pareto front joined, the winner and torchtitan's
//      default marked; candidates over the memory limit (never scheduled, so without a throughput) as ticks on the
//      x axis;
//   2. the chosen plan against vanilla and torchtitan's default: stacked bars of compute, exposed TP and exposed DP
//      communication in ms per 1000 tokens per GPU (step time x tp / (local batch x seq_len) x 1000);
//   3. one block's forward and backward on the compute / TP / DP streams, from the same Timeline the Chrome trace
//      (sim/report/trace.h) is written from (a steady-state instance: the middle layer);
//   4. the memory breakdown of the chosen plan's peak against the GPU's capacity.
// A pipeline-parallel plan (its StepReport::pipeline.pp > 1) adds, before the memory, the pipeline's figures (schedule,
// stages, microbatches, bubble, P2P per microbatch, each rank's busy / idle / end and peak memory) and each pp rank's
// schedule: a row per rank, a box per action of PipelineReport::timeline, idle time hatched. Its block timeline (3.)
// is absent: the stages' costs come from a microbatch Program the report does not hold.

#include <string>
#include <vector>

#include "plans/program/program.h"
#include "sim/cost/cost_params.h"
#include "sim/simulate.h"
#include "sim/timeline/timeline.h"

namespace tptune {

// One evaluated search candidate.
struct ReportPoint {
  std::string label;  // the plan in words, for the tooltip
  int tp = 1;
  bool float8 = false, async_tp = false;
  bool scheduled = false;  // false: over the memory limit, not scheduled (no throughput)
  double tokens_per_second_per_gpu = 0;
  double peak_gib = 0;
};

struct ReportPlan {
  std::string name;  // "winner" | "vanilla" | "torchtitan default" | "this plan"
  std::string description;
  bool ok = false;    // false: `error` says why there is no report
  std::string error;  // e.g. the lowering error of a baseline
  StepReport report;
};

struct HtmlReportInput {
  std::string title;                // "tp-plan search: llama3-8b on 8 x h100-sxm"
  std::vector<std::string> facts;   // lines under the title (config, cluster, counts)
  std::vector<ReportPoint> points;  // empty for simulate: no scatter
  double memory_limit_gib = 0;      // capacity - headroom: the feasibility line of the scatter
  // Candidates pruned as out of memory (the search's count): those among `points` (lowered, their peak known) and the
  // larger batches of plans already over the limit, which the search never lowers (sim/search/search.h).
  size_t out_of_memory = 0;
  std::vector<ReportPlan> plans;     // plans[0] is the chosen plan (winner / simulated plan); then the baselines
  const Program* program = nullptr;  // the chosen plan's Program, costs and timeline (for the block timeline)
  const OpCosts* costs = nullptr;
  const Timeline* timeline = nullptr;
};

// The document. tptune::Error when `plans` is empty or plans[0] has no report.
std::string html_report(const HtmlReportInput& in);

// Parts (each an <svg> element), for the report and its tests.
// The scatter: `out_of_memory` as in HtmlReportInput (at least the unscheduled points). Unscheduled points are ticks on
// the x axis, one per pixel column they fall in (taller where several coincide, each tick's tooltip counting its
// candidates; those past the axis at its end), and the legend's count is `out_of_memory`, split into the ticks' and
// the never-lowered ones. The plans' names are placed where they cover no marker (svg::place_label).
std::string html_scatter(const std::vector<ReportPoint>& points, double memory_limit_gib,
                         const std::vector<ReportPlan>& plans, size_t out_of_memory = 0);
std::string html_breakdown_bars(const std::vector<ReportPlan>& plans);
std::string html_block_timeline(const Program& p, const OpCosts& costs, const Timeline& tl);
std::string html_memory(const MemoryReport& m);
// The pipeline's parts (tptune::Error when p.pp is 1): two <table>s (the figures; a row per rank, class "pp-rank") and
// an <svg> of the schedule: per rank one background rect (class "pp-row"), one rect per action (class "pp-action",
// coloured by kind, labelled "0F3" where wide enough, the tooltip naming stage and microbatch) and one per idle gap
// (class "pp-idle"), on an axis of ms from the start of the pass. The timeline refuses (tptune::Error naming --report)
// a pipeline of more actions than one output lists (sim/report/trace.h: kMaxListedEvents).
std::string html_pipeline_tables(const PipelineReport& p);
std::string html_pipeline_timeline(const PipelineReport& p);
// The end of the drawn pass in us: the schedule's pass or the latest action's end, whichever is later.
double pipeline_pass_us(const PipelineReport& p);
// A rank's idle gaps in [0, pipeline_pass_us): before its first action, between its actions, after its last.
struct PipelineIdle {
  double start_us = 0, end_us = 0;
};
std::vector<PipelineIdle> pipeline_idle_gaps(const PipelineReport& p, size_t rank);

// The two reports the tools write. A search's: every lowered candidate, the winner (rescheduled for its timeline)
// against its baselines (sim/report/search_report.h). A simulated plan's: the plan against the same two baselines.
// Both throw tptune::Error when there is nothing to report (no winner).
struct SearchResult;
struct Baseline;
struct Config;
std::string search_html(const Config& cfg, const SearchResult& r, const std::vector<Baseline>& baselines,
                        const CostParams& cost);
std::string simulate_html(const Config& cfg, const ClusterSpec& cluster, const CostParams& cost, const Program& p,
                          const OpCosts& costs, const Timeline& tl, const StepReport& report);
// A PP plan's (report of simulate_pipeline()): the plan against the same baselines (without PP, on the whole cluster,
// at the plan's tp), its pipeline section in place of the block timeline.
std::string simulate_pipeline_html(const Config& cfg, const ClusterSpec& cluster, const CostParams& cost,
                                   const Plan& plan, const StepReport& report);

// Milliseconds per 1000 tokens per GPU of a step report's total and each breakdown term (compute, exposed TP,
// exposed DP), the unit of the bars: ms x tp x pp / (gradient_accumulation_steps x local batch x seq_len / cp) x 1000,
// the tokens per GPU of tokens_per_second_per_gpu (sim/simulate.h, sim/pipeline/step.h).
double ms_per_1k_tokens(const StepReport& r, double ms);

}  // namespace tptune
