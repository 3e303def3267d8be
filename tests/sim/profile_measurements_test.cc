// Reading profiles: one-line errors for bad ones, and the check of a profile against the Program it names
// (sim/profiled_program.h): the ops one to one, a pipeline profile's block (issue 37, classes 9, 10 and 17).
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>

#include "plans/language/config.h"
#include "plans/language/pipeline_parallel.h"
#include "plans/language/plan.h"
#include "plans/lower/lower.h"
#include "plans/lower/rewrite/pipeline_stage.h"
#include "plans/program/program_identity.h"
#include "plans/util/error.h"
#include "sim/calibrate/accuracy.h"
#include "sim/calibrate/calibration.h"
#include "sim/calibrate/fit.h"
#include "sim/cost/comm_cost.h"
#include "sim/cost/compute_cost.h"
#include "sim/cost/cost_param_fields.h"
#include "sim/pipeline/schedule.h"
#include "sim/shared_machine.h"
#include "sim/simulate.h"
#include "sim/timeline/timeline.h"
#include "tests/error_text.h"
#include "tests/sim/synthetic_profile.h"

using namespace tptune;
using namespace tptune::test::synthetic;
using nlohmann::json;
using tptune::test::error_of;

TEST_CASE("measurements: bad profiles get one-line errors naming the file and the field") {
  json good = synthetic_profile("vanilla", truth(), 0.0);
  auto err = [](const json& j) { return error_of([&] { parse_measurements(j, "p.json"); }); };
  json j = good;
  j["format"] = "something";
  CHECK(err(j) == "p.json: format: expected tptune-profile or tptune-bench, got 'something'");
  j = good;
  j["version"] = 7;
  CHECK(err(j) == "p.json: version: expected 1 (the only version this tp-plan reads)");
  j = good;
  j.erase("ops");
  CHECK(err(j) == "p.json: ops: missing");
  j = good;
  j["ops"][3]["segment"] = "nowhere";
  CHECK(err(j) == fmt::format("p.json: ops[3].segment: expected '{}' (the segment of op 3 of the program its "
                              "config_yaml lowers to), got 'nowhere'",
                              good["ops"][3]["segment"].get<std::string>()));
  j = good;
  j["ops"][0]["time_us"]["median"] = "fast";
  CHECK(err(j) == "p.json: ops[0].time_us.median: expected a number, got \"fast\"");
  j = good;
  j["environment"]["ranks"] = 4;
  CHECK(err(j) == "p.json: program: tp 2 x dp 1 does not match environment.ranks 4");
  j = good;
  j["environment"]["backend"] = "tpu";
  CHECK(err(j).find("p.json: environment.backend: expected cpu") == 0);
  j = good;
  j["program"]["plan_yaml"] = "tp_degree: [";
  CHECK(err(j).find("p.json: program: cannot lower the profiled Program again: ") == 0);
  for (const json& bad : {j, good}) CHECK(err(bad).find('\n') == std::string::npos);

  const std::string path = std::string(TPTUNE_BINARY_DIR) + "/not-json.json";
  std::ofstream(path) << "{\"format\": ";
  CHECK(error_of([&] {
          load_measurements(path);
        }).find(path + ":1: invalid JSON (expected a tp-run profile or bench file)") == 0);
}

