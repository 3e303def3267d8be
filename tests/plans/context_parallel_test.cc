// Context parallelism in the plan and the lowering (plans/language/context_parallel.h): the plan YAML keys and their
// errors, dp_shard's resolution over the mesh [dp_replicate, dp_shard, cp, tp], cp 1 lowering to the Program without
// CP, the sequence shard, ring attention's blocks (FLOPs derived by hand: the causal total / cp under load balancing)
// and transfers (count, group, bytes derived by hand) for both rotate methods, FSDP over dp_shard x cp, and the
// sequence-length errors.
#include <catch2/catch.hpp>

#include "plans/language/config.h"
#include "plans/language/resolve/plan_resolve.h"
#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "sim/report/explain.h"
#include "tests/error_text.h"
#include "tests/fixtures.h"

using namespace tptune;
using Catch::Matchers::Contains;
using tptune::test::error_of;

namespace {

Program lower_tiny(PlanToggles t, int64_t seq = 32, const std::string& preset = "sequence_parallel") {
  return lower(test::tiny_llama_model(), Training{.seq_len = seq}, test::make_plan(preset, t));
}

const Segment& block_fwd(const Program& p) { return *p.segment(SegmentKind::block_fwd); }
const Segment& block_bwd(const Program& p) { return *p.segment(SegmentKind::block_bwd); }

int64_t attention_flops(const Segment& s, bool backward) {
  int64_t f = 0;
  for (const Op& op : s.ops)
    if (const auto* a = std::get_if<AttentionOp>(&op.kind);
        a && a->backward == backward && op.phase != Phase::recompute)
      f += a->flops();
  return f;
}

struct Tally {
  int count = 0;
  int64_t bytes = 0;
};
Tally cp_collectives(const Segment& s, CollectiveKind kind, DType dtype) {
  Tally t;
  for (const Op& op : s.ops)
    if (const auto* c = std::get_if<CollectiveOp>(&op.kind);
        c && c->group == Group::cp && c->kind == kind && c->dtype == dtype) {
      ++t.count;
      t.bytes += c->bytes;
    }
  return t;
}

}  // namespace

TEST_CASE("context parallel: plan keys round-trip and are written only for CP plans", "[cp][plan]") {
  Plan p =
      load_plan_string("tp_degree: 2\ncp_degree: 4\ncp_rotate_method: alltoall\ncp_load_balance: false\n", "cp.yaml");
  CHECK(p.cp_degree == 4);
  CHECK(p.cp_rotate == CpRotate::alltoall);
  CHECK_FALSE(p.cp_load_balance);
  CHECK(p.provenance.at("cp_degree") == "plan cp.yaml:2");
  const std::string yaml = plan_to_yaml(p);
  CHECK_THAT(yaml, Contains("cp_degree: 4\ncp_rotate_method: alltoall\ncp_load_balance: false\n"));
  CHECK(load_plan_string(yaml, "again.yaml") == p);
  // Defaults: torch's allgather rotater and the head-tail balancer; a plan without CP writes no cp key.
  const Plan d = load_plan_string("tp_degree: 2\n", "d.yaml");
  CHECK(d.cp_degree == 1);
  CHECK(d.cp_rotate == CpRotate::allgather);
  CHECK(d.cp_load_balance);
  CHECK_THAT(plan_to_yaml(d), !Contains("cp_"));
}

TEST_CASE("context parallel: bad plan values name the file and line", "[cp][plan][errors]") {
  CHECK(error_of([] { load_plan_string("tp_degree: 2\ncp_rotate_method: ring\n", "cp.yaml"); }) ==
        "cp.yaml:2: cp_rotate_method: expected one of allgather, alltoall, got 'ring'");
  CHECK_THAT(error_of([] { load_plan_string("cp_degree: 0\n", "cp.yaml"); }), Contains("cp.yaml:1: cp_degree"));
  CHECK_THAT(error_of([] { load_plan_string("cp_load_balance: maybe\n", "cp.yaml"); }),
             Contains("cp.yaml:1: cp_load_balance"));
}

