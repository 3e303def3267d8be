// A pipeline stage of a mixture of experts (plans/lower/rewrite/pipeline_stage.h), dense first blocks included: which
// block segments and layer ranges each stage holds under torchtitan's split, that the MoE ops (the ep all-to-alls, the
// experts' efsdp gathers, the tokens_per_expert all-reduces of the optimizer pre-hook) go with their blocks, and that
// the stages' parameters and gradient norms add up to the whole model's.
#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "plans/lower/parameter_count.h"
#include "plans/lower/rewrite/pipeline_stage.h"
#include "tests/fixtures.h"
#include "tests/plans/staged_pipeline.h"

using namespace tptune;

namespace {

// tiny_moe_model() (dim 64, 8 experts of 32, top 2, a shared expert of 64) with `layers` blocks, the first `dense` of
// them with the dense MLP of ffn 128 (model.moe.dense_layers).
Model dense_first(int64_t layers, int64_t dense) {
  Model m = test::tiny_moe_model();
  m.name = "tiny-dense-first-moe";
  m.n_layers = layers;
  m.moe.dense_layers = dense;
  return m;
}

using test::Staged;

// The sequence-parallel plan at tp 2, dp_shard 2, ep 2 (efsdp = 2 x 2 / 2 = 2) on pp `pp` with `kind`, a microbatch of
// one sequence of 32 tokens; `t` on top, with gradient clipping when `clip`.
Staged staged(const Model& m, int pp, PipelineScheduleKind kind, PlanToggles t = {}, bool clip = false) {
  t.tp_degree = 2;
  t.dp_shard = 2;
  t.ep_degree = 2;
  t.pp_degree = pp;
  t.pp_schedule = kind;
  t.local_batch_size = 8;
  Plan plan = test::make_plan("sequence_parallel", t);
  plan.clip_grad_norm = clip;
  return test::lower_staged(m, Training{.seq_len = 32}, plan);
}

// (kind, first_layer, layer_count) of each block segment, in Program order.
using Blocks = std::vector<std::tuple<SegmentKind, int, int>>;
Blocks blocks(const Program& p) {
  Blocks b;
  for (const Segment& s : p.segments)
    if (s.kind == SegmentKind::block_fwd || s.kind == SegmentKind::block_bwd || s.kind == SegmentKind::block_optimizer)
      b.emplace_back(s.kind, s.first_layer, segment_instances(p, s));
  return b;
}

// Flat ops of `p` (every instance) that `pick` selects.
template <class Pick>
int count_ops(const Program& p, Pick pick) {
  int n = 0;
  for (const FlatOp& f : expand(p).ops) n += pick(*f.op) ? 1 : 0;
  return n;
}
bool on(const Op& op, Group g, CollectiveKind k) {
  const auto* c = std::get_if<CollectiveOp>(&op.kind);
  return c && c->group == g && c->kind == k;
}
bool tokens_per_expert(const Op& op) {
  return op.is_collective() && op.name.find("tokens_per_expert") != std::string::npos;
}

const TensorDesc* tensor_named(const Program& p, const std::string& name) {
  for (const TensorDesc& t : p.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

constexpr auto F = SegmentKind::block_fwd, B = SegmentKind::block_bwd, O = SegmentKind::block_optimizer;

}  // namespace

TEST_CASE("pipeline stage of a MoE: DeepSeek-V3 16B's 27 blocks (1 dense) on pp 2 and 4, torchtitan's split",
          "[pipeline_stage][moe][dense_first]") {
  const Model m = dense_first(27, 1);
  // torchtitan's _generate_llm_fqn_per_model_part (distributed/pipeline_parallel.py:366-476 in 0.3.0), input and
  // output weight 1: 27 + 1 + 1 = 29 effective layers. pp 2: 29 // 2 = 14 each, 29 % 2 = 1 extra to stage 0: stage 0
  // 15 - 1 (the embedding) = 14 blocks 0..13, stage 1 14 - 1 (the head) = 13 blocks 14..26.
  const Staged two = staged(m, 2, PipelineScheduleKind::one_f_one_b);
  REQUIRE(two.spans.size() == 2);
  CHECK(std::pair{two.spans[0].first_layer, two.spans[0].layers} == std::pair{0, 14});
  CHECK(std::pair{two.spans[1].first_layer, two.spans[1].layers} == std::pair{14, 13});
  // Stage 0 holds both variants: the dense block 0 and MoE blocks 1..13, in the microbatch Program's order (forward
  // dense then MoE, backward MoE then dense, optimizer dense then MoE); stage 1 the MoE blocks 14..26 only.
  CHECK(blocks(two.stages[0]) == Blocks{{F, 0, 1}, {F, 1, 13}, {B, 1, 13}, {B, 0, 1}, {O, 0, 1}, {O, 1, 13}});
  CHECK(blocks(two.stages[1]) == Blocks{{F, 14, 13}, {B, 14, 13}, {O, 14, 13}});
  // A variant's per-layer tensors keep the stage's blocks of it: the router's weight (MoE) and the dense MLP's w1.
  const TensorDesc* gate0 = tensor_named(two.stages[0], "moe.router.gate.weight");
  const TensorDesc* gate1 = tensor_named(two.stages[1], "moe.router.gate.weight");
  const TensorDesc* w1 = tensor_named(two.stages[0], "feed_forward.w1.weight");
  REQUIRE(gate0);
  REQUIRE(gate1);
  REQUIRE(w1);
  CHECK(std::pair{gate0->first_layer, gate0->layer_count} == std::pair{1, 13});
  CHECK(std::pair{gate1->first_layer, gate1->layer_count} == std::pair{14, 13});
  CHECK(std::pair{w1->first_layer, w1->layer_count} == std::pair{0, 1});
  CHECK(tensor_named(two.stages[1], "feed_forward.w1.weight") == nullptr);
  CHECK(two.stages[0].copies(*gate0) == 13);

  // pp 4: 29 // 4 = 7, 1 extra to stage 0: 8 - 1 = 7 blocks 0..6, 7 (7..13), 7 (14..20), 7 - 1 = 6 (21..26).
  const Staged four = staged(m, 4, PipelineScheduleKind::one_f_one_b);
  const std::vector<std::pair<int, int>> want{{0, 7}, {7, 7}, {14, 7}, {21, 6}};
  REQUIRE(four.spans.size() == 4);
  for (size_t s = 0; s < 4; ++s) CHECK(std::pair{four.spans[s].first_layer, four.spans[s].layers} == want[s]);
  CHECK(blocks(four.stages[0]) == Blocks{{F, 0, 1}, {F, 1, 6}, {B, 1, 6}, {B, 0, 1}, {O, 0, 1}, {O, 1, 6}});
  CHECK(blocks(four.stages[3]) == Blocks{{F, 21, 6}, {B, 21, 6}, {O, 21, 6}});
}

TEST_CASE("pipeline stage of a MoE: DeepSeek-V3 671B's split puts the 3 dense blocks alone on stage 0",
          "[pipeline_stage][moe][dense_first]") {
  // 61 blocks, 3 dense, pp 8 Interleaved1F1B with 2 stages per rank (#2107's layout): 16 stages of 63 effective
  // layers, 63 // 16 = 3, 63 % 16 = 15 extra: stages 0..14 get 4, stage 15 gets 3. Stage 0: 4 - 1 = 3 blocks 0..2,
  // all dense; stage 1: blocks 3..6, all MoE; ...; stage 15: 3 - 1 = 2 blocks 59..60. 3 + 14 x 4 + 2 = 61.
  const Model m = dense_first(61, 3);
  const Staged s = staged(m, 8, PipelineScheduleKind::interleaved_1f1b, {.pp_stages_per_rank = 2});
  REQUIRE(s.spans.size() == 16);
  CHECK(std::pair{s.spans[0].first_layer, s.spans[0].layers} == std::pair{0, 3});
  CHECK(std::pair{s.spans[1].first_layer, s.spans[1].layers} == std::pair{3, 4});
  CHECK(std::pair{s.spans[15].first_layer, s.spans[15].layers} == std::pair{59, 2});
  CHECK(blocks(s.stages[0]) == Blocks{{F, 0, 3}, {B, 0, 3}, {O, 0, 3}});
  CHECK(blocks(s.stages[1]) == Blocks{{F, 3, 4}, {B, 3, 4}, {O, 3, 4}});
  // The dense stage routes nothing: no all-to-all on ep, no experts' gather on efsdp, and no tokens_per_expert
  // all-reduce (torchtitan's load-balancing pre-hook returns before any collective on a rank part without MoE blocks,
  // components/optimizer/optimizer.py:448-470; here per stage, the hook's sums per MoE block).
  auto a2a = [](const Op& op) { return on(op, Group::ep, CollectiveKind::all_to_all); };
  auto efsdp_gather = [](const Op& op) { return on(op, Group::efsdp, CollectiveKind::all_gather); };
  CHECK(count_ops(s.stages[0], a2a) == 0);
  CHECK(count_ops(s.stages[0], efsdp_gather) == 0);
  CHECK(count_ops(s.stages[0], tokens_per_expert) == 0);
  // A MoE stage's are its 4 blocks' (per block as in the microbatch Program, 58 MoE blocks there), but the experts'
  // backward re-gather (the microbatch Program gathers them in the forward and the backward, a stage once).
  for (auto pick : {+a2a, +tokens_per_expert}) {
    const int whole = count_ops(s.microbatch, pick);
    REQUIRE(whole % 58 == 0);
    CHECK(whole > 0);
    CHECK(count_ops(s.stages[1], pick) == whole / 58 * 4);
  }
  CHECK(count_ops(s.microbatch, efsdp_gather) == 2 * 58);
  CHECK(count_ops(s.stages[1], efsdp_gather) == 4);
}

TEST_CASE("pipeline stage of a MoE: every op on one stage, experts gathered in the forward only",
          "[pipeline_stage][moe][dense_first]") {
  const Staged s = staged(dense_first(27, 1), 4, PipelineScheduleKind::interleaved_1f1b, {.pp_stages_per_rank = 2});
  // The microbatch Program (reshard_after_forward True without PP) gathers each MoE block's experts on efsdp in its
  // forward and again in its backward: 26 + 26; the stages (torchtitan's reshard_after_forward False under PP, for the
  // experts' unit as for the block's: distributed/fsdp.py:176-177, 237-300) only in the forward.
  auto gather = [](bool backward) {
    return [backward](const Op& op) {
      return on(op, Group::efsdp, CollectiveKind::all_gather) && (op.phase != Phase::forward) == backward;
    };
  };
  CHECK(count_ops(s.microbatch, gather(false)) == 26);
  CHECK(count_ops(s.microbatch, gather(true)) == 26);
  std::map<std::string, int> whole, stages;
  for (const FlatOp& f : expand(s.microbatch).ops) ++whole[f.name];
  int fwd = 0, bwd = 0;
  for (const Program& st : s.stages) {
    fwd += count_ops(st, gather(false));
    bwd += count_ops(st, gather(true));
    for (const FlatOp& f : expand(st).ops)
      if (f.name.rfind("pp.", 0) != 0 && f.name.rfind("grad_norm", 0) != 0) ++stages[f.name];
  }
  CHECK(fwd == 26);
  CHECK(bwd == 0);
  // Every other op of the microbatch Program runs on exactly one stage (the backward re-gathers on none).
  for (auto& [name, n] : whole) {
    if (name.find("all_gather") != std::string::npos || name.rfind("grad_norm", 0) == 0) continue;
    INFO(name);
    CHECK(stages[name] == n);
  }
}

TEST_CASE("pipeline stage of a MoE: the stages' parameters and gradient norms add up to the whole model's",
          "[pipeline_stage][moe][dense_first]") {
  const Staged s = staged(dense_first(27, 1), 4, PipelineScheduleKind::one_f_one_b, {}, true);
  // Parameters per pp rank (pipeline_parameter_count(): the routed experts over efsdp, each variant's tensors on the
  // stages holding its blocks) add up to the parameters of the Program without PP on this rank.
  Program no_pp = s.microbatch;
  no_pp.plan.pp_degree = 1;
  const ParameterCount whole = parameter_count(no_pp);
  const ParameterCount piped = pipeline_parameter_count(
      s.microbatch, resolve_pipeline(s.microbatch.model, s.microbatch.plan), s.microbatch.plan.pp_schedule);
  int64_t sum = 0;
  for (int64_t n : piped.per_pp_rank) sum += n;
  CHECK(sum == whole.per_rank);
  // The stages' gradient norms read, together, what the whole model's reads (each expert over efsdp, each variant's
  // gradients once per block of it).
  auto norm_bytes = [](const Program& p) {
    int64_t bytes = 0;
    for (const Op& op : p.segment(SegmentKind::grad_norm)->ops)
      if (const auto* e = std::get_if<ElementwiseOp>(&op.kind); e && e->fn == ElementwiseOp::Fn::grad_norm)
        bytes += e->bytes;
    return bytes;
  };
  int64_t stages = 0;
  for (const Program& st : s.stages) stages += norm_bytes(st);
  CHECK(stages == norm_bytes(s.microbatch));
}
