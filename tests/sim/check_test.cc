// tp-plan check's logic (sim/check/): the comparison against a baseline, its tolerances, the explanation of what
// moved, and the baseline file's errors. The tool itself is tested end to end in tests/integration
// (tp_plan_check_test.sh).
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>

#include "plans/config.h"
#include "plans/error.h"
#include "plans/lower.h"
#include "sim/check/baseline.h"
#include "sim/check/compare.h"
#include "sim/cluster_spec.h"

using namespace tptune;

namespace {

CheckBaseline predict(const std::string& preset, ActivationCheckpointing ac) {
  // One node of 8: no data-parallel traffic (FSDP reduces gradients in fp32, and on 64 GPUs its reduce-scatter
  // bounds the 70B step whatever the plan) hides what the plans change.
  Config cfg = load_config(std::string(TPTUNE_SOURCE_DIR) + "/examples/llama3-8b-h100.yaml");
  Plan base;
  base.tp_degree = 8;
  base.dp_shard = 1;
  base.loss_parallel = preset == "sequence_parallel";
  base.activation_checkpointing = ac;
  Program p = lower(cfg.model, cfg.training, preset_plan(preset, base));
  ClusterSpec cluster = resolve_cluster(cfg);
  const CostParams& c = default_cost_params();
  OpCosts costs = cost_ops(p, cluster, c);
  Timeline tl = schedule(p, costs, c);
  return baseline_from_report(make_report(p, cluster, c, costs, tl, kAllOps));
}

// A small baseline by hand: step 100 ms, 1000 tokens/s, 10 GiB.
CheckBaseline hand_baseline() {
  CheckBaseline b;
  b.setup = {{"tp", "8"}};
  b.step_time_ms = 100;
  b.tokens_per_second_per_gpu = 1000;
  b.peak_memory_gib = 10;
  b.memory_capacity_gib = 80;
  b.breakdown_ms = {{"compute", 90}, {"exposed_tp_comm", 10}, {"exposed_dp_comm", 0}};
  b.memory_gib = {{"activations", 4}, {"optimizer", 6}};
  b.kind_ms = {{"gemm", 80}, {"all_gather(tp)", 20}};
  b.ops = {{"layers.*.attention.wq.fwd", "forward", "gemm", "compute", 80, 50},
           {"layers.*.feed_forward.w1.fwd", "forward", "gemm", "compute", 80, 30}};
  return b;
}

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = std::string(TPTUNE_BINARY_DIR) + "/" + name;
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("check: the same prediction passes, and the baseline round-trips through JSON", "[check]") {
  CheckBaseline b = predict("sequence_parallel", ActivationCheckpointing::full);
  REQUIRE(b.ops.size() > 12);  // every template op, not just the report's top 12
  CheckBaseline back = baseline_from_json(to_json(b), "mem");
  CHECK(back.step_time_ms == b.step_time_ms);
  CHECK(back.ops.size() == b.ops.size());
  CHECK(back.kind_ms == b.kind_ms);
  CheckResult r = compare(back, b, {});
  CHECK(r.pass);
  CHECK(r.ops.empty());
  CHECK(r.breakdown.empty());
  // The op classes account for every op's time: their sum equals the sum over ops.
  double ops = 0, kinds = 0;
  for (const BaselineOp& op : b.ops) ops += op.total_ms;
  for (const auto& [k, v] : b.kind_ms) kinds += v;
  CHECK(kinds == Approx(ops).epsilon(1e-12));
}

TEST_CASE("check: a 3% slowdown fails at 2% and passes at 5%; the ops that moved are named", "[check]") {
  CheckBaseline base = hand_baseline(), now = hand_baseline();
  now.step_time_ms = 103;                       // +3 %
  now.tokens_per_second_per_gpu = 1000 / 1.03;  // the same slowdown per token
  now.breakdown_ms["compute"] = 93;
  now.kind_ms["gemm"] = 83;
  now.ops[1].total_ms = 33;  // w1 explains it
  CheckResult r = compare(base, now, {0.02, 0.01});
  CHECK_FALSE(r.pass);
  CHECK(r.metrics[0].fail);
  CHECK(r.metrics[0].worse == Approx(0.03));
  CHECK(r.metrics[1].fail);
  CHECK_FALSE(r.metrics[2].fail);
  REQUIRE(r.ops.size() == 1);
  CHECK(r.ops[0].what == "layers.*.feed_forward.w1.fwd [forward]");
  CHECK(r.ops[0].delta() == Approx(3));
  REQUIRE(r.breakdown.size() == 1);
  CHECK(r.breakdown[0].what == "compute");
  const std::string text = format_check(r, "b.json");
  CHECK(text.find("FAIL against b.json") != std::string::npos);
  CHECK(text.find("layers.*.feed_forward.w1.fwd [forward]") != std::string::npos);
  CHECK(compare(base, now, {0.05, 0.01}).pass);
}

TEST_CASE("check: memory growth beyond the tolerance fails even when the step gets faster", "[check]") {
  // Real predictions: full -> no activation checkpointing is faster (no recompute) but holds every activation.
  CheckBaseline full = predict("sequence_parallel", ActivationCheckpointing::full);
  CheckBaseline none = predict("sequence_parallel", ActivationCheckpointing::none);
  CheckResult r = compare(full, none, {0.02, 0.01});
  CHECK_FALSE(r.pass);
  CHECK_FALSE(r.metrics[0].fail);
  CHECK(r.metrics[0].worse < 0);  // faster
  CHECK(r.metrics[2].fail);       // peak memory
  REQUIRE_FALSE(r.memory.empty());
  CHECK(r.memory[0].what == "activations");  // the largest memory change
  // Recompute ops are gone: they show as "(gone)" ops.
  bool gone = false;
  for (const Delta& d : r.ops) gone = gone || (d.only_base && d.what.find("recompute") != std::string::npos);
  CHECK(gone);
  CHECK(r.setup_changes == std::vector<std::string>{"activation_checkpointing full -> none"});
}

TEST_CASE("check: a plan that stops fitting fails whatever the tolerance", "[check]") {
  CheckBaseline base = hand_baseline(), now = hand_baseline();
  now.fits_in_memory = false;
  CHECK_FALSE(compare(base, now, {10, 10}).pass);
}

TEST_CASE("check: percentages", "[check]") {
  CHECK(parse_percent("2%", "--max-slowdown") == Approx(0.02));
  CHECK(parse_percent("0.5 %", "--max-slowdown") == Approx(0.005));
  CHECK(parse_percent("3", "--max-slowdown") == Approx(0.03));
  CHECK_THROWS_WITH(parse_percent("-1%", "--max-slowdown"),
                    "--max-slowdown -1%: expected a percentage between 0 and 1000, such as 2%");
  CHECK_THROWS_WITH(parse_percent("two", "--max-memory-growth"), Catch::Contains("--max-memory-growth two"));
  CHECK_THROWS_WITH(parse_percent("nan", "--max-slowdown"), Catch::Contains("expected a percentage"));
}

TEST_CASE("check: bad baselines are one-line errors naming the file and what was expected", "[check]") {
  CHECK_THROWS_WITH(read_baseline("/nonexistent/b.json"),
                    "/nonexistent/b.json: no such file (expected a check baseline JSON file); write one with `tp-plan "
                    "check CONFIG ... --baseline FILE --update`");
  const std::string bad_json = write_temp("check_bad.json", "{\"format\": \"tptune-check-baseline\",\n  oops}");
  CHECK_THROWS_WITH(read_baseline(bad_json),
                    Catch::StartsWith(bad_json + ":2: invalid JSON (expected a tptune-check-baseline file): "));
  nlohmann::json j = to_json(hand_baseline());
  j.erase("step_time_ms");
  const std::string missing = write_temp("check_missing.json", j.dump());
  CHECK_THROWS_WITH(read_baseline(missing),
                    Catch::StartsWith(missing + ": step_time_ms: missing (expected a number: the predicted step time"));
  j = to_json(hand_baseline());
  j["ops"][1]["total_ms"] = "fast";
  CHECK_THROWS_WITH(baseline_from_json(j, "b.json"),
                    "b.json: ops[1].total_ms: expected a number (ms per step), got \"fast\"");
  j = to_json(hand_baseline());
  j["format"] = "tptune-profile";
  CHECK_THROWS_WITH(baseline_from_json(j, "b.json"),
                    "b.json: format: expected \"tptune-check-baseline\", got \"tptune-profile\"");
  CHECK_THROWS_WITH(baseline_from_json(nlohmann::json::array(), "b.json"), Catch::Contains("expected a JSON object"));
  j = to_json(hand_baseline());
  j["peak_memory_gib"] = -1;
  CHECK_THROWS_AS(baseline_from_json(j, "b.json"), Error);
  // Unknown keys (a newer tptune) are ignored.
  j = to_json(hand_baseline());
  j["something_new"] = 1;
  CHECK(baseline_from_json(j, "b.json").step_time_ms == 100);
}
