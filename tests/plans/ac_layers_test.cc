// A plan's ac_layers (activation checkpointing on the first k blocks): the plan file key, its errors, and the split
// lowering (plans/program/program.h "Structure": two block.bwd segments, the blocks without recompute first).
#include <catch2/catch.hpp>

#include "plans/export/export.h"
#include "plans/language/plan.h"
#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "sim/report/explain.h"
#include "tests/fixtures.h"

using namespace tptune;
using Catch::Contains;

namespace {

Plan plan_text(const std::string& ac, const std::string& ac_layers) {
  // Line 1 tp_degree, 2 dp_shard, 3 activation_checkpointing, 4 ac_layers.
  return load_plan_string(
      "tp_degree: 2\ndp_shard: 2\nactivation_checkpointing: " + ac + "\nac_layers: " + ac_layers + "\nmodules: {}\n",
      "p.yaml");
}

// async TP needs compile.
const Training kTraining{.seq_len = 256, .local_batch_size = 1, .compile = true};

// 4 layers, tp 2, dp_shard 2, sequence parallel with async TP and loss parallel.
Program lower_split(int64_t k, ActivationCheckpointing ac, int layers = 4) {
  return lower(test::small_model(layers), kTraining,
               test::make_plan("sequence_parallel", {.tp_degree = 2,
                                                     .dp_shard = 2,
                                                     .async_tp = true,
                                                     .loss_parallel = true,
                                                     .activation_checkpointing = ac,
                                                     .ac_layers = k}));
}

bool has_recompute(const Segment& s) {
  for (const Op& op : s.ops)
    if (op.phase == Phase::recompute) return true;
  return false;
}

}  // namespace

TEST_CASE("ac_layers: plan YAML round trip, provenance, written only when set") {
  const Plan p = plan_text("full", "3");
  CHECK(p.ac_layers == 3);
  CHECK(p.stated.count("ac_layers") == 1);
  CHECK(p.provenance.at("ac_layers") == "plan p.yaml:4");
  const std::string y = plan_to_yaml(p);
  CHECK_THAT(y, Contains("activation_checkpointing: full\nac_layers: 3\n"));
  CHECK(load_plan_string(y, "q.yaml") == p);
  Plan none = p;
  none.ac_layers = 0;
  CHECK_THAT(plan_to_yaml(none), !Contains("ac_layers"));
}

TEST_CASE("ac_layers: errors name the plan file line") {
  CHECK_THROWS_WITH(plan_text("full", "0"), "p.yaml:4: ac_layers: expected an integer in 1..10000, got '0'");
  CHECK_THROWS_WITH(plan_text("full", "-1"), "p.yaml:4: ac_layers: expected an integer in 1..10000, got '-1'");
  CHECK_THROWS_WITH(plan_text("full", "abc"), "p.yaml:4: ac_layers: expected an integer in 1..10000, got 'abc'");
  // The model's layer count and the policy are lower()'s checks, naming the line through the provenance.
  CHECK_THROWS_WITH(
      lower(test::small_model(4), kTraining, plan_text("full", "5")),
      "plan p.yaml:4: ac_layers: expected 1 to 4 (the model's n_layers; 0 or absent: every block), got 5");
  CHECK_THROWS_WITH(
      lower(test::small_model(4), kTraining, plan_text("none", "2")),
      Contains("plan p.yaml:4: ac_layers 2: checkpoints the first 2 blocks") && Contains("which is none"));
}

TEST_CASE("ac_layers: the block backward splits into blocks without recompute, then the checkpointed ones") {
  for (auto ac : {ActivationCheckpointing::full, ActivationCheckpointing::selective})
    for (int64_t k : {1, 3}) {
      INFO("ac " << to_string(ac) << " k " << k);
      const Program p = lower_split(k, ac);
      std::vector<SegmentKind> kinds;
      for (const Segment& s : p.segments) kinds.push_back(s.kind);
      using enum SegmentKind;
      CHECK(kinds == std::vector<SegmentKind>{embed_fwd, block_fwd, head, block_bwd, block_bwd, embed_bwd,
                                              block_optimizer, optimizer});
      const Segment &plain = p.segments[3], &ckpt = p.segments[4];
      CHECK(plain.first_layer == k);
      CHECK(plain.layer_count == 4 - k);
      CHECK(segment_instances(p, plain) == 4 - k);
      CHECK(!has_recompute(plain));
      CHECK(ckpt.first_layer == 0);
      CHECK(ckpt.layer_count == k);
      CHECK(has_recompute(ckpt));
      CHECK(plain.reverse);
      CHECK(ckpt.reverse);

      // expand(): every layer's backward once, layers 3, 2, 1, 0 in that order; recompute only in layers < k.
      const FlatProgram f = expand(p);
      std::vector<int> bwd_layers;
      for (const FlatOp& op : f.ops) {
        if (op.op->phase == Phase::recompute) CHECK(op.layer < k);
        if (op.op->phase != Phase::backward || op.layer < 0) continue;
        if (bwd_layers.empty() || bwd_layers.back() != op.layer) bwd_layers.push_back(op.layer);
      }
      CHECK(bwd_layers == std::vector<int>{3, 2, 1, 0});
      int recompute_layers = 0;
      for (int l = 0; l < 4; ++l) {
        bool any = false;
        for (const FlatOp& op : f.ops) any |= op.op->phase == Phase::recompute && op.layer == l;
        recompute_layers += any;
      }
      CHECK(recompute_layers == k);
    }
}

