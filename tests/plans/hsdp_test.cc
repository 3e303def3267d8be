// HSDP (dp_replicate x dp_shard) in the plan, the lowering, the config's search section and the exports: the plan
// YAML key and its errors, the all-reduce the lowering adds after each FSDP reduce-scatter (count, group, dtype and
// the bytes of the padded shard, derived by hand), the DDP refusal, and the torchtitan flags.
#include <catch2/catch.hpp>

#include "plans/export/export.h"
#include "plans/language/config.h"
#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "sim/report/explain.h"
#include "tests/fixtures.h"

using namespace tptune;
using Catch::Matchers::Contains;

namespace {

std::string error_of_plan(const std::string& yaml) {
  try {
    load_plan_string(yaml, "hsdp.yaml");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string error_of_config(const std::string& yaml) {
  try {
    load_config_string(yaml, "hsdp-config.yaml");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The sequence-parallel preset on test::tiny_llama_model() at seq 32.
Program lower_tiny(PlanToggles t, Framework f = Framework::dtensor) {
  return lower(test::tiny_llama_model(), Training{.seq_len = 32}, test::make_plan("sequence_parallel", t, f));
}

struct Tally {
  int64_t count = 0, bytes = 0;
};
Tally replicate_all_reduces(const Program& p) {
  Tally t;
  for (const CollectiveRecord& r : step_collectives(p)) {
    if (r.group != Group::dp_replicate) continue;
    CHECK(r.kind == CollectiveKind::all_reduce);
    CHECK(r.dtype == DType::fp32);
    CHECK(r.phase == Phase::backward);
    CHECK(r.module == "fsdp");
    CHECK(r.tensor == "gradient shards");
    ++t.count;
    t.bytes += r.bytes;
  }
  return t;
}

size_t op_count(const Program& p) {
  size_t n = 0;
  for (const Segment& s : p.segments) n += s.ops.size();
  return n;
}

}  // namespace

TEST_CASE("hsdp: plan YAML reads and writes dp_replicate, and the canonical form omits it at 1", "[hsdp][plan_yaml]") {
  const Plan p = load_plan_string("tp_degree: 8\ndp_shard: 16\ndp_replicate: 4\n", "hsdp.yaml");
  CHECK(p.dp_replicate == 4);
  CHECK(p.stated.count("dp_replicate") == 1);
  CHECK(p.provenance.at("dp_replicate") == "plan hsdp.yaml:3");
  const std::string yaml = plan_to_yaml(p);
  CHECK_THAT(yaml, Contains("dp_shard: 16\ndp_replicate: 4\n"));
  const Plan back = load_plan_string(yaml, "back.yaml");
  CHECK(back == p);
  CHECK(back.dp_replicate == 4);
  // A plan without HSDP is written as it was before the key existed.
  const Plan one = load_plan_string("tp_degree: 8\n");
  CHECK(one.dp_replicate == 1);
  CHECK_THAT(plan_to_yaml(one), !Contains("dp_replicate"));
  Plan other = p;
  other.dp_replicate = 2;
  CHECK_FALSE(other == p);  // part of the plan's identity
}

TEST_CASE("hsdp: bad dp_replicate values are one-line errors naming file:line", "[hsdp][plan_yaml]") {
  for (const char* v : {"0", "-1", "x", "1.5", "1048577", "99999999999999999999", "[2]"}) {
    INFO(v);
    const std::string e = error_of_plan(std::string("tp_degree: 2\ndp_replicate: ") + v + "\n");
    CHECK_THAT(e, Contains("hsdp.yaml:2: dp_replicate: expected an integer in 1..1048576"));
    CHECK(e.find('\n') == std::string::npos);
  }
}

TEST_CASE("hsdp: search.dp_replicate defaults to (1) and is range-checked with file:line", "[hsdp][config]") {
  const Config none = load_config_string("model: {preset: tiny-llama}\n");
  CHECK(none.search.dp_replicate == std::vector<int>{1});
  const Config c = load_config_string("model: {preset: tiny-llama}\nsearch:\n  dp_replicate: [1, 2, 4]\n");
  CHECK(c.search.dp_replicate == std::vector<int>{1, 2, 4});
  CHECK_THAT(error_of_config("model: {preset: tiny-llama}\nsearch:\n  dp_replicate: [1, 0]\n"),
             Contains("hsdp-config.yaml:3: search.dp_replicate[1]: expected an integer in 1..1048576"));
  CHECK_THAT(error_of_config("model: {preset: tiny-llama}\nsearch:\n  dp_replicate: [2097152]\n"),
             Contains("hsdp-config.yaml:3: search.dp_replicate[0]: expected an integer in 1..1048576"));
  CHECK_THAT(error_of_config("model: {preset: tiny-llama}\nsearch:\n  dp_replicate: two\n"),
             Contains("hsdp-config.yaml:3: search.dp_replicate"));
}

TEST_CASE("hsdp: the lowering adds one fp32 all-reduce of the padded gradient shard per FSDP reduce-scatter",
          "[hsdp][lower]") {
  const Program fsdp = lower_tiny({.tp_degree = 2, .dp_shard = 3, .dp_replicate = 1, .loss_parallel = true}),
                hsdp = lower_tiny({.tp_degree = 2, .dp_shard = 3, .dp_replicate = 2, .loss_parallel = true});
  CHECK(hsdp.dp == 3);
  CHECK(hsdp.dp_replicate == 2);
  CHECK(replicate_all_reduces(fsdp).count == 0);
  // One per FSDP module group: the block template once (x 2 layers), the head (norm + output) and the embedding.
  // The Program gains 3 template ops: one in block.bwd, one in head, one in embed.bwd.
  CHECK(op_count(hsdp) == op_count(fsdp) + 3);
  const Tally t = replicate_all_reduces(hsdp);
  CHECK(t.count == 2 + 2);
  // Each gradient of local TP shape (d0, rest) is padded on dim 0 to a multiple of dp_shard 3 (FSDP2's
  // _get_dim0_padded_size), so this rank's fp32 shard is ceil(d0 / 3) x rest x 4 bytes. tp 2, sequence parallel:
  //   block: attention_norm, ffn_norm (64): 22 + 22; wq (32, 64): 11 x 64 = 704; wk, wv (16, 64): 6 x 64 = 384 each;
  //          wo (64, 32): 22 x 32 = 704; w1, w3 (64, 64): 22 x 64 = 1408 each; w2 (64, 64): 1408
  //          -> 6444 elements = 25776 bytes, twice (2 layers);
  //   embedding (128, 64) vocab-sharded: 43 x 64 = 2752 elements = 11008 bytes;
  //   head: norm (64) 22 + output (128, 64) 2752 = 2774 elements = 11096 bytes.
  // 2 x 25776 + 11008 + 11096 = 73656 bytes.
  CHECK(t.bytes == 73656);
  // Without padding the shards would be a third of the reduce-scatter: the padding is what FSDP2 sends.
  int64_t rs_bytes = 0;
  for (const CollectiveRecord& r : step_collectives(hsdp))
    if (r.group == Group::dp && r.kind == CollectiveKind::reduce_scatter) rs_bytes += r.bytes;
  CHECK(rs_bytes == 2 * 74240 + 32768 + 33024);  // unpadded fp32 gradients: 18560 x 4 per block; 8192 x 4; 8256 x 4
  CHECK(t.bytes > rs_bytes / 3);
  // Everything else is the plain FSDP Program: the all-reduces come right after each reduce-scatter.
  for (const Segment& s : hsdp.segments)
    for (size_t i = 0; i < s.ops.size(); ++i) {
      const auto* c = std::get_if<CollectiveOp>(&s.ops[i].kind);
      if (!c || c->group != Group::dp_replicate) continue;
      REQUIRE(i > 0);
      const auto* rs = std::get_if<CollectiveOp>(&s.ops[i - 1].kind);
      REQUIRE(rs);
      CHECK(rs->kind == CollectiveKind::reduce_scatter);
      CHECK(s.ops[i].inputs == s.ops[i - 1].outputs);
      CHECK(s.ops[i].deps == std::vector<int>{static_cast<int>(i - 1)});  // waits for its reduce-scatter only
    }
}

TEST_CASE("hsdp: dp_shard 1 is DDP for the DTensor family (refused) and FSDP2's replicate path for torchtitan 0.3",
          "[hsdp][lower]") {
  try {
    lower_tiny({.tp_degree = 2, .dp_shard = 1, .dp_replicate = 4, .loss_parallel = true});
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK_THAT(std::string(e.what()), Contains("dp_replicate 4 with dp_shard 1: torchtitan applies DDP"));
  }
  // torchtitan 0.3 always applies fully_shard: no reduce-scatter at dp_shard 1, the all-reduce of the whole local
  // gradient (ceil(d0 / 1) = d0): 18560 x 4 per block (fused wqkv holds the same elements), + 8192 x 4 + 8256 x 4.
  const Program tt =
      lower_tiny({.tp_degree = 2, .dp_shard = 1, .dp_replicate = 4, .loss_parallel = true}, Framework::torchtitan_0_3);
  const Tally t = replicate_all_reduces(tt);
  CHECK(t.count == 4);
  CHECK(t.bytes == 2 * 74240 + 32768 + 33024);
  for (const CollectiveRecord& r : step_collectives(tt)) CHECK(r.group != Group::dp);
}

TEST_CASE("hsdp: a Plan built in code is range-checked by the lowering", "[hsdp][lower]") {
  Plan p = preset_plan("sequence_parallel", Plan{});
  p.dp_shard = 2;
  Training t;
  t.seq_len = 32;
  for (int bad : {0, -3, (1 << 20) + 1}) {
    p.dp_replicate = bad;
    try {
      lower(test::tiny_llama_model(), t, p);
      FAIL("expected an error for " << bad);
    } catch (const Error& e) {
      CHECK_THAT(std::string(e.what()), Contains("dp_replicate"));
    }
  }
}

TEST_CASE("hsdp: explain lists the replicate all-reduces and says why", "[hsdp][explain]") {
  const Program p = lower_tiny({.tp_degree = 2, .dp_shard = 3, .dp_replicate = 2, .loss_parallel = true});
  const std::string text = explain_text(p);
  CHECK_THAT(text, Contains("dp_shard 3, dp_replicate 2"));
  CHECK_THAT(text, Contains("HSDP, dp_replicate 2"));
  CHECK_THAT(text, Contains("gradient shards"));
  const nlohmann::json j = explain_json(p);
  CHECK(j.at("dp_replicate") == 2);
  CHECK(j.at("per_step").at("dp_replicate").at("count") == 4);
  CHECK(j.at("per_step").at("dp_replicate").at("bytes") == 73656);
  // Plans without HSDP keep their documents as they were.
  const nlohmann::json plain =
      explain_json(lower_tiny({.tp_degree = 2, .dp_shard = 3, .dp_replicate = 1, .loss_parallel = true}));
  CHECK_FALSE(plain.contains("dp_replicate"));
  CHECK_FALSE(plain.at("per_step").contains("dp_replicate"));
}

TEST_CASE("hsdp: exports carry the replicate degree (torchtitan 0.3 flag, TOML key, Python comment)",
          "[hsdp][export]") {
  Plan base;
  base.tp_degree = 8;
  base.dp_shard = 16;
  base.dp_replicate = 8;
  base.loss_parallel = true;
  base.framework = Framework::torchtitan_0_3;
  const Plan p = preset_plan("sequence_parallel", base);
  ExportContext ctx;
  ctx.model = Model{};
  REQUIRE(model_preset("llama3-405b", *ctx.model));
  ctx.nodes = 128;
  ctx.gpus_per_node = 8;
  const std::string cli = export_torchtitan_cli(p, ctx);
  // torchtitan/config/configs.py ParallelismConfig.data_parallel_replicate_degree, hyphenated as tyro prints it.
  CHECK_THAT(cli, Contains("--parallelism.data-parallel-replicate-degree 8"));
  CHECK_THAT(cli, Contains("--parallelism.data-parallel-shard-degree 16"));
  const std::string toml = export_torchtitan_toml(p);
  CHECK_THAT(toml, Contains("data_parallel_replicate_degree = 8\ndata_parallel_shard_degree = 16\n"));
  CHECK_THAT(export_python(p), Contains("# HSDP: dp_replicate 8 x dp_shard 16 x tp 8."));
  // Without HSDP: replicate degree 1, no HSDP comment.
  base.dp_replicate = 1;
  const Plan q = preset_plan("sequence_parallel", base);
  ctx.nodes = 16;  // tp 8 x dp_shard 16: torchrun starts 16 nodes x 8
  CHECK_THAT(export_torchtitan_cli(q, ctx), Contains("--parallelism.data-parallel-replicate-degree 1"));
  CHECK_THAT(export_python(q), !Contains("HSDP"));
}
