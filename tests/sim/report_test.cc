// The HTML report (sim/report/) and the predicted-next-to-measured trace (sim/report/measured_trace.h): golden values
// of the helpers, every op of the block in the timeline, the measured process aligned by name, and bad profiles.
#include <fmt/format.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <regex>
#include <sstream>

#include "plans/lower/lower.h"
#include "plans/program/program_identity.h"
#include "plans/util/error.h"
#include "sim/report/html_report.h"
#include "sim/report/measured_trace.h"
#include "sim/report/svg.h"
#include "sim/report/trace.h"
#include "sim/simulate.h"
#include "tests/error_text.h"

using namespace tptune;

namespace {

struct Sim {
  Program p;
  OpCosts costs;
  Timeline tl;
  StepReport r;
};

Sim simulate_8b(int tp, int dp, bool async_tp) {
  Model m;
  REQUIRE(model_preset("llama3-8b", m));
  Training t;
  t.seq_len = 8192;
  Plan base;
  base.tp_degree = tp;
  base.dp_shard = dp;
  base.loss_parallel = true;
  base.async_tp = async_tp;
  Sim s{lower(m, t, preset_plan("sequence_parallel", base)), {}, {}, {}};
  const ClusterSpec c = make_cluster(gpu_preset("h100-sxm"), 2, 8);
  s.costs = cost_ops(s.p, c, default_cost_params());
  s.tl = schedule(s.p, s.costs, default_cost_params());
  s.r = make_report(s.p, c, default_cost_params(), s.costs, s.tl);
  return s;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

}  // namespace

TEST_CASE("report helpers: ticks, labels, escaping, ms per 1000 tokens", "[report]") {
  double lo = 0, hi = 73;
  // (73 - 0) / 6 = 12.2 -> step 20 (1-2-5 steps): 0, 20, 40, 60, 80.
  CHECK(svg::nice_ticks(lo, hi, 6) == std::vector<double>{0, 20, 40, 60, 80});
  CHECK(hi == 80);
  lo = 3.2, hi = 4.9;  // 1.7 / 5 = 0.34 -> step 0.5: 3, 3.5, 4, 4.5, 5.
  CHECK(svg::nice_ticks(lo, hi, 5) == std::vector<double>{3, 3.5, 4, 4.5, 5});
  CHECK(svg::tick_label(12000, true) == "12k");
  CHECK(svg::tick_label(2.5) == "2.5");
  CHECK(svg::escape("a<b & \"c\" 'd'>") == "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;");
  StepReport r;
  r.tp_degree = 8;
  r.local_batch_size = 1;
  r.seq_len = 8192;
  // 1000 ms x tp 8 / 8192 tokens x 1000 = 976.5625 ms per 1000 tokens per GPU.
  CHECK(ms_per_1k_tokens(r, 1000) == Approx(976.5625));
}

TEST_CASE("report: the block timeline draws every op of one block, forward and backward", "[report]") {
  const Sim s = simulate_8b(8, 2, true);
  const std::string svg = html_block_timeline(s.p, s.costs, s.tl);
  // 32 layers: the middle instance is layer 16 in forward; the backward panel shows the same layer (backward runs
  // 31..0: its instance 15).
  CHECK(svg.find("forward of layer 16") != std::string::npos);
  CHECK(svg.find("backward of layer 16") != std::string::npos);
  // Every op has its box, except ops the previous block issued (FSDP's all-gather, async TP's first chunk) that
  // were done before this block started: those are counted in a note on their stream's lane.
  size_t drawn = 0, prefetched = 0;
  for (SegmentKind seg : {SegmentKind::block_fwd, SegmentKind::block_bwd}) {
    const Segment* g = s.p.segment(seg);
    REQUIRE(g);
    const int layer = 16;
    for (const Op& op : g->ops) {
      INFO(op.name);
      const bool has = svg.find("<title>" + svg::escape(layer_fqn(layer, op.name)) + " (") != std::string::npos;
      CHECK((has || is_prefetched(op)));
      drawn += has ? 1 : 0;
      prefetched += is_prefetched(op) ? 1 : 0;
    }
  }
  // ... and FSDP's copies folded into an op have boxes of their own beside it (sim/timeline/fsdp_copies.h).
  const size_t copies =
      count(svg, "<title>layers.16.fsdp.all_gather.copy_") + count(svg, "<title>layers.16.fsdp.reduce_scatter.copy_in");
  CHECK(copies > 0);
  CHECK(count(svg, "<title>layers.") == drawn + copies);
  CHECK(drawn + prefetched >=
        s.p.segment(SegmentKind::block_fwd)->ops.size() + s.p.segment(SegmentKind::block_bwd)->ops.size());
  if (drawn < s.p.segment(SegmentKind::block_fwd)->ops.size() + s.p.segment(SegmentKind::block_bwd)->ops.size())
    CHECK(svg.find("prefetched by the previous block, done before this one starts") != std::string::npos);
}

// Issue 38: FSDP2's copy of a block's gradients into the reduce-scatter input, priced on the op that writes the last
// gradient, is a slice of its own in the trace, the HTML timeline and the top ops; the op's own slice is its kernel's.
TEST_CASE("trace: FSDP's reduce-scatter copy is its own slice, so equal GEMMs show equal times", "[report]") {
  const Sim s = simulate_8b(8, 2, false);  // Llama 3 8B, tp 8, dp 2: FSDP over 2 ranks
  const nlohmann::json trace = chrome_trace(s.p, s.costs, s.tl);
  std::map<std::string, nlohmann::json> layer16;  // layer 16's complete events by name
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X" && e["name"].get<std::string>().rfind("layers.16.", 0) == 0)
      layer16[e["name"].get<std::string>()] = e;
  // wq and wo: 512 x 4096 and 4096 x 512 local weights at tp 8, the same FLOPs and CTA tiles (4 x 16 = 32 x 2 = 64 of
  // 128 x 256): the same weight-gradient time. Before, wq's slice also held the chunk_cat of the block's gradients.
  const auto& wq = layer16.at("layers.16.attention.wq.bwd_weight");
  const auto& wo = layer16.at("layers.16.attention.wo.bwd_weight");
  CHECK(wq["dur"].get<double>() == Approx(wo["dur"].get<double>()).epsilon(1e-12));
  // The copy: its own slice on the compute stream, kind fsdp_copy, right after the op it is folded into; together
  // they take that op's whole duration (the schedule, and so the step time, are unchanged).
  REQUIRE(layer16.count("layers.16.fsdp.reduce_scatter.copy_in"));
  const auto& copy = layer16.at("layers.16.fsdp.reduce_scatter.copy_in");
  CHECK(copy["args"]["kind"] == "fsdp_copy");
  CHECK(copy["tid"] == 0);
  const std::string beside = copy["args"]["after"].get<std::string>();
  const auto& op = layer16.at(beside);
  CHECK(copy["ts"].get<double>() == Approx(op["ts"].get<double>() + op["dur"].get<double>()));
  const Segment* bwd = s.p.segment(SegmentKind::block_bwd);
  REQUIRE(bwd);
  size_t seg = 0;
  while (&s.p.segments[seg] != bwd) ++seg;
  bool found = false;
  for (size_t j = 0; j < bwd->ops.size(); ++j)
    if (layer_fqn(16, bwd->ops[j].name) == beside) {
      found = true;
      CHECK(op["dur"].get<double>() + copy["dur"].get<double>() == Approx(s.costs.duration_us[seg][j]));
      CHECK(fsdp_copy_share(s.costs, seg, j).after_us == Approx(copy["dur"].get<double>()));
    }
  CHECK(found);
  // The copy of the parameters out of the all-gather output: a slice before the first op that reads them.
  REQUIRE(layer16.count("layers.16.fsdp.all_gather.copy_out"));
  // The top ops list it as a row of its own; the HTML timeline draws it.
  const auto top = top_op_summaries(s.p, s.costs, 1000,
                                    [&](size_t g, size_t) { return static_cast<double>(s.tl.segments[g].instances); });
  bool listed = false;
  for (const OpSummary& o : top)
    if (o.name == "layers.*.fsdp.reduce_scatter.copy_in") {
      listed = true;
      CHECK(o.kind == "fsdp_copy");
      CHECK(o.time_us == Approx(copy["dur"].get<double>()));
    }
  CHECK(listed);
  const std::string svg = html_block_timeline(s.p, s.costs, s.tl);
  CHECK(svg.find("<title>layers.16.fsdp.reduce_scatter.copy_in (backward, ") != std::string::npos);
  CHECK(svg.find("FSDP copy") != std::string::npos);
}

TEST_CASE("report: the document has its parts and the baselines' bars", "[report]") {
  const Sim s = simulate_8b(8, 2, true);
  HtmlReportInput in;
  in.title = "test <report>";
  ReportPlan a{"this plan", "", true, "", s.r};
  ReportPlan b{"vanilla", "", false, "lowering failed", {}};
  in.plans = {a, b};
  in.program = &s.p;
  in.costs = &s.costs;
  in.timeline = &s.tl;
  const std::string html = html_report(in);
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(html.find("<title>test &lt;report&gt;</title>") != std::string::npos);
  CHECK(html.find("not simulated: lowering failed") != std::string::npos);
  CHECK(html.find("Every evaluated candidate") == std::string::npos);  // no points: no scatter
  CHECK(html.find("<script") == std::string::npos);
  CHECK(count(html, "<svg ") == 3);  // bars, timeline, memory
  in.plans.clear();
  CHECK_THROWS_AS(html_report(in), Error);
}

TEST_CASE("report: the scatter marks limit, front, winner and baselines", "[report]") {
  const Sim s = simulate_8b(8, 2, false);
  std::vector<ReportPoint> pts = {{"a", 2, false, false, true, 1000, 40},
                                  {"b", 4, true, false, true, 1500, 50},
                                  {"c", 8, false, true, true, 1200, 60},  // dominated by b: off the front
                                  {"d", 8, true, true, false, 0, 90}};    // over the limit: a tick
  ReportPlan w{"winner", "", true, "", s.r};
  const std::string svg = html_scatter(pts, 78, {w});
  CHECK(svg.find("memory limit 78.0 GiB") != std::string::npos);
  CHECK(svg.find("1 over the limit") != std::string::npos);
  CHECK(count(svg, "<polyline") == 1);
  // The front joins a (40 GiB) and b (50 GiB) but not c: two points.
  const auto poly = svg.substr(svg.find("<polyline points=\""), 80);
  CHECK(count(poly.substr(0, poly.find("\" fill")), ",") == 2);
  CHECK(svg.find("b: 1500 tokens/s per GPU, 50.0 GiB") != std::string::npos);
}

// Issue 37, class 5: the trace is bounded by its op events, counted before it is rendered.
TEST_CASE("trace: its op events are counted before rendering, and more than one output lists are refused", "[report]") {
  const Sim s = simulate_8b(2, 1, false);
  const nlohmann::json trace = chrome_trace(s.p, s.costs, s.tl);
  int64_t complete = 0;
  for (const auto& e : trace["traceEvents"]) complete += e["ph"] == "X" ? 1 : 0;
  CHECK(complete == chrome_trace_events(s.p, s.costs, s.tl));
  // The same step with its blocks' instances raised until the events pass the bound (nothing else is read first).
  // Events grow linearly with the blocks' instances (each block's ops and its FSDP copies' slices): other + per x k.
  Timeline big = s.tl;
  auto events_at = [&](int k) {
    for (SegmentTimes& st : big.segments)
      if (st.instances > 1) st.instances = k;
    return chrome_trace_events(s.p, s.costs, big);
  };
  const int64_t n2 = events_at(2), n3 = events_at(3), per_instance = n3 - n2, other = n2 - 2 * per_instance;
  REQUIRE(per_instance > 0);
  const int instances = static_cast<int>((kMaxListedEvents - other) / per_instance) + 1;
  const int64_t n = events_at(instances);
  REQUIRE(n == other + per_instance * instances);
  REQUIRE(n > kMaxListedEvents);
  REQUIRE(n - per_instance <= kMaxListedEvents);
  CHECK(tptune::test::error_of([&] { chrome_trace(s.p, s.costs, big); }) ==
        fmt::format("--trace: {} op events (a step of 32 layers), more than 1000000, the most one output lists "
                    "(docs/file-formats.md); a model with fewer layers or a smaller context-parallel degree has "
                    "fewer; or leave --trace out",
                    n));
}

namespace {

// A profile of `p` as tp-run writes it (its identity, one record per op of expand(p) in execution order), each op
// measured at `factor` x its simulated duration (the trace's event of the same name).
nlohmann::json profile_of(const Sim& s, double factor) {
  const nlohmann::json sim = chrome_trace(s.p, s.costs, s.tl);
  std::map<std::string, double> dur;
  for (const auto& e : sim["traceEvents"])
    if (e["ph"] == "X") dur[e["name"].get<std::string>()] = e["dur"].get<double>();
  nlohmann::json ops = nlohmann::json::array();
  for (const FlatOp& f : expand(s.p).ops) {
    REQUIRE(dur.count(f.name) == 1);
    ops.push_back({{"name", f.name},
                   {"phase", std::string(to_string(f.op->phase))},
                   {"kind", std::string(kind_name(f.op->kind))},
                   {"time_us", {{"median", factor * dur[f.name]}}}});
  }
  return {{"format", "tptune-profile"},
          {"version", 1},
          {"environment", {{"backend", "cpu"}, {"device", "test"}}},
          {"program", program_identity(s.p)},
          {"ops", ops}};
}

}  // namespace

TEST_CASE("measured trace: a profile's ops become process 1, aligned by name with the prediction", "[report]") {
  const Sim s = simulate_8b(2, 1, false);
  // Each op measured at 3x its prediction.
  const nlohmann::json prof = profile_of(s, 3);
  std::string device;
  const auto measured = parse_profile_ops(prof.dump(), "p.json", s.p, &device);
  CHECK(device == "cpu: test");
  REQUIRE(measured.size() == prof["ops"].size());
  const nlohmann::json both = chrome_trace_with_measured(s.p, s.costs, s.tl, measured, "measured");
  size_t n1 = 0;
  double end = 0;
  for (const auto& e : both["traceEvents"]) {
    if (e["ph"] != "X") continue;
    if (e["pid"] == 1) {
      ++n1;
      CHECK(e["args"]["ratio"].get<double>() == Approx(3.0));
      CHECK(e["ts"].get<double>() == Approx(end));  // serialized: end to end
      end += e["dur"].get<double>();
    } else {
      CHECK(e["args"]["measured_us"].get<double>() == Approx(3 * e["dur"].get<double>()));
    }
  }
  CHECK(n1 == measured.size());
  CHECK(both["otherData"]["matched_by_name"] == measured.size());
  // An op tp-run did not run ("measured": false, no time: a single-process profile's collectives) is an op of the
  // Program: accepted, and left off the measured track (issue 37, class 14: "ops[i].time_us.median: missing").
  nlohmann::json partial = prof;
  size_t skipped = 0;
  for (auto& rec : partial["ops"])
    if (rec["kind"] == "collective") {
      rec["measured"] = false;
      rec["time_us"] = nullptr;
      ++skipped;
    }
  REQUIRE(skipped > 0);
  CHECK(parse_profile_ops(partial.dump(), "p.json", s.p).size() == prof["ops"].size() - skipped);
}

TEST_CASE("measured trace: bad profiles are one-line errors", "[report]") {
  const Sim s = simulate_8b(2, 1, false);
  auto err = [&](const std::string& text) {
    try {
      parse_profile_ops(text, "p.json", s.p);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  CHECK(err("{\n\"format\": \"tptune-profile\",,\n}").rfind("p.json:2: invalid JSON", 0) == 0);
  CHECK(err(R"({"format": "other"})") == "p.json: expected a tp-run profile (\"format\": \"tptune-profile\")");
  CHECK(err(R"({"format": "tptune-profile", "version": 2})") ==
        "p.json: version: expected 1 (the profile format this tp-plan reads)");
  // Read by the one Profile reader (plans/program/profile_format.h): its messages are calibration's.
  CHECK(err(R"({"format": "tptune-profile", "version": 1, "ops": [{"name": "x", "time_us": {"median": -1}}]})") ==
        "p.json: ops[0].time_us.median: expected a non-negative number, got -1");
  const nlohmann::json base = profile_of(s, 1);
  nlohmann::json j = base;
  j["ops"][0]["time_us"] = nlohmann::json::object();
  CHECK(err(j.dump()) == "p.json: ops[0].time_us.median: missing");
  // Checked against the simulated Program (sim/profiled_program.h): its records are its ops, one to one.
  j = base;
  const std::string first = j["ops"][0]["name"];
  j["ops"][0]["name"] = "nowhere.fwd";
  CHECK(err(j.dump()) ==
        "p.json: ops[0].name: expected '" + first + "' (op 0 of the simulated Program), got 'nowhere.fwd'");
  j = base;
  j["ops"].erase(j["ops"].begin() + 10, j["ops"].end());
  CHECK_THAT(err(j.dump()), Catch::StartsWith("p.json: ops: 10 records, expected ") &&
                                Catch::Contains(" (one per op of the simulated Program, in execution order): op 10 ("));
  // The pairing itself still refuses a list none of whose names occurs.
  const std::vector<ProfiledOp> other{{"nowhere.fwd", "forward", "gemm", 1}};
  CHECK_THROWS_WITH(chrome_trace_with_measured(s.p, s.costs, s.tl, other, "p.json"),
                    Catch::StartsWith("p.json: none of its 1 op names occurs in the simulated Program"));
}

TEST_CASE("measured trace: a profile of another model or plan is refused, saying what differs", "[report]") {
  // Before issue 21, `simulate --measured` paired a profile of another model and plan by op names ("114 of 141 ops
  // matched", exit 0). The profile's "program" (what tp-run profile writes: program_identity()) must describe the
  // simulated Program.
  const Sim s = simulate_8b(2, 1, false);
  nlohmann::json same = program_identity(s.p);
  same["model"]["name"] = "my-8b";  // names are not compared
  same["plan"]["source"] = "best.yaml";
  CHECK_NOTHROW(check_same_program(same, s.p, "p.json"));
  nlohmann::json other = program_identity(s.p);
  other["model"]["dim"] = 2048;
  other["plan"]["tp_degree"] = 4;
  other["tp"] = 4;
  CHECK(tptune::test::error_of([&] { check_same_program(other, s.p, "p.json"); }) ==
        "p.json: a profile of another model or plan: model.dim 2048 (profile) vs 4096 (simulated), plan.tp_degree 4 "
        "(profile) vs 2 (simulated), tp 4 (profile) vs 2 (simulated); profile the simulated config and plan (tp-run "
        "profile CONFIG --plan ...)");
  // A model feature the profile has and the simulated model lacks (written only when present) differs as well.
  nlohmann::json tied = program_identity(s.p);
  tied["model"]["tie_word_embeddings"] = true;
  CHECK(tptune::test::error_of([&] { check_same_program(tied, s.p, "p.json"); }) ==
        "p.json: a profile of another model or plan: model.tie_word_embeddings true (profile) vs none (simulated); "
        "profile the simulated config and plan (tp-run profile CONFIG --plan ...)");
  // tp-run profiles one replica: on a larger cluster only dp differs, and the error says how to simulate the same.
  nlohmann::json replica = program_identity(s.p);
  replica["dp"] = 1;
  const Sim fsdp = simulate_8b(2, 4, false);
  CHECK(tptune::test::error_of([&] { check_same_program(replica, fsdp.p, "p.json"); }) ==
        "p.json: a profile of another model or plan: dp 1 (profile) vs 4 (simulated); tp-run profiles one "
        "data-parallel replica: simulate with --dp-shard 1");
  CHECK(tptune::test::error_of([&] { check_same_program(nlohmann::json(), s.p, "p.json"); }) ==
        "p.json: program: expected the profiled model, training and plan (tp-run profile writes them)");
  // The module styles of the profile's plan_yaml: a vanilla profile beside a sequence-parallel simulation.
  Plan base;
  base.tp_degree = 2;
  base.loss_parallel = true;
  nlohmann::json vanilla = program_identity(s.p);
  vanilla["plan_yaml"] = plan_to_yaml(preset_plan("vanilla", base));
  CHECK_THAT(tptune::test::error_of([&] { check_same_program(vanilla, s.p, "p.json"); }),
             Catch::StartsWith("p.json: a profile of another model or plan: tok_embeddings rowwise(") &&
                 Catch::Contains("(profile) vs rowwise(") && Catch::Contains(" and ") && Catch::Contains(" more; "));
  nlohmann::json sp = program_identity(s.p);
  sp["plan_yaml"] = plan_to_yaml(s.p.plan);
  CHECK_NOTHROW(check_same_program(sp, s.p, "p.json"));
}

namespace {

// Boxes of the SVG's markers (<circle>, <polygon>, <rect> with a stroke-width 1: svg::Svg::marker) and the boxes of
// its <text class="label"> elements named in `names` (svg::text_box at 12 px, the CSS of the class).
std::vector<svg::Box> marker_boxes(const std::string& svg) {
  std::vector<svg::Box> out;
  const std::regex circle(R"re(<circle cx="([-\d.]+)" cy="([-\d.]+)" r="([-\d.]+)")re");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), circle); it != std::sregex_iterator(); ++it) {
    const double x = std::stod((*it)[1]), y = std::stod((*it)[2]), r = std::stod((*it)[3]);
    out.push_back({x - r, y - r, x + r, y + r});
  }
  const std::regex polygon(R"re(<polygon points="([^"]+)")re");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), polygon); it != std::sregex_iterator(); ++it) {
    std::string pts = (*it)[1];
    std::replace(pts.begin(), pts.end(), ',', ' ');
    std::istringstream in(pts);
    svg::Box b{1e9, 1e9, -1e9, -1e9};
    for (double x, y; in >> x >> y;) b = {std::min(b.x0, x), std::min(b.y0, y), std::max(b.x1, x), std::max(b.y1, y)};
    out.push_back(b);
  }
  const std::regex square(
      R"re(<rect x="([-\d.]+)" y="([-\d.]+)" width="([-\d.]+)" height="([-\d.]+)" fill="[^"]*" stroke="[^"]*" stroke-width="1")re");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), square); it != std::sregex_iterator(); ++it) {
    const double x = std::stod((*it)[1]), y = std::stod((*it)[2]);
    out.push_back({x, y, x + std::stod((*it)[3]), y + std::stod((*it)[4])});
  }
  return out;
}