TEST_CASE("context parallel: dp_shard is what tp x cp x dp_replicate leave of the world", "[cp][plan]") {
  Config cfg = load_config_string(
      "model: {preset: llama3-8b}\ntraining: {seq_len: 8192}\ncluster: {gpu: h100-sxm, nodes: 2, gpus_per_node: 8}\n",
      "c.yaml");
  Plan p = test::make_plan("sequence_parallel", {.tp_degree = 2, .dp_shard = 0, .cp_degree = 4});
  resolve_dp_shard(cfg, p, "--tp");
  CHECK(p.dp_shard == 2);  // 16 / (2 x 4)
  Plan bad = test::make_plan("sequence_parallel", {.tp_degree = 2, .dp_shard = 0, .cp_degree = 3});
  CHECK(error_of([&] { resolve_dp_shard(cfg, bad, "--tp"); }) ==
        "tp 2 x cp 3 x dp_replicate 1 = 6: does not divide the cluster's 16 GPUs (2 nodes x 8), so dp_shard = world / "
        "(tp x cp x dp_replicate) is not whole");
}

TEST_CASE("context parallel: cp 1 lowers to the Program without CP, whatever the rotate method", "[cp][lower]") {
  const Program plain = lower_tiny({.tp_degree = 2, .loss_parallel = true});
  const Program cp1 = lower_tiny({.tp_degree = 2,
                                  .loss_parallel = true,
                                  .cp_degree = 1,
                                  .cp_rotate = CpRotate::alltoall,
                                  .cp_load_balance = false});
  CHECK(cp1.cp == 1);
  CHECK(cp1.dp == plain.dp);
  // explain's JSON lists every collective with its bytes; the ops and tensors compare one by one.
  nlohmann::json a = explain_json(plain), b = explain_json(cp1);
  a.erase("plan");
  b.erase("plan");
  CHECK(a == b);
  REQUIRE(cp1.segments.size() == plain.segments.size());
  for (size_t s = 0; s < plain.segments.size(); ++s) {
    REQUIRE(cp1.segments[s].ops.size() == plain.segments[s].ops.size());
    for (size_t i = 0; i < plain.segments[s].ops.size(); ++i) {
      CHECK(cp1.segments[s].ops[i].name == plain.segments[s].ops[i].name);
      CHECK(cp1.segments[s].ops[i].kind.index() == plain.segments[s].ops[i].kind.index());
      CHECK(cp1.segments[s].ops[i].deps == plain.segments[s].ops[i].deps);
    }
  }
  REQUIRE(cp1.tensors.size() == plain.tensors.size());
  for (size_t t = 0; t < plain.tensors.size(); ++t) CHECK(cp1.tensors[t].local_shape == plain.tensors[t].local_shape);
}

TEST_CASE("context parallel: each rank holds seq / cp tokens", "[cp][lower]") {
  const Program p = lower_tiny({.tp_degree = 2, .loss_parallel = true, .cp_degree = 4});
  CHECK(p.cp == 4);
  CHECK(p.local_seq_len() == 8);
  CHECK(p.tokens_per_rank() == 8);
  CHECK(p.tensor(p.tokens).local_shape == Shape{1, 8});
  // The residual stream under sequence parallelism: (b, s / cp / tp, dim) = (1, 8 / 2, 64).
  CHECK(p.tensor(p.chains[0].in).local_shape == Shape{1, 4, 64});
  // Attention's output on this rank: (b, s / cp, local heads x head_dim) = (1, 8, 4 x 8).
  for (const Op& op : block_fwd(p).ops)
    if (op.name == "attention.core.fwd") CHECK(p.tensor(op.outputs[0]).local_shape == Shape{1, 8, 32});
}