TEST_CASE("measurements: with ac_layers each block.bwd record maps to the segment of its layer") {
  // tiny-llama has 2 layers; full AC on the first 1 splits the block backward into two segments of kind block.bwd:
  // layer 1 without recompute (run first), then layer 0 with the recompute ops in front. Record i is op i of
  // expand(), as tp-run profile writes it; its template op must be the one of that op's segment.
  const std::string cfg_text = read_text(std::string(TPTUNE_SOURCE_DIR) + "/examples/tiny-llama.yaml");
  const Config cfg = load_config_string(cfg_text);
  Plan base;
  base.tp_degree = 2;
  base.dp_shard = 1;
  base.activation_checkpointing = ActivationCheckpointing::full;
  base.ac_layers = 1;
  const Plan plan = preset_plan("vanilla", base);
  const Program p = lower(cfg.model, cfg.training, plan);
  std::vector<size_t> bwd;
  for (size_t s = 0; s < p.segments.size(); ++s)
    if (p.segments[s].kind == SegmentKind::block_bwd) bwd.push_back(s);
  REQUIRE(bwd.size() == 2);
  REQUIRE(p.segments[bwd[0]].ops.size() != p.segments[bwd[1]].ops.size());  // the recompute ops differ
  const json prof = {{"format", "tptune-profile"},
                     {"version", 1},
                     {"environment", environment()},
                     {"program", program_of(p, cfg_text, plan)},
                     {"ops", op_records(p, [](const Op&, size_t) { return 1.0; })}};
  const Measurements m = parse_measurements(prof, "ac.json");
  const FlatProgram flat = expand(p);
  REQUIRE(m.ops.size() == flat.ops.size());
  int in_first = 0, in_second = 0;
  for (size_t i = 0; i < flat.ops.size(); ++i) {
    const Segment& seg = segment_of(p, *flat.ops[i].op);
    CHECK(&p.segments[size_t(m.ops[i].segment)] == &seg);
    CHECK(m.ops[i].op == flat.ops[i].op->id);
    in_first += m.ops[i].segment == static_cast<int>(bwd[0]);
    in_second += m.ops[i].segment == static_cast<int>(bwd[1]);
    if (m.ops[i].segment == static_cast<int>(bwd[0])) CHECK(flat.ops[i].layer == 1);
    if (m.ops[i].segment == static_cast<int>(bwd[1])) CHECK(flat.ops[i].layer == 0);
  }
  CHECK(in_first == static_cast<int>(p.segments[bwd[0]].ops.size()));  // one layer each
  CHECK(in_second == static_cast<int>(p.segments[bwd[1]].ops.size()));
  // A record whose layer is not its op's is an error naming it.
  json bad = prof;
  size_t k = 0;
  while (bad["ops"][k]["segment"] != "block.bwd") ++k;
  bad["ops"][k]["layer"] = 7;
  CHECK(
      error_of([&] { parse_measurements(bad, "ac.json"); }) ==
      fmt::format("ac.json: ops[{}].layer: expected 1 (op {} of the program its config_yaml lowers to), got 7", k, k));
}

TEST_CASE("measurements: a profile's records are the ops of the Program it names, one to one (issue 37, class 9)") {
  // Before, records were matched to template ops by (segment, template_op) alone: a profile of another model's
  // config_yaml, 10 of its 141 ops, or duplicated or renamed ops read with exit 0, and `accuracy` printed a
  // +2,052,808,226 % error. Every reader now checks the profile against the Program it names (sim/profiled_program.h).
  const json good = synthetic_profile("vanilla", truth(), 0.0);
  const Measurements ok = parse_measurements(good, "p.json");
  const FlatProgram flat = expand(*ok.program);
  REQUIRE(good["ops"].size() == flat.ops.size());
  auto err = [](const json& j) { return error_of([&] { parse_measurements(j, "p.json"); }); };
  auto name = [&](size_t i) { return flat.ops[i].name; };
  const std::string of = "the program its config_yaml lowers to";
  // Another model's config_yaml (dim 64 -> 128): the profile's "program" says what it profiled.
  json j = good;
  std::string other = j["program"]["config_yaml"];
  other.replace(other.find("dim: 64"), 7, "dim: 128");
  j["program"]["config_yaml"] = other;
  CHECK(err(j) ==
        "p.json: program: the profiled model, training or plan is not the one its config_yaml lowers to: model.dim 64 "
        "(profile) vs 128 (its config_yaml)");
  // 10 of the ops.
  j = good;
  j["ops"].erase(j["ops"].begin() + 10, j["ops"].end());
  CHECK(err(j) == fmt::format("p.json: ops: 10 records, expected {} (one per op of {}, in execution order): op 10 "
                              "('{}') and the ones after it are missing",
                              flat.ops.size(), of, name(10)));
  // One more record than ops.
  j = good;
  j["ops"].push_back(j["ops"][0]);
  CHECK(err(j) == fmt::format("p.json: ops[{}]: '{}' is past the {} ops of {} (one record per op, in execution order)",
                              flat.ops.size(), name(0), flat.ops.size(), of));
  // A duplicated record: the next op's place holds it.
  j = good;
  j["ops"].insert(j["ops"].begin() + 6, j["ops"][5]);
  CHECK(err(j) == fmt::format("p.json: ops[6].name: expected '{}' (op 6 of {}), got '{}'", name(6), of, name(5)));
  // A renamed op.
  j = good;
  j["ops"][12]["name"] = "layers.0.attention.wx.fwd";
  CHECK(err(j) == fmt::format("p.json: ops[12].name: expected '{}' (op 12 of {}), got 'layers.0.attention.wx.fwd'",
                              name(12), of));
  // Without the "program" identity tp-run writes, nothing says what was profiled.
  j = good;
  j["program"] = {{"config_yaml", good["program"]["config_yaml"]}, {"plan_yaml", good["program"]["plan_yaml"]}};
  CHECK_THAT(err(j), Catch::StartsWith("p.json: program: the profiled model, training or plan is not the one its "
                                       "config_yaml lowers to: dp missing (profile) vs 1 (its config_yaml), "
                                       "model.dim missing (profile) vs 64 (its config_yaml)"));
  // A pipeline block on a profile of a plan without pipeline parallelism.
  j = good;
  j["pipeline"] = {{"pp", 2}, {"schedule", "1F1B"}, {"microbatches", 2}, {"microbatch_size", 1}};
  CHECK(err(j) ==
        "p.json: pipeline: a pipeline's profile (pp 2), but the program its config_yaml lowers to has no "
        "pipeline parallelism (pp_degree 1)");

  // tp-run profile --local-shapes-of-tp 2 (one process): the Program lowered for tp 2, its collectives not measured.
  // Its ops are that Program's: it passes, and only the measured records are fitted.
  j = good;
  j["local_shapes_of_tp"] = 2;
  j["environment"]["ranks"] = 1;
  size_t collectives = 0;
  for (auto& rec : j["ops"])
    if (rec["kind"] == "collective") {
      rec["measured"] = false;
      rec["time_us"] = nullptr;
      ++collectives;
    }
  REQUIRE(collectives > 0);
  CHECK(parse_measurements(j, "single.json").ops.size() == flat.ops.size() - collectives);
}

