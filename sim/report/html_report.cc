// The HTML report document (html_report.h): title, summary table, the four charts, and the CSS that makes it
// readable on screen and on paper. No script and no external resource: the file opens anywhere, offline.
#include "sim/report/html_report.h"

#include <fmt/format.h>

#include "plans/util/error.h"
#include "sim/report/svg.h"

namespace tptune {

namespace {

constexpr double kGiB = 1073741824.0;

constexpr const char* kCss = R"(
body { font-family: "DejaVu Sans", Helvetica, Arial, sans-serif; color: #222; background: #fff;
       max-width: 860px; margin: 24px auto; padding: 0 16px; line-height: 1.4; }
h1 { font-size: 22px; margin-bottom: 4px; }
h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #ccc; padding-bottom: 3px; }
p.note, ul.facts { color: #555; font-size: 13px; }
ul.facts { padding-left: 18px; margin-top: 4px; }
table { border-collapse: collapse; font-size: 13px; width: 100%; }
th, td { border-bottom: 1px solid #e3e3e3; padding: 4px 6px; text-align: right; }
th:first-child, td:first-child, td.plan { text-align: left; }
th { background: #f3f3f3; }
svg { width: 100%; height: auto; display: block; }
svg text { font-family: "DejaVu Sans", Helvetica, Arial, sans-serif; fill: #222; }
svg text.small { font-size: 11px; }
svg text.tiny { font-size: 9px; fill: #fff; }
svg text.label { font-size: 12px; font-weight: bold; }
svg text.axis { font-size: 13px; }
svg text.limit { fill: #b00; }
@media print {
  body { max-width: none; margin: 0; }
  h2 { break-after: avoid; }
  svg, table { break-inside: avoid; }
}
)";

std::string describe(const StepReport& r) {
  // "pp 8 (Interleaved1F1B) " for pipeline-parallel plans only.
  const std::string pp = r.pp_degree > 1 ? fmt::format("pp {} ({}) ", r.pp_degree, to_string(r.pp_schedule)) : "";
  return fmt::format("{} {}tp {} dp {}, float8 {}, {}, loss parallel {}, AC {}, batch {}", r.plan, pp, r.tp_degree,
                     r.dp_shard, to_string(r.float8), r.async_tp ? "async TP" : "sync TP",
                     r.loss_parallel ? "on" : "off", ac_text(r.activation_checkpointing, r.ac_layers, r.n_layers),
                     r.local_batch_size);
}

std::string summary_table(const std::vector<ReportPlan>& plans) {
  std::string o =
      "<table>\n<tr><th>plan</th><th>configuration</th><th>step (ms)</th><th>tokens/s per GPU</th><th>MFU</th>"
      "<th>peak memory (GiB)</th><th>exposed comm</th></tr>\n";
  for (const auto& p : plans) {
    if (!p.ok) {
      o += fmt::format("<tr><td>{}</td><td class=\"plan\" colspan=\"6\">not simulated: {}</td></tr>\n",
                       svg::escape(p.name), svg::escape(p.error));
      continue;
    }
    const StepReport& r = p.report;
    const double exposed = r.step_time_ms > 0 ? (r.exposed_tp_comm_ms + r.exposed_dp_comm_ms) / r.step_time_ms : 0;
    o += fmt::format(
        "<tr><td><b>{}</b></td><td class=\"plan\">{}</td><td>{:.1f}</td><td>{:.0f}</td><td>{:.1f}%</td>"
        "<td>{:.1f}{}</td><td>{:.1f}%</td></tr>\n",
        svg::escape(p.name), svg::escape(p.description.empty() ? describe(r) : p.description), r.step_time_ms,
        r.tokens_per_second_per_gpu, 100 * r.mfu, r.memory.peak / kGiB, r.memory.fits ? "" : " (over)", 100 * exposed);
  }
  return o + "</table>\n";
}

}  // namespace

std::string html_report(const HtmlReportInput& in) {
  if (in.plans.empty() || !in.plans[0].ok) throw Error("report: no simulated plan to report on");
  const StepReport& chosen = in.plans[0].report;
  std::string o =
      "<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n"
      "<meta charset=\"utf-8\"/>\n";
  o += fmt::format("<title>{}</title>\n<style>{}</style>\n</head>\n<body>\n", svg::escape(in.title), kCss);
  o += fmt::format("<h1>{}</h1>\n<ul class=\"facts\">\n", svg::escape(in.title));
  for (const auto& f : in.facts) o += fmt::format("<li>{}</li>\n", svg::escape(f));
  o += "</ul>\n";
  o += summary_table(in.plans);

  if (!in.points.empty()) {
    o += "<h2>Every evaluated candidate</h2>\n";
    o += html_scatter(in.points, in.memory_limit_gib, in.plans, in.out_of_memory);
    o += "<p class=\"note\">Up and to the left is better. Candidates pruned before lowering (constraints, redundant "
         "at tp 1) are not drawn; their counts are in the facts above.</p>\n";
  }
  o += fmt::format("<h2>Where the time goes: {} against the baselines</h2>\n", svg::escape(in.plans[0].name));
  const std::string chosen_name = in.plans[0].name == "winner" ? "the winner" : in.plans[0].name;
  o += html_breakdown_bars(in.plans);
  o += "<p class=\"note\">Compute plus the communication the compute stream waits for (exposed), per 1000 tokens "
       "per GPU: step time x tp x pp / (local batch x seq_len / cp, x gradient accumulation steps) x 1000, so that "
       "plans with different degrees and batches compare. Overlapped communication costs nothing here; a pipeline's "
       "bubble is the rest of its step (its last rank's idle time).</p>\n";
  if (in.program && in.costs && in.timeline) {
    o += fmt::format("<h2>One block of {}, forward and backward</h2>\n", svg::escape(chosen_name));
    o += html_block_timeline(*in.program, *in.costs, *in.timeline);
    o += "<p class=\"note\">The same schedule as the Chrome trace (--trace): each box is one op instance on the "
         "stream that runs it.</p>\n";
  }
  if (chosen.pipeline.pp > 1) {
    o += fmt::format("<h2>The pipeline of {}: each pp rank's schedule</h2>\n", svg::escape(chosen_name));
    o += html_pipeline_tables(chosen.pipeline);
    o += html_pipeline_timeline(chosen.pipeline);
    o += "<p class=\"note\">One pass of the schedule (one gradient accumulation step), as simulated: each box is "
         "one action of torch's schedule on its rank (stage, kind, microbatch: 0F3 is stage 0's forward of "
         "microbatch 3), hatched where the rank idles. The same timeline as --trace and tp-plan explain. A rank's step "
         "ends after its passes (one per gradient accumulation step), its unhidden gradient reduction and the "
         "optimizer.</p>\n";
  }
  o += fmt::format("<h2>Memory per GPU at the peak ({})</h2>\n", svg::escape(chosen.memory.peak_phase));
  o += html_memory(chosen.memory);
  if (chosen.pipeline.pp > 1)
    o += "<p class=\"note\">Of the pp rank with the highest peak (each rank's is in the pipeline's table).</p>\n";
  o += "<p class=\"note\">Predicted by tptune's cost model (calibrate it with tp-plan calibrate), not measured."
       "</p>\n</body>\n</html>\n";
  return o;
}

}  // namespace tptune
