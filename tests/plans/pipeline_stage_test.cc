// A pipeline stage's Program (plans/lower/rewrite/pipeline_stage.h): the microbatch Program's ops split among the
// stages, each op in exactly one, with the transfers torch's PipelineStage runs between them.
#include "plans/lower/rewrite/pipeline_stage.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "plans/util/error.h"
#include "sim/report/explain.h"
#include "tests/fixtures.h"
#include "tests/plans/staged_pipeline.h"

using namespace tptune;

namespace {

// examples/tiny-llama.yaml's dims with 4 blocks: dim 64, 8 heads of 8 (4 kv heads), ffn 128, vocab 256.
Model four_blocks() {
  Model m = test::tiny_llama_model();
  m.n_layers = 4;
  return m;
}

using test::Staged;

// The sequence-parallel plan at tp 2 on pp 2 with `kind`, one sequence of 32 tokens per microbatch, and `t` on top.
Staged staged(PipelineScheduleKind kind, PlanToggles t = {}) {
  t.tp_degree = 2;
  t.pp_degree = 2;
  t.pp_schedule = kind;
  t.local_batch_size = 4;
  return test::lower_staged(four_blocks(), Training{.seq_len = 32}, test::make_plan("sequence_parallel", t));
}

// The full names of a Program's flat ops, the stage's transfers and gradient norm left out (their own tests below).
std::multiset<std::string> op_names(const Program& p) {
  std::multiset<std::string> names;
  const FlatProgram flat = expand(p);
  for (const FlatOp& f : flat.ops) {
    if (f.name.rfind("pp.", 0) == 0 || f.name.rfind("grad_norm", 0) == 0) continue;
    names.insert(f.name);
  }
  return names;
}

std::set<std::string> parameter_names(const Program& p) {
  std::set<std::string> names;
  const FlatProgram flat = expand(p);
  for (const FlatTensor& t : flat.tensors)
    if (p.tensor(t.template_id).role == TensorRole::parameter) names.insert(t.fqn);
  return names;
}

std::vector<SegmentKind> kinds(const Program& p) {
  std::vector<SegmentKind> k;
  for (const Segment& s : p.segments) k.push_back(s.kind);
  return k;
}

const CollectiveOp& transfer(const Program& p, SegmentKind kind) {
  const Segment* s = p.segment(kind);
  REQUIRE(s);
  REQUIRE(s->ops.size() == 1);
  return std::get<CollectiveOp>(s->ops[0].kind);
}

}  // namespace

TEST_CASE("pipeline stage: every op of the microbatch Program runs on exactly one stage", "[pipeline_stage]") {
  // ac_layers 1 splits the block backward in two segments (layers 3..1 without recompute, 0 with it): each is cut to
  // the stages' blocks.
  for (PipelineScheduleKind kind : all_pipeline_schedule_kinds()) {
    INFO(to_string(kind));
    const Staged s = staged(kind, {.activation_checkpointing = ActivationCheckpointing::selective, .ac_layers = 1});
    std::multiset<std::string> all;
    std::set<std::string> params;
    size_t param_count = 0;
    for (const Program& st : s.stages) {
      const auto names = op_names(st);
      all.insert(names.begin(), names.end());
      const auto p = parameter_names(st);
      params.insert(p.begin(), p.end());
      param_count += p.size();
    }
    // What one side has beyond the other, so that a failure names the ops.
    const std::multiset<std::string> whole = op_names(s.microbatch);
    std::vector<std::string> extra, missing;
    std::set_difference(all.begin(), all.end(), whole.begin(), whole.end(), std::back_inserter(extra));
    std::set_difference(whole.begin(), whole.end(), all.begin(), all.end(), std::back_inserter(missing));
    CHECK(extra == std::vector<std::string>{});
    CHECK(missing == std::vector<std::string>{});
    CHECK(params == parameter_names(s.microbatch));
    CHECK(param_count == params.size());  // no parameter on two stages
  }
}

