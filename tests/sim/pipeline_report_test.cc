// The outputs of a pipeline-parallel step (sim/pipeline/step.h) beyond its text: the HTML report's pipeline section
// (sim/report/html_report.h), the Chrome trace (sim/report/pipeline_trace.h) and explain's JSON
// (sim/report/pipeline_explain_json.h), and the check baseline (sim/check/baseline.h). Structure asserted against the
// PipelineReport they draw (a row or thread per rank, a box or event per action, the idle gaps summing to each rank's
// idle time); no timing goldens.
#include <algorithm>
#include <catch2/catch.hpp>
#include <map>

#include "plans/util/error.h"
#include "sim/check/baseline.h"
#include "sim/check/compare.h"
#include "sim/pipeline/step.h"
#include "sim/report/html_report.h"
#include "sim/report/pipeline_explain_json.h"
#include "sim/report/pipeline_text.h"
#include "sim/report/pipeline_trace.h"
#include "sim/report/trace.h"
#include "sim/simulate.h"
#include "tests/fixtures.h"

using namespace tptune;

namespace {

// tp 2 x pp 2 x dp_shard 2 on one node of 8 H100s, 8 blocks, 4 microbatches of 1 (as tests/sim/pipeline_step_test.cc).
StepReport pp_step(PipelineScheduleKind kind, int stages_per_rank = 0, int64_t local_batch = 4) {
  PlanToggles t{.tp_degree = 2, .dp_shard = 2, .loss_parallel = true, .local_batch_size = local_batch};
  t.pp_degree = 2;
  t.pp_schedule = kind;
  t.pp_stages_per_rank = stages_per_rank;
  const Plan plan = test::make_plan("sequence_parallel", t);
  return simulate_pipeline(test::small_model(8), Training{.seq_len = 1024}, plan, test::cluster_of("h100-sxm", 1),
                           default_cost_params());
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

size_t actions(const PipelineReport& p) {
  size_t n = 0;
  for (const auto& rank : p.timeline) n += rank.size();
  return n;
}

}  // namespace

TEST_CASE("pipeline report: a row per rank, a box per action, the idle gaps are each rank's idle time",
          "[pp][report]") {
  for (const auto& [kind, v] :
       {std::pair{PipelineScheduleKind::one_f_one_b, 0}, std::pair{PipelineScheduleKind::interleaved_1f1b, 2},
        std::pair{PipelineScheduleKind::zbv_zero_bubble, 0}}) {
    CAPTURE(to_string(kind));
    const StepReport r = pp_step(kind, v);
    const PipelineReport& p = r.pipeline;
    REQUIRE(p.timeline.size() == 2);
    // 4 microbatches through every stage: one F each, and one B or one I (input gradient, split backward) each.
    size_t forwards = 0, backwards = 0;
    for (const auto& rank : p.timeline)
      for (const TimedPipelineAction& a : rank) {
        forwards += a.action.kind == PipelineActionKind::F;
        backwards += a.action.kind == PipelineActionKind::B || a.action.kind == PipelineActionKind::I;
      }
    CHECK(forwards == 4 * p.stage_layers.size());
    CHECK(backwards == 4 * p.stage_layers.size());
    const std::string svg = html_pipeline_timeline(p);
    CHECK(count(svg, "class=\"pp-row\"") == 2);
    CHECK(count(svg, "class=\"pp-action\"") == actions(p));
    size_t gaps = 0;
    for (size_t k = 0; k < p.timeline.size(); ++k) {
      double idle_us = 0;
      for (const PipelineIdle& g : pipeline_idle_gaps(p, k)) {
        CHECK(g.end_us > g.start_us);
        idle_us += g.end_us - g.start_us;
        ++gaps;
      }
      // The pass less the rank's actions: PipelineRankReport::idle_ms (the pass drawn is the schedule's).
      CHECK(pipeline_pass_us(p) == Approx(p.schedule_ms * 1e3));
      CHECK(idle_us / 1e3 == Approx(p.ranks[k].idle_ms).margin(1e-9));
      // Every action is in the drawing with its stage and microbatch named.
      for (const TimedPipelineAction& a : p.timeline[k])
        CHECK(svg.find(fmt::format("rank {}: {} ", k, to_string(a.action))) != std::string::npos);
    }
    CHECK(count(svg, "class=\"pp-idle\"") == gaps);
    CHECK(gaps >= 2);  // 1F1B on 2 ranks: rank 1 waits for its first activation, rank 0 for its first gradient
  }
}

TEST_CASE("pipeline report: the document's pipeline section, and none for a step without a pipeline", "[pp][report]") {
  const StepReport r = pp_step(PipelineScheduleKind::one_f_one_b);
  HtmlReportInput in;
  in.title = "pp";
  in.plans = {ReportPlan{"this plan", "", true, "", r}};
  const std::string html = html_report(in);
  CHECK(html.find("The pipeline of this plan: each pp rank's schedule") != std::string::npos);
  CHECK(count(html, "<tr class=\"pp-rank\">") == 2);
  CHECK(count(html, "<svg ") == 3);  // bars, the pipeline's schedule, memory (no block timeline: no Program)
  CHECK(html.find("pipeline bubble") != std::string::npos);
  CHECK(html.find(">1F1B<") == std::string::npos);  // the schedule is in a cell with the degree
  CHECK(html.find("2, 1F1B") != std::string::npos);
  StepReport flat = r;
  flat.pipeline = PipelineReport{};
  CHECK_THROWS_AS(html_pipeline_timeline(flat.pipeline), Error);
  CHECK_THROWS_AS(html_pipeline_tables(flat.pipeline), Error);
  in.plans = {ReportPlan{"this plan", "", true, "", flat}};
  const std::string no_pp = html_report(in);
  CHECK(no_pp.find("pp-rank") == std::string::npos);
  CHECK(no_pp.find("pipeline bubble") == std::string::npos);
}

TEST_CASE("pipeline report: ms per 1000 tokens per GPU counts the pp, cp and accumulation degrees", "[pp][report]") {
  StepReport r;
  r.tp_degree = 8;
  r.pp_degree = 4;
  r.cp_degree = 2;
  r.gradient_accumulation_steps = 2;
  r.local_batch_size = 16;
  r.seq_len = 8192;
  // Tokens per GPU: 2 x 16 x 8192 / cp 2 = 131072, over tp 8 x pp 4 = 32 GPUs:
  // 1000 ms x 32 / 131072 x 1000 = 244.140625 ms per 1000 tokens per GPU.
  CHECK(ms_per_1k_tokens(r, 1000) == Approx(244.140625));
  // And from the step: the same as 1 / tokens_per_second_per_gpu of a pipeline's report.
  const StepReport pp = pp_step(PipelineScheduleKind::one_f_one_b);
  CHECK(ms_per_1k_tokens(pp, pp.step_time_ms) == Approx(1e6 / pp.tokens_per_second_per_gpu));
}

TEST_CASE("pipeline trace: a thread per rank, an event per action at its simulated time", "[pp][report]") {
  const StepReport r = pp_step(PipelineScheduleKind::interleaved_1f1b, 2);
  const PipelineReport& p = r.pipeline;
  // Through its text, as the tool writes it: the document parses back.
  const nlohmann::json t = nlohmann::json::parse(pipeline_chrome_trace(p).dump());
  std::map<int, std::string> threads;
  size_t complete = 0;
  for (const nlohmann::json& e : t.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      threads[e.at("tid").get<int>()] = e.at("args").at("name").get<std::string>();
    if (e.at("ph") != "X") continue;
    ++complete;
    const int rank = e.at("tid").get<int>();
    REQUIRE(rank >= 0);
    REQUIRE(static_cast<size_t>(rank) < p.timeline.size());
    // The event is one of its rank's actions, at that action's time.
    const auto& actions = p.timeline[static_cast<size_t>(rank)];
    const auto it = std::find_if(actions.begin(), actions.end(), [&e](const TimedPipelineAction& a) {
      return to_string(a.action) == e.at("args").at("action").get<std::string>();
    });
    REQUIRE(it != actions.end());
    CHECK(e.at("name") ==
          fmt::format("{} s{} mb{}", to_string(it->action.kind), it->action.stage, it->action.microbatch));
    CHECK(e.at("ts").get<double>() == it->start_us);
    CHECK(e.at("dur").get<double>() == Approx(it->end_us - it->start_us));
  }
  CHECK(complete == actions(p));
  // 2 ranks of 2 stages each (Interleaved1F1B's default): rank 0 holds stages 0 and 2.
  REQUIRE(threads.size() == 2);
  CHECK(threads[0] == "pp rank 0 (stages 0, 2)");
  CHECK(threads[1] == "pp rank 1 (stages 1, 3)");
  CHECK_THROWS_AS(pipeline_chrome_trace(PipelineReport{}), Error);
}

TEST_CASE("pipeline reports: a V schedule's middle stages hand over on one rank, counted apart", "[pp][report]") {
  // ZBVZeroBubble on pp 2: rank 0 holds stages 0 and 3, rank 1 stages 1 and 2. Of the 3 stage boundaries, 0|1 and 2|3
  // cross ranks (2 x 2 = 4 transfers per microbatch, 16 per pass of 4); 1|2 is a local hand-over, both ways.
  const StepReport r = pp_step(PipelineScheduleKind::zbv_zero_bubble);
  CHECK(pipeline_rank_transfers(r.pipeline) == 4);
  const nlohmann::json j = nlohmann::json::parse(pipeline_explain_json(r.pipeline).dump());
  CHECK(j.at("p2p").at("per_microbatch") == 4);
  CHECK(j.at("p2p").at("per_pass") == 16);
  CHECK_THAT(
      pipeline_explain_text(r),
      Catch::Contains("2 x 2 stage boundaries between ranks = 4 transfers per microbatch, 16 per schedule pass") &&
          Catch::Contains("; 2 local hand-overs between stages on one rank (free)"));
}

TEST_CASE("pipeline explain JSON: every module on one stage in order, each rank's actions as scheduled",
          "[pp][report]") {
  const StepReport r = pp_step(PipelineScheduleKind::interleaved_1f1b, 2);
  const PipelineReport& p = r.pipeline;
  const nlohmann::json j = nlohmann::json::parse(pipeline_explain_json(p).dump());
  CHECK(j.at("pp_degree") == 2);
  CHECK(j.at("schedule") == "Interleaved1F1B");
  CHECK(j.at("microbatches") == 4);
  // 8 blocks over 4 stages: the embedding, layers.0 .. layers.7 in order, then the norm and output, each once.
  std::vector<std::string> modules;
  REQUIRE(j.at("stages").size() == 4);
  for (size_t s = 0; s < 4; ++s) {
    const nlohmann::json& st = j.at("stages")[s];
    CHECK(st.at("stage") == s);
    // Interleaved: stage s on rank s mod pp.
    CHECK(st.at("pp_rank") == s % 2);
    for (const auto& m : st.at("modules")) modules.push_back(m.get<std::string>());
  }
  const std::vector<std::string> want{"tok_embeddings", "layers.0", "layers.1", "layers.2", "layers.3", "layers.4",
                                      "layers.5",       "layers.6", "layers.7", "norm",     "output"};
  CHECK(modules == want);
  // 4 stages: 3 hops each way = 6 transfers per microbatch, 24 per pass of 4 microbatches.
  CHECK(j.at("p2p").at("per_microbatch") == 6);
  CHECK(j.at("p2p").at("per_pass") == 24);
  CHECK(j.at("p2p").at("bytes") == p.p2p_bytes);
  REQUIRE(j.at("ranks").size() == 2);
  for (size_t k = 0; k < 2; ++k) {
    const nlohmann::json& acts = j.at("ranks")[k].at("actions");
    REQUIRE(acts.size() == p.timeline[k].size());
    for (size_t i = 0; i < acts.size(); ++i) {
      CHECK(acts[i].at("action") == to_string(p.timeline[k][i].action));
      CHECK(acts[i].at("start_us").get<double>() == p.timeline[k][i].start_us);
      CHECK(acts[i].at("end_us").get<double>() == p.timeline[k][i].end_us);
    }
  }
  CHECK_THROWS_AS(pipeline_explain_json(PipelineReport{}), Error);
}

// Issue 37, class 5: a pipeline within the input limits (10,000 layers, pp 1024, 4,096 microbatches: 8.4 million
// actions) wrote a 2.8 GB report and a 1.5 GB trace in 14 GB of memory. Each output that lists the actions refuses
// more than kMaxListedEvents before rendering, naming its option; explain's text says so in place of the drawing.
TEST_CASE("pipeline outputs: more actions than one output lists are refused before rendering, naming the option",
          "[pp][report]") {
  StepReport r = pp_step(PipelineScheduleKind::one_f_one_b);
  PipelineReport& p = r.pipeline;
  // Pad rank 0's timeline to exactly the bound: still listed (its last padded action sits past the pass).
  const size_t real = actions(p);
  TimedPipelineAction last = p.timeline[0].back();
  p.timeline[0].resize(p.timeline[0].size() + static_cast<size_t>(kMaxListedEvents) - real, last);
  REQUIRE(pipeline_action_count(p) == kMaxListedEvents);
  CHECK_NOTHROW(check_pipeline_listed(p, "--trace"));
  // One more: refused, every output naming itself; 2 ranks x 4 microbatches of 1 stage per rank (1F1B on pp 2).
  p.timeline[1].push_back(last);
  const std::string what =
      ": 1000001 pipeline actions (pp 2, 4 microbatches, 1 stage per rank), more than 1000000, the most one output "
      "lists (docs/file-formats.md); fewer microbatches (a smaller local batch or a larger pp_microbatch_size) or a "
      "smaller pp list fewer; or leave ";
  CHECK_THROWS_WITH(pipeline_chrome_trace(p), "--trace" + what + "--trace out");
  CHECK_THROWS_WITH(html_pipeline_timeline(p), "--report" + what + "--report out");
  CHECK_THROWS_WITH(pipeline_explain_json(p), "--json" + what + "--json out");
  CHECK_THAT(pipeline_explain_text(r, 10),
             Catch::Contains("  schedule: 1000001 pipeline actions (pp 2, 4 microbatches, 1 stage per rank), more "
                             "than 1000000, the most one output lists: not drawn\n") &&
                 !Catch::Contains("each rank's actions in order"));
}

TEST_CASE("pipeline check baseline: the bubble completes the breakdown, each stage's actions are its ops",
          "[pp][report][check]") {
  const StepReport r = pp_step(PipelineScheduleKind::one_f_one_b);
  const PipelineReport& p = r.pipeline;
  const CheckBaseline b = baseline_from_report(r);
  CHECK(b.setup.at("pp") == "2 (1F1B, 1 stage per rank, 4 microbatches of 1)");
  CHECK(b.step_time_ms == r.step_time_ms);
  CHECK(b.peak_memory_gib == Approx(r.memory.peak / 1073741824.0));
  // compute + exposed TP + exposed DP + the bubble = the step.
  double sum = 0;
  for (const auto& [term, ms] : b.breakdown_ms) sum += ms;
  CHECK(b.breakdown_ms.at("pipeline_bubble") > 0);
  CHECK(sum == Approx(r.step_time_ms));
  // 2 stages x {F, B}: 4 ops, each the stage's 4 microbatches, its time the sum of those actions' durations.
  REQUIRE(b.ops.size() == 4);
  for (const BaselineOp& op : b.ops) {
    CHECK(op.count == 4);
    double ms = 0;
    for (const auto& rank : p.timeline)
      for (const TimedPipelineAction& a : rank)
        if (fmt::format("stage {}", a.action.stage) == op.name && pipeline_action_words(a.action.kind) == op.phase)
          ms += (a.end_us - a.start_us) / 1e3;
    CHECK(op.total_ms == Approx(ms));
  }
  CHECK(b.ops.front().total_ms >= b.ops.back().total_ms);  // longest first
  CHECK(b.kind_ms.size() == 2);
  // Round trip through the file's JSON, and a check of the same step passes.
  const CheckBaseline back = baseline_from_json(to_json(b), "b.json");
  CHECK(back.setup == b.setup);
  CHECK(back.breakdown_ms == b.breakdown_ms);
  CHECK(back.ops.size() == b.ops.size());
  CHECK(compare(back, b, {2, 1}).pass);
  // Twice the microbatches: the pass takes longer (the step's tokens double too: not slower per token).
  const CheckResult bigger = compare(b, baseline_from_report(pp_step(PipelineScheduleKind::one_f_one_b, 0, 8)), {2, 1});
  CHECK_FALSE(bigger.pass);
  CHECK(bigger.metrics[0].fail);
  CHECK(bigger.setup_changes ==
        std::vector<std::string>{"local_batch_size 4 -> 8",
                                 "pp 2 (1F1B, 1 stage per rank, 4 microbatches of 1) -> 2 (1F1B, 1 stage per rank, 8 "
                                 "microbatches of 1)"});
}