TEST_CASE("context parallel: attention FLOPs per rank are the causal total / cp with load balancing",
          "[cp][lower][flops]") {
  // tp 1, seq 32, b 1, 8 heads of 8. The whole causal attention forward: 2 b h s^2 d = 2 x 8 x 32^2 x 8 = 131072.
  const int64_t total = 131072;
  CHECK(attention_flops(block_fwd(lower_tiny({})), false) == total);
  // cp 2: s_l = 16. Diagonal block 2 x 8 x 16^2 x 8 = 32768; step 1, half a block not causal, 4 x 8 x 16 x 8 x 8 =
  // 32768: 65536 = total / 2.
  CHECK(attention_flops(block_fwd(lower_tiny({.cp_degree = 2})), false) == total / 2);
  // cp 4: s_l = 8. Diagonal 2 x 8 x 8^2 x 8 = 8192; three half blocks 4 x 8 x 8 x 4 x 8 = 8192 each: 32768 = total / 4.
  CHECK(attention_flops(block_fwd(lower_tiny({.cp_degree = 4})), false) == total / 4);
  // Backward: 2.5 x forward, block by block.
  CHECK(attention_flops(block_bwd(lower_tiny({.cp_degree = 4})), true) == total / 4 * 5 / 2);
  // Without balancing rank cp-1 computes the diagonal and cp-1 whole blocks: 8192 + 3 x (4 x 8 x 8 x 8 x 8 = 16384)
  // = 57344, more than the balanced 32768.
  CHECK(attention_flops(block_fwd(lower_tiny({.cp_degree = 4, .cp_load_balance = false})), false) == 57344);
  // Both rotate methods compute the same blocks.
  CHECK(attention_flops(block_fwd(lower_tiny({.cp_degree = 4, .cp_rotate = CpRotate::alltoall})), false) == total / 4);
}

TEST_CASE("context parallel: the ring's transfers, forward and backward, for both rotate methods", "[cp][lower]") {
  // tp 1, cp 4, seq 32: s_l = 8; a K/V buffer is cat(K, V) = 2 x b x s_l x kv heads 4 x head_dim 8 = 512 elements,
  // 1024 B in bf16; the dK/dV accumulator the same elements in fp32, 2048 B.
  const Program ag = lower_tiny({.cp_degree = 4});
  // allgather: one all-gather of the 4 ranks' buffers (4 x 1024 = 4096 B, nccl-tests size) before the blocks, again
  // in backward; backward's dK/dV always travel a ring: cp = 4 p2p of 2048 B.
  const Tally ag_f = cp_collectives(block_fwd(ag), CollectiveKind::all_gather, DType::bf16);
  CHECK(ag_f.count == 1);
  CHECK(ag_f.bytes == 4096);
  CHECK(cp_collectives(block_fwd(ag), CollectiveKind::p2p, DType::bf16).count == 0);
  const Tally ag_b = cp_collectives(block_bwd(ag), CollectiveKind::all_gather, DType::bf16);
  CHECK(ag_b.count == 1);
  CHECK(ag_b.bytes == 4096);
  const Tally ag_dkv = cp_collectives(block_bwd(ag), CollectiveKind::p2p, DType::fp32);
  CHECK(ag_dkv.count == 4);
  CHECK(ag_dkv.bytes == 4 * 2048);
  // alltoall: cp-1 = 3 p2p of 1024 B forward, 3 again in backward (K/V are not kept), and the 4 dK/dV transfers.
  const Program a2a = lower_tiny({.cp_degree = 4, .cp_rotate = CpRotate::alltoall});
  const Tally a_f = cp_collectives(block_fwd(a2a), CollectiveKind::p2p, DType::bf16);
  CHECK(a_f.count == 3);
  CHECK(a_f.bytes == 3 * 1024);
  CHECK(cp_collectives(block_fwd(a2a), CollectiveKind::all_gather, DType::bf16).count == 0);
  CHECK(cp_collectives(block_bwd(a2a), CollectiveKind::p2p, DType::bf16).count == 3);
  CHECK(cp_collectives(block_bwd(a2a), CollectiveKind::p2p, DType::fp32).count == 4);
  // The p2p of step i+1 is listed before the block of step i, which does not wait for it (it overlaps that block).
  const Segment& f = block_fwd(a2a);
  int p2p1 = -1, block0 = -1, block1 = -1;
  for (const Op& op : f.ops) {
    if (op.name == "attention.ring.fwd.p2p.1") p2p1 = op.id;
    if (op.name == "attention.core.fwd") block0 = op.id;
    if (op.name == "attention.core.fwd.1") block1 = op.id;
  }
  REQUIRE(p2p1 >= 0);
  REQUIRE(block0 >= 0);
  REQUIRE(block1 >= 0);
  CHECK(p2p1 < block0);
  const auto& d0 = f.ops[static_cast<size_t>(block0)].deps;
  const auto& d1 = f.ops[static_cast<size_t>(block1)].deps;
  CHECK(std::find(d0.begin(), d0.end(), p2p1) == d0.end());
  CHECK(std::find(d1.begin(), d1.end(), p2p1) != d1.end());
}

