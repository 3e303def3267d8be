// The Profile file's one schema (plans/program/profile_format.h): the writer's JSON reads back to itself, and every bad
// member is a one-line error naming the file and the key.
#include "plans/program/profile_format.h"

#include <catch2/catch.hpp>

#include "../error_text.h"

namespace tptune {
namespace {

using test::error_of;

// A profile with every member the runtime writes: one timed op and one the single-GPU mode did not run.
Profile full_profile() {
  Profile p;
  p.environment = {{"backend", "cpu"}, {"device", "test cpu"}, {"ranks", 2}, {"libraries", {{"eigen", "3.4.0"}}}};
  p.backend = "cpu", p.device = "test cpu", p.ranks = 2;
  p.program = {{"tp", 2}, {"dp", 1}};
  p.config_yaml = "model: {}\n", p.plan_yaml = "tp_degree: 2\n";
  p.timing = ProfileTiming{2, 3};
  p.final_loss = 5.5;
  p.compute_wall = WallTimes{{10.0, 9.0, 9.0, 11.0, 12.0}, {9.0, 10.0, 12.0}};
  p.local_shapes_of_tp = 2;
  p.collectives = "not run";
  ProfileOp gemm;
  gemm.index = 0, gemm.name = "layers.0.attention.wq.fwd", gemm.module = "layers.0.attention.wq";
  gemm.segment = "block.fwd", gemm.layer = 0, gemm.template_op = 3, gemm.phase = "forward", gemm.kind = "gemm";
  gemm.op = {{"m", 64}, {"n", 32}, {"k", 16}};
  gemm.chunk = ProfileChunk{"all_gather", 1, 2};
  gemm.inputs = {{"x", {2, 32}, {2, 32}, "fp32", "R", "activation"}};
  gemm.outputs = {{"y", {2, 16}, {2, 32}, "fp32", "S(-1)", "activation"}};
  gemm.time_us = TimeSummary{12.5, 11.9, 12.0, 13.1, 14.2};
  gemm.samples_us = {11.9, 12.5, 14.2};
  ProfileOp coll = gemm;
  coll.index = 1, coll.name = "layers.0.attention.all_reduce", coll.kind = "collective", coll.chunk.reset();
  coll.measured = false, coll.time_us.reset(), coll.samples_us.clear();
  coll.seeded_from_local = true;
  ProfileOp fused = gemm;  // a compiled Program's fused kernel: one record, the eager ops it replaces named
  fused.index = 2, fused.name = "layers.0.ffn_norm.fwd", fused.kind = "elementwise", fused.chunk.reset();
  fused.op = {{"fn", "add_rmsnorm"}, {"bytes", 32768}};
  fused.fused = {"layers.0.ffn_norm.fwd", "layers.0.attention.residual"};
  p.ops = {gemm, coll, fused};
  return p;
}

}  // namespace

TEST_CASE("profile format: what the writer writes, the reader reads back to the same JSON") {
  const nlohmann::json j = profile_json(full_profile());
  CHECK(j["format"] == "tptune-profile");
  CHECK(j["version"] == 1);
  CHECK(j["program"]["plan_yaml"] == "tp_degree: 2\n");
  CHECK(j["ops"][1]["measured"] == false);
  CHECK(j["ops"][1]["time_us"].is_null());
  CHECK_FALSE(j["ops"][1].contains("samples_us"));
  CHECK(j["ops"][1]["seeded_from_local"] == true);
  CHECK_FALSE(j["ops"][0].contains("seeded_from_local"));  // written only where true; absent reads as false
  CHECK_FALSE(j.contains("step_wall_us"));
  const Profile back = parse_profile(j, "p.json");
  CHECK(back.backend == "cpu");
  CHECK(back.ranks == 2);
  CHECK(back.ops[0].time_us->p90 == 13.1);
  CHECK(back.ops[0].chunk->count == 2);
  CHECK(back.ops[0].outputs[0].placement == "S(-1)");
  CHECK(back.ops[1].seeded_from_local);
  CHECK_FALSE(back.ops[0].seeded_from_local);
  CHECK(j["ops"][2]["fused"] == nlohmann::json{"layers.0.ffn_norm.fwd", "layers.0.attention.residual"});
  CHECK_FALSE(j["ops"][0].contains("fused"));  // written only for a fused kernel
  CHECK(back.ops[2].fused == std::vector<std::string>{"layers.0.ffn_norm.fwd", "layers.0.attention.residual"});
  CHECK(back.ops[0].fused.empty());
  CHECK(profile_json(back) == j);
  // The text entry point: the same, and a syntax error names the line.
  CHECK(profile_json(parse_profile_text(j.dump(1), "p.json")) == j);
  CHECK(error_of([] {
          parse_profile_text("{\n\"format\": 1,,\n}", "p.json");
        }).rfind("p.json:2: invalid JSON (expected a tp-run profile)", 0) == 0);
}

TEST_CASE("profile format: one-line errors naming the file and the key") {
  const nlohmann::json good = profile_json(full_profile());
  auto err = [](const nlohmann::json& j) { return error_of([&] { parse_profile(j, "p.json"); }); };
  CHECK(err(good) == "(no error)");
  nlohmann::json j = good;
  j["format"] = "tptune-bench";
  CHECK(err(j) == "p.json: expected a tp-run profile (\"format\": \"tptune-profile\")");
  j = good;
  j["format"] = 3;
  CHECK(err(j) == "p.json: format: expected a string, got 3");
  j = good;
  j["version"] = 4294967297;  // never narrowed to an int (it would be 1)
  CHECK(err(j) == "p.json: version: expected 1 (the profile format this tp-plan reads)");
  j = good;
  j.erase("ops");
  CHECK(err(j) == "p.json: ops: missing");
  j = good;
  j["ops"] = nlohmann::json::array();
  CHECK(err(j) == "p.json: ops: expected a non-empty list of op records");
  j = good;
  j["ops"][0].erase("name");
  CHECK(err(j) == "p.json: ops[0].name: missing");
  j = good;
  j["ops"][0].erase("time_us");  // a measured record without its time
  CHECK(err(j) == "p.json: ops[0].time_us: missing");
  j = good;
  j["ops"][0]["time_us"]["p90"] = 2e9;
  CHECK(err(j) == "p.json: ops[0].time_us.p90: expected a time of 0 .. 1e9 us (1000 s), got 2000000000");
  j = good;
  j["ops"][0]["samples_us"][1] = "slow";
  CHECK(err(j) == "p.json: ops[0].samples_us[1]: expected a number, got \"slow\"");
  j = good;
  j["ops"][1]["seeded_from_local"] = "yes";
  CHECK(err(j) == "p.json: ops[1].seeded_from_local: expected true or false, got \"yes\"");
  j = good;
  j["ops"][2]["fused"][1] = 3;
  CHECK(err(j) == "p.json: ops[2].fused[1]: expected the name of an op the kernel fuses");
  j = good;
  j["ops"][2]["fused"] = "layers.0.ffn_norm.fwd";
  CHECK(err(j) == "p.json: ops[2].fused: expected a list, got \"layers.0.ffn_norm.fwd\"");
  j = good;
  j["ops"][0]["template_op"] = -1;
  CHECK(err(j) == "p.json: ops[0].template_op: expected a non-negative integer, got -1");
  j = good;
  j["ops"][0]["inputs"][0]["shape"] = "[2, 32]";
  CHECK(err(j) == "p.json: ops[0].inputs[0].shape: expected a list, got \"[2, 32]\"");
  j = good;
  j["environment"]["ranks"] = 4294967297;
  CHECK(err(j) == "p.json: environment.ranks: expected an integer in 1..1048576, got 4294967297");
  j = good;
  j["program"]["config_yaml"] = 7;
  CHECK(err(j) == "p.json: program.config_yaml: expected a string, got 7");
  j = good;
  j["compute_wall_us"]["median"] = -1;
  CHECK(err(j) == "p.json: compute_wall_us.median: expected a non-negative number, got -1");

  // What a reader needs and the file may lack: require() names the key.
  const Profile p = parse_profile(good, "p.json");
  const JsonDoc doc("p.json");
  CHECK(error_of([&] { require(p.ops[1].time_us, doc, "ops[1].time_us"); }) == "p.json: ops[1].time_us: missing");
  CHECK(require(p.ops[0].segment, doc, "ops[0].segment") == "block.fwd");
}

TEST_CASE("profile format: a pipeline's block reads back, and its bad members are one-line errors") {
  Profile p = full_profile();
  ProfilePipeline pl;
  pl.pp = 2, pl.schedule = "1F1B", pl.microbatches = 2, pl.microbatch_size = 1;
  pl.stages = {{0, 1, 0}, {1, 1, 1}};
  pl.ranks = {{0, 30.0, 20.0, {{0, 0, "F", 0.0, 0.0, 10.0}, {0, 0, "B", 12.0, 3.0, 30.0}}},
              {1, 28.0, 14.0, {{1, 0, "F", 0.0, 9.0, 14.0}, {1, 0, "B", 14.0, 0.0, 28.0}}}};
  pl.p2p = {{0, 1, 4096, {2.5, 2.0, 2.0, 3.0, 3.0}, {2.0, 2.5, 3.0}}};
  pl.not_timed = "the optimizer";
  p.pipeline = pl;
  const nlohmann::json good = profile_json(p);
  CHECK(good["pipeline"]["ranks"][0]["actions"][1]["wait_us"] == 3.0);
  const Profile back = parse_profile(good, "p.json");
  REQUIRE(back.pipeline);
  CHECK(back.pipeline->ranks[1].actions[0].kind == "F");
  CHECK(back.pipeline->p2p[0].bytes == 4096);
  CHECK(profile_json(back) == good);

  auto err = [](const nlohmann::json& j) { return error_of([&] { parse_profile(j, "p.json"); }); };
  nlohmann::json j = good;
  j["pipeline"]["ranks"][0]["actions"][1]["kind"] = "X";
  CHECK(err(j) == "p.json: pipeline.ranks[0].actions[1].kind: expected F, B, I or W, got 'X'");
  j = good;
  j["pipeline"]["ranks"][1]["end_us"] = -1;
  CHECK(err(j) == "p.json: pipeline.ranks[1].end_us: expected a non-negative number, got -1");
  j = good;
  j["pipeline"]["pp"] = 0;
  CHECK(err(j) == "p.json: pipeline.pp: expected an integer in 1..1048576, got 0");
  j = good;
  j["pipeline"]["p2p"][0].erase("time_us");
  CHECK(err(j) == "p.json: pipeline.p2p[0].time_us: missing");
}

}  // namespace tptune