TEST_CASE("pipeline stage: under FSDP a stage gathers its parameters in its forward only", "[pipeline_stage]") {
  // torchtitan: reshard_after_forward False under PP. The microbatch Program (dp_shard 2) re-gathers every block and
  // the embedding before their backward; the stages keep the forward gathers and every gradient reduction.
  const Staged s = staged(PipelineScheduleKind::one_f_one_b, {.dp_shard = 2});
  auto count = [](const Program& p, CollectiveKind kind, bool backward) {
    int n = 0;
    for (const FlatOp& f : expand(p).ops)
      if (const auto* c = std::get_if<CollectiveOp>(&f.op->kind);
          c && c->group == Group::dp && c->kind == kind && (f.op->phase != Phase::forward) == backward)
        ++n;
    return n;
  };
  // 4 blocks, the embedding and the head: a forward gather each, a backward re-gather each but the head's (its
  // forward and backward are one segment, one gather), a reduce-scatter each.
  CHECK(count(s.microbatch, CollectiveKind::all_gather, false) == 6);
  CHECK(count(s.microbatch, CollectiveKind::all_gather, true) == 5);
  int fwd = 0, bwd = 0, reduce = 0;
  for (const Program& st : s.stages) {
    fwd += count(st, CollectiveKind::all_gather, false);
    bwd += count(st, CollectiveKind::all_gather, true);
    reduce += count(st, CollectiveKind::reduce_scatter, true);
  }
  CHECK(fwd == 6);
  CHECK(bwd == 0);
  CHECK(reduce == count(s.microbatch, CollectiveKind::reduce_scatter, true));
  CHECK(reduce == 6);
}

TEST_CASE("pipeline stage: 1F1B on pp 2, the stages' segments and transfers", "[pipeline_stage]") {
  const Staged s = staged(PipelineScheduleKind::one_f_one_b);
  // torchtitan's default split of 4 blocks into 2 stages, the embedding and the head counting as one layer each:
  // (4 + 1 + 1) / 2 = 3 per stage, so blocks 0-1 and 2-3.
  REQUIRE(s.stages.size() == 2);
  using K = SegmentKind;
  CHECK(kinds(s.stages[0]) == std::vector<K>{K::embed_fwd, K::block_fwd, K::pp_send_fwd, K::pp_recv_bwd, K::block_bwd,
                                             K::embed_bwd, K::block_optimizer, K::optimizer});
  CHECK(kinds(s.stages[1]) == std::vector<K>{K::pp_recv_fwd, K::block_fwd, K::head, K::block_bwd, K::pp_send_bwd,
                                             K::block_optimizer, K::optimizer});
  CHECK(s.stages[0].first_layer() == 0);
  CHECK(s.stages[0].layer_count() == 2);
  CHECK(s.stages[1].first_layer() == 2);
  CHECK(s.stages[1].stage.count == 2);
  // The activation a block passes on under sequence parallelism: 1 sequence x 32/2 tokens x dim 64 in bf16,
  // 1 x 16 x 64 x 2 = 2048 bytes, this tp rank's shard.
  for (auto [stage, kind, peer] : {std::tuple{0, K::pp_send_fwd, 1}, std::tuple{0, K::pp_recv_bwd, 1},
                                   std::tuple{1, K::pp_recv_fwd, 0}, std::tuple{1, K::pp_send_bwd, 0}}) {
    const CollectiveOp& c = transfer(s.stages[size_t(stage)], kind);
    CHECK(c.kind == CollectiveKind::p2p);
    CHECK(c.group == Group::pp);
    CHECK(c.bytes == 2048);
    CHECK(c.peer == peer);
    CHECK(c.peer_stage == peer);
  }
  CHECK(pipeline_transfer_bytes(s.microbatch) == 2048);
  // Sends read, receives write: the first stage's forward chain ends in the tensor it sends.
  const Op& send = s.stages[0].segment(K::pp_send_fwd)->ops[0];
  CHECK(send.outputs.empty());
  CHECK(send.inputs == std::vector<TensorId>{s.stages[0].chains[0].sink});
  CHECK(s.stages[0].tensor(send.inputs[0]).name == "pp.send_fwd.activation");
  const Op& recv = s.stages[1].segment(K::pp_recv_fwd)->ops[0];
  CHECK(recv.inputs.empty());
  CHECK(recv.outputs == std::vector<TensorId>{s.stages[1].chains[0].source});
  // The inputs where they are used: tokens on the first stage, targets and the loss on the last.
  CHECK(s.stages[0].tokens >= 0);
  CHECK(s.stages[0].targets == -1);
  CHECK(s.stages[0].loss == -1);
  CHECK(s.stages[1].tokens == -1);
  CHECK(s.stages[1].targets >= 0);
  CHECK(s.stages[1].loss >= 0);
  const auto first = parameter_names(s.stages[0]), last = parameter_names(s.stages[1]);
  CHECK(first.count("tok_embeddings.weight") == 1);
  CHECK(first.count("layers.1.attention.wq.weight") == 1);
  CHECK(first.count("layers.2.attention.wq.weight") == 0);
  CHECK(last.count("layers.2.attention.wq.weight") == 1);
  CHECK(last.count("output.weight") == 1);
  CHECK(last.count("norm.weight") == 1);
}