TEST_CASE("context parallel: FSDP shards over dp_shard x cp", "[cp][lower][fsdp]") {
  const Program p = lower_tiny({.tp_degree = 1, .dp_shard = 2, .cp_degree = 4});
  CHECK(p.dp == 8);
  // explain states the plan's dp_shard and the cp degree; FSDP's collectives run on the dp group of 8.
  const nlohmann::json j = explain_json(p);
  CHECK(j["dp_shard"] == 2);
  CHECK(j["cp_degree"] == 4);
  CHECK(j["cp_rotate_method"] == "allgather");
  CHECK(j["per_step"]["cp"]["count"].get<int64_t>() > 0);
  // dp_shard 1 x cp 2 is still FSDP (torchtitan: fully_shard when dp_shard x cp > 1).
  const Program q = lower_tiny({.tp_degree = 1, .dp_shard = 1, .cp_degree = 2});
  CHECK(q.dp == 2);
  bool reduce_scatter = false;
  for (const Op& op : block_bwd(q).ops)
    if (const auto* c = std::get_if<CollectiveOp>(&op.kind); c && c->group == Group::dp)
      reduce_scatter |= c->kind == CollectiveKind::reduce_scatter;
  CHECK(reduce_scatter);
}

TEST_CASE("context parallel: the sequence must split into 2 x cp chunks (cp without balancing)", "[cp][errors]") {
  Plan p = test::make_plan("sequence_parallel", {.cp_degree = 4});
  p.provenance["cp_degree"] = "plan cp.yaml:3";
  CHECK(error_of([&] { lower(test::tiny_llama_model(), Training{.seq_len = 36}, p); }) ==
        "plan cp.yaml:3: cp_degree 4: seq_len 36 is not divisible by 2 x cp_degree = 8: the head-tail load balancer "
        "cuts the sequence into 2 x cp chunks");
  p.cp_load_balance = false;
  CHECK_NOTHROW(lower(test::tiny_llama_model(), Training{.seq_len = 36}, p));
  CHECK(error_of([&] { lower(test::tiny_llama_model(), Training{.seq_len = 34}, p); }) ==
        "plan cp.yaml:3: cp_degree 4: seq_len 34 is not divisible by cp_degree 4: each cp rank holds seq_len / cp "
        "tokens");
}

TEST_CASE("context parallel: with sequence parallelism tp x 2 x cp must divide the sequence", "[cp][errors]") {
  // torchtitan's trainer: seq_len % (tp x 2 cp) under sequence parallelism. 36 splits into 2 x 2 chunks of 9, but
  // tp 2 x 4 = 8 does not divide it; without sequence parallelism (the vanilla plan) it lowers.
  Plan sp = test::make_plan("sequence_parallel", {.tp_degree = 2, .loss_parallel = true, .cp_degree = 2});
  sp.provenance["cp_degree"] = "option --cp";
  CHECK(error_of([&] { lower(test::tiny_llama_model(), Training{.seq_len = 36}, sp); }) ==
        "option --cp: cp_degree 2: seq_len 36 is not divisible by tp 2 x 2 x cp_degree = 8: sequence parallelism "
        "splits each cp chunk over tp (torchtitan's trainer refuses it)");
  CHECK_NOTHROW(lower(test::tiny_llama_model(), Training{.seq_len = 36},
                      test::make_plan("vanilla", {.tp_degree = 2, .cp_degree = 2})));
  CHECK_NOTHROW(lower(test::tiny_llama_model(), Training{.seq_len = 40}, sp));
}