namespace {

// A profile of tiny-llama's vanilla plan at pp 2 x tp 1, 1F1B, 4 microbatches, as tp-run profile writes it: the
// microbatch Program's ops, each rank's actions of the schedule, and p2p from pp rank 0 to 1.
json pipeline_profile() {
  const std::string cfg_text = read_text(std::string(TPTUNE_SOURCE_DIR) + "/examples/tiny-llama.yaml");
  const Config cfg = load_config_string(cfg_text);
  Plan base;
  base.tp_degree = 1;
  base.dp_shard = 1;
  base.pp_degree = 2;
  base.local_batch_size = 4;
  const Plan plan = preset_plan("vanilla", base);
  const Program mb = lower(cfg.model, cfg.training, pipeline_microbatch_plan(plan));
  const PipelineSplit split = resolve_pipeline(cfg.model, plan);
  const PipelineSchedule sched = build_schedule(plan.pp_schedule, split.pp, split.stages_per_rank, split.microbatches);
  json stages = json::array(), ranks = json::array();
  for (const PipelineStageSpan& s : pipeline_stage_spans(split, plan.pp_schedule))
    stages.push_back({{"first_layer", s.first_layer}, {"layers", s.layers}, {"rank", s.rank}});
  for (size_t r = 0; r < sched.ranks.size(); ++r) {
    json actions = json::array();
    double t = 0;
    for (const PipelineAction& a : sched.ranks[r]) {
      actions.push_back({{"stage", a.stage},
                         {"microbatch", a.microbatch},
                         {"kind", std::string(to_string(a.kind))},
                         {"start_us", t},
                         {"wait_us", 0.0},
                         {"end_us", t + 10}});
      t += 10;
    }
    ranks.push_back({{"pp_rank", r}, {"end_us", t}, {"busy_us", t}, {"actions", actions}});
  }
  json env = environment();
  return {{"format", "tptune-profile"},
          {"version", 1},
          {"environment", env},
          {"program", program_of(mb, cfg_text, plan)},
          {"pipeline",
           {{"pp", 2},
            {"schedule", "1F1B"},
            {"microbatches", 4},
            {"microbatch_size", 1},
            {"stages", stages},
            {"ranks", ranks},
            {"p2p", {{{"from", 0}, {"to", 1}, {"bytes", 1024}, {"time_us", {{"median", 5.0}}}}}}}},
          {"ops", op_records(mb, [](const Op&, size_t) { return 1.0; })},
          {"step_wall_us", {{"median", 200.0}}}};
}

}  // namespace