TEST_CASE("pipeline stage: interleaved 1F1B places stages round the ranks, one of them without a block",
          "[pipeline_stage]") {
  const Staged s = staged(PipelineScheduleKind::interleaved_1f1b);
  // 4 stages of (4 + 1 + 1) / 4 = 1 effective layer, the first 6 % 4 = 2 one more: 2, 2, 1, 1; less the embedding on
  // stage 0 and the head on stage 3: blocks 1, 2, 1, 0. Looped placement: stage s on rank s % 2.
  REQUIRE(s.stages.size() == 4);
  const std::vector<int> layers{1, 2, 1, 0}, ranks{0, 1, 0, 1};
  for (size_t i = 0; i < 4; ++i) {
    CHECK(s.spans[i].layers == layers[i]);
    CHECK(s.spans[i].rank == ranks[i]);
    CHECK(s.stages[i].layer_count() == layers[i]);
  }
  // Stage 3 holds the head only: what it receives goes straight to the final norm (the chain of no block).
  using K = SegmentKind;
  CHECK(kinds(s.stages[3]) == std::vector<K>{K::pp_recv_fwd, K::head, K::pp_send_bwd, K::optimizer});
  const FlatProgram flat = expand(s.stages[3]);
  int recv_out = -1, norm_in = -2;
  for (const FlatOp& f : flat.ops) {
    if (f.name == "pp.recv_fwd") recv_out = f.outputs.at(0);
    if (f.name == "norm.fwd") norm_in = f.inputs.at(0);
  }
  CHECK(recv_out >= 0);
  CHECK(recv_out == norm_in);
  // Stage 2 (rank 0) receives from stage 1 on rank 1 and sends to stage 3 on rank 1.
  CHECK(transfer(s.stages[2], K::pp_recv_fwd).peer == 1);
  CHECK(transfer(s.stages[2], K::pp_recv_fwd).peer_stage == 1);
  CHECK(transfer(s.stages[2], K::pp_send_fwd).peer_stage == 3);
}

TEST_CASE("pipeline stage: a V schedule's middle stages on one rank still transfer, to that rank", "[pipeline_stage]") {
  const Staged s = staged(PipelineScheduleKind::zbv_zero_bubble);
  // V placement on pp 2: rank 0 holds stages 0 and 3, rank 1 stages 1 and 2.
  REQUIRE(s.stages.size() == 4);
  CHECK(s.spans[1].rank == 1);
  CHECK(s.spans[2].rank == 1);
  CHECK(transfer(s.stages[1], SegmentKind::pp_send_fwd).peer == 1);
  CHECK(transfer(s.stages[2], SegmentKind::pp_recv_fwd).peer == 1);
  CHECK(transfer(s.stages[2], SegmentKind::pp_send_fwd).peer == 0);
}