std::map<std::string, svg::Box> label_boxes(const std::string& svg, const std::vector<std::string>& names) {
  std::map<std::string, svg::Box> out;
  const std::regex label(R"re(<text x="([-\d.]+)" y="([-\d.]+)" text-anchor="start" class="label">([^<]+)</text>)re");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), label); it != std::sregex_iterator(); ++it) {
    const std::string name = (*it)[3];
    if (std::find(names.begin(), names.end(), name) != names.end())
      out[name] = svg::text_box(std::stod((*it)[1]), std::stod((*it)[2]), name, 12);
  }
  return out;
}

}  // namespace

TEST_CASE("report: a label goes where it covers no marker", "[report]") {
  const svg::Box area{0, 0, 400, 300};
  // Nothing around: right of the marker, level with it.
  const svg::Placed free = svg::place_label(100, 100, 5, "vanilla", 12, {}, area);
  CHECK(free.box.x0 > 105);
  CHECK(free.box.y0 < 100);
  CHECK(free.box.y1 > 100);
  // Markers filling the right side: it goes to another side, clear of all of them, inside the area.
  std::vector<svg::Box> taken;
  for (double x = 108; x < 260; x += 10)
    for (double y = 70; y < 130; y += 10) taken.push_back(svg::marker_box(x, y, 4));
  const svg::Placed moved = svg::place_label(100, 100, 5, "torchtitan default", 12, taken, area);
  for (const svg::Box& b : taken) CHECK_FALSE(moved.box.intersects(b));
  CHECK(moved.box.inside(area));
  // The text's box: 0.68 em a character, ascent 0.8 em above the baseline.
  const svg::Box t = svg::text_box(10, 20, "abcde", 10);
  CHECK(t.x0 == 10);
  CHECK(t.x1 == Approx(10 + 5 * 6.8));
  CHECK(t.y0 == Approx(12));
}