TEST_CASE("ac_layers = n_layers lowers as every block (ac_layers 0), but for the plan's field") {
  for (auto ac : {ActivationCheckpointing::full, ActivationCheckpointing::selective}) {
    Program all = lower_split(4, ac), every = lower_split(0, ac);
    CHECK(all.plan.ac_layers == 4);
    all.plan.ac_layers = 0;
    CHECK(expand(all).ops.size() == expand(every).ops.size());
    REQUIRE(all.segments.size() == every.segments.size());
    for (size_t s = 0; s < all.segments.size(); ++s) {
      CHECK(all.segments[s].kind == every.segments[s].kind);
      CHECK(all.segments[s].repeat == every.segments[s].repeat);
      REQUIRE(all.segments[s].ops.size() == every.segments[s].ops.size());
      for (size_t j = 0; j < all.segments[s].ops.size(); ++j) {
        CHECK(all.segments[s].ops[j].name == every.segments[s].ops[j].name);
        CHECK(all.segments[s].ops[j].deps == every.segments[s].ops[j].deps);
      }
    }
    CHECK(all.plan == every.plan);
  }
}

TEST_CASE("ac_layers: explain lists the checkpointed blocks' backward apart") {
  const Program p = lower_split(1, ActivationCheckpointing::full);
  const std::string text = explain_text(p);
  CHECK_THAT(text, Contains("AC full on the first 1 of 4 blocks"));
  CHECK_THAT(text, Contains("One transformer block without activation checkpointing (layers.1; layers 1 to 3"));
  CHECK_THAT(text, Contains("Backward of a checkpointed block (layers.0; layers 0 to 0"));
  const nlohmann::json j = explain_json(p);
  CHECK(j["plan"]["ac_layers"] == 1);
  // Full AC recomputes the forward's TP collectives but for those whose outputs backward does not read (the last
  // reduce-scatter, the block's output): the checkpointed backward has more than the others, at most all the forward's.
  int fwd = 0, bwd = 0, ckpt = 0;
  for (const auto& [k, v] : j["per_block"]["forward"].items()) fwd += v.get<int>();
  for (const auto& [k, v] : j["per_block"]["backward"].items()) bwd += v.get<int>();
  for (const auto& [k, v] : j["per_checkpointed_block"]["backward"].items()) ckpt += v.get<int>();
  CHECK(ckpt > bwd);
  CHECK(ckpt <= bwd + fwd);
  CHECK(!explain_json(lower_split(0, ActivationCheckpointing::full))["plan"].contains("ac_layers"));
}

TEST_CASE("ac_layers: torchtitan exports map a full-AC prefix of floor(L/N) blocks to every N-th block") {
  Plan p = plan_text("full", "40");
  ExportContext ctx;
  ctx.n_layers = 80;
  // floor(80 / 2) = 40: selective_ac_option "2" checkpoints layers 1, 3, ..., 79, the same count.
  std::string toml = export_torchtitan_toml(p, ctx);
  CHECK_THAT(toml, Contains("mode = \"selective\"") && Contains("selective_ac_option = \"2\"") &&
                       Contains("layers 1, 3, ..., 79"));
  // 30 of 80: floor(80/2) = 40 (off by 10), floor(80/3) = 26 (off by 4), floor(80/4) = 20: the nearest is N = 3.
  p.ac_layers = 30;
  toml = export_torchtitan_toml(p, ctx);
  CHECK_THAT(toml, Contains("mode = \"full\"") &&
                       Contains("NOTE: the plan checkpoints (full) only the first 30 of 80") &&
                       Contains("selective_ac_option = \"3\" checkpoints (full AC) one block in every 3, 26 of 80"));
  // Selective AC on a prefix: torchtitan's every-N-th block is full AC, so never exact.
  p.activation_checkpointing = ActivationCheckpointing::selective;
  p.ac_layers = 40;
  toml = export_torchtitan_toml(p, ctx);
  CHECK_THAT(toml, Contains("selective_ac_option = \"op\"") && Contains("NOTE: the plan checkpoints (selective)"));
  // torchtitan 0.3 has no layer option: a NOTE. (Its export needs the model, an 80-layer 70B, and a cluster of
  // tp 2 x dp_shard 2 = 4 GPUs, and one of torchtitan's two module plans.)
  {
    ExportContext tt = ctx;
    Model m70;
    REQUIRE(model_preset("llama3-70b", m70));
    tt.model = m70;
    tt.nodes = 1;
    tt.gpus_per_node = 4;
    CHECK_THAT(export_torchtitan_cli(preset_plan("sequence_parallel", p), tt),
               Contains("torchtitan 0.3 applies its") && Contains("N = 2 checkpoints"));
  }
  CHECK_THAT(export_python(p, ctx), Contains("model.layers[0 .. 39]"));
  // 6 of 7 layers: floor(7/1) = 7 (off by 1), floor(7/2) = 3: the tie-free nearest is N = 1 (all 7).
  p.activation_checkpointing = ActivationCheckpointing::full;
  p.ac_layers = 6;
  const LayerAc a = layer_ac(p, 7);
  CHECK(a.applies);
  CHECK(!a.exact);
  CHECK(a.every == 1);
  CHECK(a.blocks == 7);
  // 2 of 6: floor(6/2) = 3 and floor(6/3) = 2: exact at N = 3; 4 of 10: floor(10/2) = 5 and floor(10/3) = 3 tie at 1
  // off, ties go to more blocks: N = 2.
  p.ac_layers = 2;
  CHECK(layer_ac(p, 6).exact);
  CHECK(layer_ac(p, 6).every == 3);
  p.ac_layers = 4;
  CHECK(layer_ac(p, 10).every == 2);
  CHECK(layer_ac(p, 10).blocks == 5);
}