TEST_CASE("pipeline stage: the gradient norm of the stage's gradients, all-reduced over the pp group",
          "[pipeline_stage]") {
  const Staged s = staged(PipelineScheduleKind::one_f_one_b);
  Plan clip = s.microbatch.plan;
  clip.clip_grad_norm = true;
  const Program mb = lower(four_blocks(), Training{.seq_len = 32}, clip);
  // Local elements of one block at tp 2: the norms 64 + 64 (replicated under sequence parallelism), wq 64 x 64 / 2 =
  // 2048, wk and wv 32 x 64 / 2 = 1024 each, wo 2048, w1, w2, w3 128 x 64 / 2 = 4096 each: 18560. Stage 0: 2 blocks
  // and the embedding (256 x 64 / 2 = 8192 rows of the vocab) = 45312 elements, 19 gradients; stage 1: 2 blocks, the
  // norm (64) and the output (8192) = 45376 elements, 20 gradients. grad_norm.local reads 4 bytes per element.
  const std::vector<int64_t> elems{45312, 45376}, grads{19, 20};
  int64_t total_bytes = 0;
  for (int i = 0; i < 2; ++i) {
    const Program st = lower_pipeline_stage(mb, s.spans, i);
    const Segment* g = st.segment(SegmentKind::grad_norm);
    REQUIRE(g);
    bool local = false, pp = false;
    for (const Op& op : g->ops) {
      if (const auto* e = std::get_if<ElementwiseOp>(&op.kind); e && e->fn == ElementwiseOp::Fn::grad_norm) {
        CHECK(e->bytes == 4 * elems[size_t(i)]);
        CHECK(st.tensor(op.outputs[0]).local_shape == Shape{grads[size_t(i)]});
        total_bytes += e->bytes;
        local = true;
      }
      if (const auto* c = std::get_if<CollectiveOp>(&op.kind); c && c->group == Group::pp) {
        CHECK(c->kind == CollectiveKind::all_reduce);
        CHECK(c->bytes == 4);  // the squared total norm, one fp32
        pp = true;
      }
    }
    CHECK(local);
    CHECK(pp);
  }
  // Together the stages read what the whole model's gradient norm reads.
  for (const Op& op : mb.segment(SegmentKind::grad_norm)->ops)
    if (const auto* e = std::get_if<ElementwiseOp>(&op.kind); e && e->fn == ElementwiseOp::Fn::grad_norm)
      CHECK(e->bytes == total_bytes);
}

TEST_CASE("pipeline stage: layouts that do not fit the model are refused", "[pipeline_stage][bad-input]") {
  const Staged s = staged(PipelineScheduleKind::one_f_one_b);
  std::vector<PipelineStageSpan> gap = s.spans;
  gap[1].first_layer = 3, gap[1].layers = 1;
  CHECK_THROWS_WITH(lower_pipeline_stage(s.microbatch, gap, 1),
                    "pipeline stage 1: starts at block 3, expected 2 (stages hold consecutive blocks)");
  std::vector<PipelineStageSpan> short_of = s.spans;
  short_of[1].layers = 1;
  CHECK_THROWS_WITH(lower_pipeline_stage(s.microbatch, short_of, 0),
                    "pipeline stage 1: the stages hold blocks 0..2, the model has 4");
  std::vector<PipelineStageSpan> past = s.spans;
  past[1].layers = 3;
  CHECK_THROWS_WITH(lower_pipeline_stage(s.microbatch, past, 1, false),
                    "pipeline stage 1: blocks 2..4 outside the model's 4 blocks");
  CHECK_THROWS_WITH(lower_pipeline_stage(s.microbatch, s.spans, 2),
                    "pipeline stage: stage 2 of a pipeline of 2 stages");
  CHECK_THROWS_WITH(lower_pipeline_stage(s.stages[0], s.spans, 0),
                    "pipeline stage: expected the Program of the whole model, got stage 0's");
}

TEST_CASE("pipeline stage: explain's transfers, one per pp op of each stage", "[pipeline_stage][explain]") {
  const Staged s = staged(PipelineScheduleKind::zbv_zero_bubble);
  const std::vector<TransferRecord> t = pipeline_transfers(s.stages, s.spans);
  // 4 stages: 3 boundaries, each an activation forward and a gradient back, sent by one stage and received by the
  // other: 12 records.
  REQUIRE(t.size() == 12);
  CHECK(t[0].stage == 0);
  CHECK(t[0].op == "pp.send_fwd");
  CHECK(t[0].send);
  CHECK(t[0].tensor == "pp.send_fwd.activation");
  CHECK(t[0].local_shape == Shape{1, 16, 64});
  CHECK(t[0].bytes == 2048);
  CHECK(t[0].peer_stage == 1);
  const nlohmann::json j = pipeline_transfers_json(t);
  CHECK(j[0].at("to").at("stage") == 1);
  CHECK(j[0].at("to").at("pp_rank") == 1);
  CHECK(j[0].at("phase") == "forward");
  CHECK(j[1].at("from").at("stage") == 1);  // stage 0's pp.recv_bwd
  CHECK(j[1].at("phase") == "backward");
  // Stage 1 sends to stage 2 on its own rank (the V's middle).
  const std::string text = pipeline_transfers_text(t);
  CHECK_THAT(text, Catch::Contains("to stage 2 (pp rank 1, this rank: a local hand-over)"));
}