TEST_CASE("measurements: a pipeline profile's block is its plan's (issue 37, classes 10 and 17)") {
  // Before, a missing pp rank was dropped, pp 8 in a pp 2 profile, an action on stage 99 and an empty rank were read,
  // and calibrate dropped p2p records of 0 bytes: the block is now checked against the plan tp-run ran (its split,
  // placement and schedule).
  const json good = pipeline_profile();
  const Measurements ok = parse_measurements(good, "pp.json");
  REQUIRE(ok.pipeline);
  CHECK(ok.pipeline->rank_end_us.size() == 2);
  CHECK(ok.ops.size() == 1 + good["ops"].size());  // the p2p sample, then the ops
  auto err = [](const std::function<void(json&)>& mutate) {
    json j = pipeline_profile();
    mutate(j);
    return error_of([&] { parse_measurements(j, "pp.json"); });
  };
  // 1F1B on pp rank 0 with 4 microbatches: warm-up 2 forwards (pp - r), then B0: 0F0 0F1 0B0 0F2 0B1 0F3 0B2 0B3.
  CHECK(err([](json& j) { j["pipeline"]["ranks"].erase(1); }) ==
        "pp.json: pipeline.ranks: 1 records, expected 2 (one per pp rank)");
  CHECK(err([](json& j) { j["pipeline"]["pp"] = 8; }) ==
        "pp.json: pipeline.pp: expected 2 (the plan's pp_degree), got 8");
  CHECK(err([](json& j) { j["pipeline"]["ranks"][0]["actions"][2]["stage"] = 99; }) ==
        "pp.json: pipeline.ranks[0].actions[2]: expected 0B0 (action 2 of pp rank 0 under 1F1B, 4 microbatches), got "
        "99B0");
  CHECK(err([](json& j) { j["pipeline"]["ranks"][1]["actions"] = json::array(); }) ==
        "pp.json: pipeline.ranks[1].actions: 0 actions, expected 8 (pp rank 1's under 1F1B, 4 microbatches)");
  CHECK(err([](json& j) { j["pipeline"]["ranks"][1]["pp_rank"] = 0; }) ==
        "pp.json: pipeline.ranks[1].pp_rank: expected 1 (records in pp rank order), got 0");
  CHECK(err([](json& j) { j["pipeline"]["schedule"] = "GPipe"; }) ==
        "pp.json: pipeline.schedule: expected '1F1B' (the plan's pp_schedule), got 'GPipe'");
  CHECK(err([](json& j) { j["pipeline"]["microbatches"] = 2; }) ==
        "pp.json: pipeline.microbatches: expected 4 (local_batch_size 4 / pp_microbatch_size 1), got 2");
  // tiny-llama's 2 blocks on 2 stages: torchtitan's split gives each stage one (effective 2 + 1 + 1 = 4 layers, 2 per
  // stage, less the embedding's and the head's 1).
  CHECK(err([](json& j) { j["pipeline"]["stages"][1]["first_layer"] = 0; }) ==
        "pp.json: pipeline.stages[1]: expected first_layer 1, layers 1, rank 1 (the plan's stage 1), got 0, 1, 1");
  CHECK(err([](json& j) { j["pipeline"]["p2p"][0]["to"] = 5; }) ==
        "pp.json: pipeline.p2p[0].to: expected 1 (the pp rank after 0), got 5");
  CHECK(err([](json& j) { j["pipeline"]["p2p"][0]["from"] = 1; }) ==
        "pp.json: pipeline.p2p[0].from: expected a pp rank of 0..0 (one with a next rank), got 1");
  // A p2p of 0 bytes is no point of a bandwidth curve; 2^64 - 1 is told the range.
  CHECK(err([](json& j) { j["pipeline"]["p2p"][0]["bytes"] = 0; }) ==
        "pp.json: pipeline.p2p[0].bytes: expected an integer in 1..1125899906842624, got 0");
  CHECK(err([](json& j) { j["pipeline"]["p2p"][0]["bytes"] = 18446744073709551615ULL; }) ==
        "pp.json: pipeline.p2p[0].bytes: expected an integer in 1..1125899906842624, got 18446744073709551615");
  CHECK(err([](json& j) { j.erase("pipeline"); }) == "pp.json: pipeline: missing (the plan has pp_degree 2)");
  // The optimizer phase tp-run does not run under the pipeline: its records say "measured": false, and pass.
  json unmeasured = pipeline_profile();
  size_t optimizer = 0;
  for (auto& rec : unmeasured["ops"])
    if (rec["segment"] == "optimizer") {
      rec["measured"] = false;
      rec["time_us"] = nullptr;
      ++optimizer;
    }
  REQUIRE(optimizer > 0);
  CHECK(parse_measurements(unmeasured, "pp.json").ops.size() == ok.ops.size() - optimizer);
}