TEST_CASE("report: in a crowded scatter the plans' names cover no point and no other name", "[report]") {
  const Sim s = simulate_8b(8, 2, false);
  const double tps = s.r.tokens_per_second_per_gpu, gib = s.r.memory.peak / 1073741824.0;
  ReportPlan winner{"winner", "", true, "", s.r};
  ReportPlan vanilla{"vanilla", "", true, "", s.r}, titan{"torchtitan default", "", true, "", s.r};
  vanilla.report.tokens_per_second_per_gpu = 0.8 * tps;
  vanilla.report.memory.peak *= 0.8;
  titan.report.tokens_per_second_per_gpu = 0.82 * tps;  // close to vanilla: their names compete for one place
  titan.report.memory.peak *= 0.83;
  // Candidates all around each plan, densest on the right, where the names used to go.
  std::vector<ReportPoint> pts;
  for (const ReportPlan* pl : {&winner, &vanilla, &titan})
    for (int i = 1; i <= 6; ++i)
      for (int j = -2; j <= 2; ++j)
        pts.push_back({"p", 8, false, false, true, pl->report.tokens_per_second_per_gpu * (1 + 0.004 * j),
                       pl->report.memory.peak / 1073741824.0 * (1 + 0.006 * i)});
  const std::string svg = html_scatter(pts, gib * 1.5, {winner, vanilla, titan});
  const auto labels = label_boxes(svg, {"winner", "vanilla", "torchtitan default"});
  REQUIRE(labels.size() == 3);
  const std::vector<svg::Box> markers = marker_boxes(svg);
  REQUIRE(markers.size() >= pts.size() + 3);
  for (const auto& [name, box] : labels) {
    CAPTURE(name, box.x0, box.y0, box.x1, box.y1);
    for (const svg::Box& m : markers) CHECK_FALSE(box.intersects(m));
    for (const auto& [other, b] : labels)
      if (other != name) CHECK_FALSE(box.intersects(b));
  }
}

