// tp-plan check's logic (sim/check/): the comparison against a baseline, its tolerances, the explanation of what
// moved, and the baseline file's errors. The tool itself is tested end to end in tests/integration
// (tp_plan_check_test.sh).
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>

#include "plans/language/config.h"
#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "plans/util/version.h"
#include "sim/check/baseline.h"
#include "sim/check/check_report.h"
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

// A small baseline by hand: step 100 ms, 1000 tokens/s, 10 GiB, written by this build.
CheckBaseline hand_baseline() {
  CheckBaseline b;
  b.written_by = this_build();
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

TEST_CASE("check: a 3% slowdown fails at 2% and passes at 5%, the ops that moved are named", "[check]") {
  CheckBaseline base = hand_baseline(), now = hand_baseline();
  now.step_time_ms = 103;                       // +3 %
  now.tokens_per_second_per_gpu = 1000 / 1.03;  // the same slowdown per token
  now.breakdown_ms["compute"] = 93;
  now.kind_ms["gemm"] = 83;
  now.ops[1].total_ms = 33;                    // w1 explains it
  CheckResult r = compare(base, now, {2, 1});  // percent
  CHECK_FALSE(r.pass);
  CHECK(r.exit_status() == kExitRegression);
  CHECK(r.metrics[0].fail);
  CHECK(r.metrics[0].worse_percent == Approx(3));
  CHECK(r.metrics[0].change_percent == Approx(3));
  CHECK(r.metrics[1].worse_percent == Approx(3));  // 1000 / (1000 / 1.03) - 1: 3 % more time per token
  CHECK(r.metrics[1].fail);
  CHECK_FALSE(r.metrics[2].fail);
  REQUIRE(r.ops.size() == 1);
  CHECK(r.ops[0].what == "layers.*.feed_forward.w1.fwd [forward]");
  CHECK(r.ops[0].delta() == Approx(3));
  REQUIRE(r.breakdown.size() == 1);
  CHECK(r.breakdown[0].what == "compute");
  const std::string text = format_check(r, "b.json");
  CHECK(text.find("FAIL against b.json (max slowdown 2 %, max memory growth 1 %)") != std::string::npos);
  CHECK(text.find("+3.00 %  FAIL: slower by 3.00 % (limit 2 %)") != std::string::npos);
  CHECK(text.find("FAIL: slower per token by 3.00 % (limit 2 %)") != std::string::npos);
  CHECK(text.find("note:") == std::string::npos);  // the baseline is this build's
  CHECK(text.find("layers.*.feed_forward.w1.fwd [forward]") != std::string::npos);
  CheckResult within = compare(base, now, {5, 1});
  CHECK(within.pass);
  CHECK(within.exit_status() == kExitPass);
  CHECK(metric_verdict(within.metrics[0]) == "ok: slower by 3.00 % (limit 5 %)");
  CHECK(metric_verdict(within.metrics[2]) == "ok: unchanged");
  // A 0.5 % tolerance prints as it was written.
  CHECK(metric_verdict(compare(base, now, {0.5, 1}).metrics[0]) == "FAIL: slower by 3.00 % (limit 0.5 %)");
  // Faster: the improvement is named, with no limit.
  CHECK(metric_verdict(compare(now, base, {2, 1}).metrics[0]) == "ok: faster by 2.91 %");  // 100 / 103 - 1
}

TEST_CASE("check: memory growth beyond the tolerance fails even when the step gets faster", "[check]") {
  // Real predictions: full -> no activation checkpointing is faster (no recompute) but holds every activation.
  CheckBaseline full = predict("sequence_parallel", ActivationCheckpointing::full);
  CheckBaseline none = predict("sequence_parallel", ActivationCheckpointing::none);
  CheckResult r = compare(full, none, {2, 1});
  CHECK_FALSE(r.pass);
  CHECK_FALSE(r.metrics[0].fail);
  CHECK(r.metrics[0].worse_percent < 0);  // faster
  CHECK(metric_verdict(r.metrics[2]).rfind("FAIL: larger by ", 0) == 0);
  CHECK(r.metrics[2].fail);  // peak memory
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
  CHECK_FALSE(compare(base, now, {1000, 1000}).pass);
}

TEST_CASE("check: tolerances are in percent: 5 means 5 %", "[check]") {
  CHECK(parse_percent("2%", "--max-slowdown") == 2);
  CHECK(parse_percent("0.5 %", "--max-slowdown") == 0.5);
  CHECK(parse_percent("3", "--max-slowdown") == 3);
  CHECK(parse_percent("0", "--max-slowdown") == 0);
  CHECK(parse_percent("1000", "--max-slowdown") == 1000);
  CHECK_THROWS_WITH(
      parse_percent("-1%", "--max-slowdown"),
      "--max-slowdown -1%: expected a percentage from 0 to 1000 (5 means 5 %, not 0.05), such as 2% or 2");
  CHECK_THROWS_WITH(parse_percent("1000.5", "--max-slowdown"), Catch::Contains("from 0 to 1000 (5 means 5 %"));
  CHECK_THROWS_WITH(parse_percent("", "--max-slowdown"), Catch::Contains("expected a percentage"));
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

namespace {

// hand_baseline() 3 % slower: the step 100 -> 103 ms, all of it compute in feed_forward.w1 (30 -> 33 ms).
CheckBaseline three_percent_slower() {
  CheckBaseline now = hand_baseline();
  now.step_time_ms = 103;
  now.tokens_per_second_per_gpu = 1000 / 1.03;
  now.breakdown_ms["compute"] = 93;
  now.kind_ms["gemm"] = 83;
  now.ops[1].total_ms = 33;
  return now;
}

}  // namespace

TEST_CASE("check --format markdown: the pull-request comment, exactly", "[check]") {
  CheckBaseline base = hand_baseline(), now = three_percent_slower();
  base.setup = now.setup = {{"model", "llama3-8b"}, {"plan", "sequence_parallel"}, {"tp", "8"}};
  // step time 100 -> 103: +3.00 %, 3 % slower against a 2 % limit. tokens/s 1000 -> 1000 / 1.03 = 970.87: -2.91 %
  // (970.87 / 1000 - 1), and 3 % more time per token (1000 / 970.87 - 1). Memory 10 -> 10. What moved: compute
  // 90 -> 93 (the exposed communication terms did not move, so they are not listed), gemm 80 -> 83, w1 30 -> 33.
  const std::string want =
      "### tp-plan check: FAIL\n"
      "\n"
      "Predicted: model `llama3-8b`, plan `sequence_parallel`, tp `8`.\n"
      "\n"
      "Baseline `b.json`; max slowdown 2 %, max memory growth 1 %.\n"
      "\n"
      "| | baseline | now | change | verdict |\n"
      "| --- | ---: | ---: | ---: | --- |\n"
      "| step time (ms) | 100.00 | 103.00 | +3.00 % | **FAIL**: slower by 3.00 % (limit 2 %) |\n"
      "| tokens/s per GPU | 1000.00 | 970.87 | -2.91 % | **FAIL**: slower per token by 3.00 % (limit 2 %) |\n"
      "| peak memory (GiB) | 10.00 | 10.00 | +0.00 % | ok: unchanged |\n"
      "| fits in memory | yes | yes | | ok |\n"
      "\n"
      "#### What moved\n"
      "\n"
      "Where the step time moved (ms; these add up to it):\n"
      "\n"
      "| term | baseline | now | delta |\n"
      "| --- | ---: | ---: | ---: |\n"
      "| `compute` | 90.00 | 93.00 | +3.00 |\n"
      "\n"
      "Op classes that moved most (busy ms per step):\n"
      "\n"
      "| op class | baseline | now | delta |\n"
      "| --- | ---: | ---: | ---: |\n"
      "| `gemm` | 80.00 | 83.00 | +3.00 |\n"
      "\n"
      "Ops that moved most (ms per step, all instances):\n"
      "\n"
      "| op | baseline | now | delta |\n"
      "| --- | ---: | ---: | ---: |\n"
      "| `layers.*.feed_forward.w1.fwd [forward]` | 30.000 | 33.000 | +3.000 |\n"
      "\n"
      "If this change is intended, write the new baseline with `--update` and commit it.\n";
  CHECK(format_check_markdown(compare(base, now, {2, 1}), "b.json") == want);

  // Within the tolerance: the verdict and the last line change, the tables do not.
  const std::string pass = format_check_markdown(compare(base, now, {5, 1}), "b.json");
  CHECK(pass.rfind("### tp-plan check: PASS\n", 0) == 0);
  CHECK(pass.find("| step time (ms) | 100.00 | 103.00 | +3.00 % | ok: slower by 3.00 % (limit 5 %) |\n") !=
        std::string::npos);
  CHECK(
      pass.find("\nThe prediction moved within the tolerances; refresh the baseline with `--update` if intended.\n") !=
      std::string::npos);
}

TEST_CASE("check --format markdown: a name with | or ` neither breaks the table nor the code span", "[check]") {
  CheckBaseline base = hand_baseline(), now = hand_baseline();
  base.ops[0].name = "odd|name`x";
  now.ops[0].name = "odd|name`x";
  now.ops[0].total_ms = 51;
  const std::string md = format_check_markdown(compare(base, now, {2, 1}), "my|baseline.json");
  CHECK(md.find("| `odd\\|name'x [forward]` | 50.000 | 51.000 | +1.000 |\n") != std::string::npos);
  CHECK(md.find("Baseline `my\\|baseline.json`;") != std::string::npos);
}

TEST_CASE("check: a baseline from another tptune is said to be one, and exits 4 rather than 1", "[check]") {
  CheckBaseline base = hand_baseline(), now = three_percent_slower();
  base.written_by = ToolBuild{"0.0.1", "0000000"};  // planted: an older tptune
  now.written_by = ToolBuild{"0.1.0", "abcdef1"};
  const std::string note =
      "the baseline was written by tptune 0.0.1 (git 0000000), this is tptune 0.1.0 (git abcdef1): a change may come "
      "from tptune, not from your plan; re-baseline with this tptune from the plan before your change (`tp-plan check "
      "... --update` on the base branch) and commit it";

  CheckResult beyond = compare(base, now, {2, 1});
  CHECK_FALSE(beyond.pass);
  CHECK(beyond.other_build());
  CHECK(beyond.exit_status() == kExitOtherBuild);
  CHECK(kExitOtherBuild == 4);
  CHECK(check_verdict(beyond) == "CHANGED (baseline from another tptune)");
  CHECK(build_note(beyond) == note);
  const std::string text = format_check(beyond, "b.json");
  CHECK(text.rfind("tp-plan check: CHANGED (baseline from another tptune) against b.json", 0) == 0);
  CHECK(text.find("\n  note: " + note + "\n") != std::string::npos);
  CHECK(text.find("(exit 4)") != std::string::npos);
  CHECK(text.find("if this change is intended") == std::string::npos);  // not called a change of the plan
  const std::string md = format_check_markdown(beyond, "b.json");
  CHECK(md.rfind("### tp-plan check: CHANGED (baseline from another tptune)\n", 0) == 0);
  CHECK(md.find("\n> **Baseline from another tptune**: " + note + ".\n") != std::string::npos);
  // The comparison itself is the same as against this build's baseline: the metrics and what moved are shown.
  CHECK(md.find("| step time (ms) | 100.00 | 103.00 | +3.00 % | **FAIL**: slower by 3.00 % (limit 2 %) |") !=
        std::string::npos);

  // Within the tolerances: exit 0, still with the note.
  CheckResult within = compare(base, now, {5, 1});
  CHECK(within.exit_status() == kExitPass);
  CHECK(format_check(within, "b.json").find("\n  note: " + note + "\n") != std::string::npos);

  // Only the git hash differs: another build.
  base.written_by = ToolBuild{"0.1.0", "1234567"};
  CHECK(compare(base, now, {2, 1}).exit_status() == kExitOtherBuild);
  // The same version and hash: the same build, a regression of the plan.
  base.written_by = now.written_by;
  CheckResult same = compare(base, now, {2, 1});
  CHECK(same.exit_status() == kExitRegression);
  CHECK(build_note(same).empty());
  CHECK(format_check_markdown(same, "b.json").find("another tptune") == std::string::npos);
}

TEST_CASE("check: a baseline without a stamp may come from any tptune", "[check]") {
  nlohmann::json j = to_json(three_percent_slower());
  REQUIRE(j.contains("tptune"));
  j.erase("tptune");
  CheckBaseline base = baseline_from_json(j, "old.json");
  CHECK_FALSE(base.written_by.has_value());
  CheckBaseline now = three_percent_slower();  // this build's; the same numbers
  CheckResult r = compare(base, now, {2, 1});
  CHECK(r.pass);  // nothing moved: passes whoever wrote the baseline
  CHECK(r.other_build());
  CHECK(build_note(r).rfind("the baseline carries no tptune version (written before versions were stamped), this is " +
                                this_build().describe() + ": a change may come from tptune, not from your plan;",
                            0) == 0);
  // Against a slower prediction it exits 4, not 1.
  CheckBaseline faster = hand_baseline();
  j = to_json(faster);
  j.erase("tptune");
  CHECK(compare(baseline_from_json(j, "old.json"), now, {2, 1}).exit_status() == kExitOtherBuild);
}

TEST_CASE("check: the baseline's stamp round-trips and a malformed one is an error naming the key", "[check]") {
  CheckBaseline b = hand_baseline();
  b.written_by = ToolBuild{"0.0.1", "0000000"};
  nlohmann::json j = to_json(b);
  CHECK(j["tptune"] == nlohmann::json{{"version", "0.0.1"}, {"git_hash", "0000000"}});
  CHECK(baseline_from_json(j, "b.json").written_by == b.written_by);
  // write_baseline stamps with this build, whatever the struct says (it writes what this build predicted).
  const std::string path = std::string(TPTUNE_BINARY_DIR) + "/check_stamp.json";
  write_baseline(hand_baseline(), path);
  CHECK(read_baseline(path).written_by == this_build());
  j["tptune"] = "0.0.1";
  CHECK_THROWS_WITH(baseline_from_json(j, "b.json"),
                    "b.json: tptune: expected an object {\"version\": ..., \"git_hash\": ...}, got \"0.0.1\"");
  j["tptune"] = {{"version", "0.0.1"}};
  CHECK_THROWS_WITH(baseline_from_json(j, "b.json"), "b.json: tptune.git_hash: missing (expected a string)");
  j["tptune"] = {{"version", 1}, {"git_hash", "0000000"}};
  CHECK_THROWS_WITH(baseline_from_json(j, "b.json"), "b.json: tptune.version: expected a string, got 1");
}

TEST_CASE("check --format json: the verdict, the exit status, both builds, every moved op, stamped", "[check]") {
  CheckBaseline base = hand_baseline(), now = three_percent_slower();
  base.written_by = ToolBuild{"0.0.1", "0000000"};
  nlohmann::json j = check_json(compare(base, now, {2, 1}), "b.json");
  CHECK(j["format"] == "tptune-check-result");
  CHECK(j["exit_status"] == 4);
  CHECK(j["verdict"] == "CHANGED (baseline from another tptune)");
  CHECK(j["same_tptune"] == false);
  CHECK(j["baseline_written_by"] == nlohmann::json{{"version", "0.0.1"}, {"git_hash", "0000000"}});
  CHECK(j["tptune"] == version_stamp());
  CHECK(j["tolerances"]["max_slowdown_percent"] == 2);
  CHECK(j["metrics"][0]["worse_percent"].get<double>() == Approx(3));
  CHECK(j["metrics"][0]["verdict"] == "FAIL: slower by 3.00 % (limit 2 %)");
  REQUIRE(j["ops_ms"].size() == 1);
  CHECK(j["ops_ms"][0]["what"] == "layers.*.feed_forward.w1.fwd [forward]");
  CHECK(j["ops_ms"][0]["delta"].get<double>() == Approx(3));
  // Unstamped: baseline_written_by is null.
  base.written_by.reset();
  CHECK(check_json(compare(base, now, {2, 1}), "b.json")["baseline_written_by"].is_null());
}

TEST_CASE("check: a pipeline added or removed is a setup change (pp absent means 1)", "[check][pp]") {
  // Issue 37: the setup key "pp" is written only for pipelines, and was never compared against its absence.
  CheckBaseline flat = hand_baseline();
  CheckBaseline pipe = hand_baseline();
  pipe.setup["pp"] = "2 (1F1B, 1 stage per rank, 4 microbatches of 1)";
  CHECK(compare(flat, pipe, {2, 1}).setup_changes ==
        std::vector<std::string>{"pp 1 -> 2 (1F1B, 1 stage per rank, 4 microbatches of 1)"});
  CHECK(compare(pipe, flat, {2, 1}).setup_changes ==
        std::vector<std::string>{"pp 2 (1F1B, 1 stage per rank, 4 microbatches of 1) -> 1"});
  CHECK(compare(pipe, pipe, {2, 1}).setup_changes.empty());
}