TEST_CASE("report: each timeline panel's axis ends within one tick of its content", "[report]") {
  const Sim s = simulate_8b(8, 2, true);
  const std::string svg = html_block_timeline(s.p, s.costs, s.tl);
  // Panels are drawn one after the other: the op boxes (rects with a <title>) then the axis (its tick labels, text
  // class small, anchor middle, under the lanes). Split at each axis label.
  const std::string axis_label = "ms from the block&#39;s start";
  const std::regex box(
      R"re(<rect x="([-\d.]+)" y="[-\d.]+" width="([-\d.]+)" height="[-\d.]+" fill="#[0-9a-f]+" stroke="#fff" stroke-width="0.3"><title>)re");
  const std::regex tick(R"re(<text x="([-\d.]+)" y="[-\d.]+" text-anchor="middle" class="small">[-\d.k]+</text>)re");
  size_t from = 0;
  int panels = 0;
  for (size_t at = svg.find(axis_label); at != std::string::npos; at = svg.find(axis_label, at + 1)) {
    const std::string part = svg.substr(from, at - from);
    from = at + 1;
    ++panels;
    double content_end = 0;
    for (auto it = std::sregex_iterator(part.begin(), part.end(), box); it != std::sregex_iterator(); ++it)
      content_end = std::max(content_end, std::stod((*it)[1]) + std::stod((*it)[2]));
    std::vector<double> tick_px;
    for (auto it = std::sregex_iterator(part.begin(), part.end(), tick); it != std::sregex_iterator(); ++it)
      tick_px.push_back(std::stod((*it)[1]));
    CAPTURE(panels, content_end);
    REQUIRE(tick_px.size() >= 3);
    const double step = tick_px[1] - tick_px[0];
    // The last tick is the axis' end: the content reaches past the tick before it.
    CHECK(content_end > tick_px.back() - step);
    CHECK(content_end <= tick_px.back() + 0.5);
  }
  CHECK(panels == 2);
}

TEST_CASE("report: the scatter's out-of-memory count agrees with its ticks", "[report]") {
  const Sim s = simulate_8b(8, 2, false);
  const double gib = s.r.memory.peak / 1073741824.0;
  // Three candidates over the limit at one peak (one pixel column), one at another; the search pruned 10 as out of
  // memory: 4 lowered (the ticks) and 6 larger batches it never lowered.
  std::vector<ReportPoint> pts = {{"a", 8, false, false, true, 1000, gib * 0.5},
                                  {"b", 8, false, false, false, 0, gib * 1.3},
                                  {"c", 8, false, false, false, 0, gib * 1.3},
                                  {"d", 8, false, false, false, 0, gib * 1.3},
                                  {"e", 8, false, false, false, 0, gib * 1.2}};
  ReportPlan w{"winner", "", true, "", s.r};
  const std::string svg = html_scatter(pts, gib * 1.1, {w}, 10);
  CHECK(svg.find(">10 over the limit<") != std::string::npos);
  CHECK(svg.find(">(4 as ticks at their peak,<") != std::string::npos);
  CHECK(svg.find(">6 larger batches not lowered)<") != std::string::npos);
  // One tick per pixel column, its tooltip counting its candidates: 3 + 1, the ticks drawn.
  const std::regex tick(R"re(<title>(\d+) over the limit (at|past the axis, up to) [\d.]+ GiB</title>)re");
  std::vector<int> counts;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), tick); it != std::sregex_iterator(); ++it)
    counts.push_back(std::stoi((*it)[1]));
  std::sort(counts.begin(), counts.end());
  CHECK(counts == std::vector<int>{1, 3});
  // Without a count from the search (the points alone), the legend counts the ticks' candidates.
  CHECK(html_scatter(pts, gib * 1.1, {w}).find(">4 over the limit<") != std::string::npos);
}
