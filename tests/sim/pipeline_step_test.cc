// A step under pipeline parallelism (sim/pipeline/step.h) on a small 8-block model, tp 2 x pp 2 x dp_shard 2 on one
// node of 8 H100s: the stages partition the microbatch Program's work, 1F1B with a bottleneck last stage meets its
// closed form (derived below), the activations each rank holds follow the schedule (1F1B: pp - r microbatches,
// GPipe: all of them), the p2p hop is one activation over NVLink, and throughput divides by tp x pp.
#include <fmt/format.h>

#include <algorithm>
#include <catch2/catch.hpp>

#include "plans/lower/lower.h"
#include "plans/lower/parameter_count.h"
#include "plans/lower/rewrite/pipeline_stage.h"
#include "plans/util/error.h"
#include "sim/cost/comm_cost.h"
#include "sim/pipeline/step.h"
#include "sim/report/pipeline_text.h"
#include "sim/report/step_report.h"
#include "sim/simulate.h"
#include "sim/timeline/timeline.h"
#include "tests/fixtures.h"

using namespace tptune;
using Catch::Matchers::Contains;

namespace {

Model eight_blocks() { return test::small_model(8); }

Plan pp_plan(PipelineScheduleKind kind, std::vector<int> split, int64_t local_batch = 4) {
  PlanToggles t{.tp_degree = 2, .dp_shard = 2, .loss_parallel = true, .local_batch_size = local_batch};
  t.pp_degree = 2;
  t.pp_schedule = kind;
  t.pp_split = std::move(split);
  return test::make_plan("sequence_parallel", t);
}

const Training kTraining{.seq_len = 1024};

}  // namespace

TEST_CASE("pipeline step: the stages partition one microbatch's work", "[pp][sim]") {
  const ClusterSpec cluster = test::cluster_of("h100-sxm", 1);
  const CostParams& P = default_cost_params();
  const Plan plan = pp_plan(PipelineScheduleKind::one_f_one_b, {3, 5});
  const StepReport r = simulate_pipeline(eight_blocks(), kTraining, plan, cluster, P);
  REQUIRE(r.pipeline.stage_costs.size() == 2);
  // The Program of one microbatch (local batch = microbatch size 1) on one pp rank's 4 GPUs.
  Plan micro = plan;
  micro.local_batch_size = 1;
  const Program prog = lower(eight_blocks(), kTraining, micro);
  const ClusterSpec stage = pipeline_stage_cluster(plan, cluster);
  CHECK(stage.world_size() == 4);
  const OpCosts costs = cost_ops(prog, stage, P);
  const Timeline tl = schedule(prog, costs, P);
  double work = 0;
  for (size_t s = 0; s < prog.segments.size(); ++s) {
    const SegmentKind k = prog.segments[s].kind;
    if (k == SegmentKind::grad_norm || k == SegmentKind::block_optimizer || k == SegmentKind::optimizer) continue;
    for (int i = 0; i < tl.segments[s].instances; ++i)
      work += tl.segments[s].instance_stats(i).span_us - tl.segments[s].instance_stats(i).exposed_dp_us;
  }
  double staged = 0;
  for (const StageCost& c : r.pipeline.stage_costs) staged += c.fwd_us + c.bwd_us;
  CHECK(staged == Approx(work).epsilon(1e-9));
  // Stage 1 has more blocks and the head: it costs more than stage 0 (the embedding and 3 blocks).
  CHECK(r.pipeline.stage_costs[1].fwd_us > r.pipeline.stage_costs[0].fwd_us);
  for (const StageCost& c : r.pipeline.stage_costs) CHECK(c.bwd_weight_us > 0);
}

TEST_CASE("pipeline step: 1F1B with a bottleneck last stage meets its closed form", "[pp][sim][closed-form]") {
  // pp 2, 1F1B, m microbatches, stage costs (f0, b0), (f1, b1), hop h. Rank 1 (the last stage) runs F1 at f0 + h and,
  // when f1 + b1 >= f0 + b0 + 2h, back to back: rank 0's F_k (k >= 3) follows its B_{k-2}, which waits for rank 1's
  // B_{k-2} (ending at f0 + h + (k-2)(f1 + b1)) plus h; it then arrives at f0 + (k-2)(f1 + b1) + 3h + b0 + f0, no
  // later than rank 1 wants it, f0 + h + (k-1)(f1 + b1). So rank 1's B_m ends at f0 + h + m (f1 + b1), and rank 0's
  // B_m, its last action, ends h + b0 later: step = f0 + b0 + 2h + m (f1 + b1).
  const ClusterSpec cluster = test::cluster_of("h100-sxm", 1);
  const StepReport r = simulate_pipeline(eight_blocks(), kTraining, pp_plan(PipelineScheduleKind::one_f_one_b, {2, 6}),
                                         cluster, default_cost_params());
  const auto& c = r.pipeline.stage_costs;
  const double h = r.pipeline.p2p_us;
  const double m = 4;  // local batch 4 / microbatch 1
  REQUIRE(r.pipeline.microbatches == 4);
  REQUIRE(c[1].fwd_us + c[1].bwd_us >= c[0].fwd_us + c[0].bwd_us + 2 * h);
  CHECK(r.pipeline.schedule_ms * 1e3 ==
        Approx(c[0].fwd_us + c[0].bwd_us + 2 * h + m * (c[1].fwd_us + c[1].bwd_us)).epsilon(1e-9));
  // Rank 1 is busy m (f1 + b1) of the pass; rank 0 m (f0 + b0).
  CHECK(r.pipeline.ranks[1].busy_ms * 1e3 == Approx(m * (c[1].fwd_us + c[1].bwd_us)));
  CHECK(r.pipeline.ranks[0].busy_ms * 1e3 == Approx(m * (c[0].fwd_us + c[0].bwd_us)));
}

TEST_CASE("pipeline step: activations held as the schedule keeps microbatches in flight", "[pp][sim][memory]") {
  const ClusterSpec cluster = test::cluster_of("h100-sxm", 1);
  const CostParams& P = default_cost_params();
  const Model model = eight_blocks();
  // One block's saved activations and the logits at microbatch 1.
  Plan micro = pp_plan(PipelineScheduleKind::one_f_one_b, {2, 6});
  micro.local_batch_size = 1;
  const MemoryParts parts = memory_parts(lower(model, kTraining, micro), P);
  const double pb = parts.saved_per_block, L = parts.logits;
  REQUIRE(pb > 0);
  // logits: 1 x 1024 tokens x vocab 1024 / tp 2 (loss parallel) x 2 bytes = 1 MiB.
  REQUIRE(L == 1048576);
  // One stage input or output (the p2p tensor): 1 x 512 tokens (sequence parallel) x 512 x 2 bytes = 512 KiB.
  const double x = 524288;
  // m = 4 microbatches. What each rank holds (torch's PipelineStage): a receive buffer per microbatch for the
  // activation (stages > 0) and for the gradient (stages < last); per microbatch in flight its blocks' saved tensors
  // (the first block's input of stage 1 is its receive buffer, counted once) and the stage output (fwd_cache, stage
  // 0); kept to the step's end: the last stage's logits (output_chunks) and stage 1's input gradients (the receive
  // buffers' .grad).
  // 1F1B: rank 0 runs F0 F1 B0 F2 B1 F3 B2 B3, 2 in flight at B0: 4x + 2 (2 pb + x) = 4 pb + 6x.
  //       rank 1 runs F0 B0 F1 B1 ..., its peak at B3: 4x + (6 pb - x) + 4 L + 4x = 6 pb + 7x + 4 L.
  StepReport r = simulate_pipeline(model, kTraining, pp_plan(PipelineScheduleKind::one_f_one_b, {2, 6}), cluster, P);
  CHECK(r.pipeline.ranks[0].peak_activations == 2);
  CHECK(r.pipeline.ranks[1].peak_activations == 1);
  CHECK(r.pipeline.ranks[0].activations == Approx(4 * pb + 6 * x));
  CHECK(r.pipeline.ranks[1].activations == Approx(6 * pb + 7 * x + 4 * L));
  // GPipe: every rank holds all m = 4 forwards before its first backward.
  //       rank 0 at B0: 4x + 4 (2 pb + x) = 8 pb + 8x.
  //       rank 1 at B0: 4x + 4 (6 pb - x) + 4 L + x = 24 pb + x + 4 L (at B3 only 6 pb + 7x + 4 L).
  r = simulate_pipeline(model, kTraining, pp_plan(PipelineScheduleKind::gpipe, {2, 6}), cluster, P);
  CHECK(r.pipeline.ranks[0].peak_activations == 4);
  CHECK(r.pipeline.ranks[0].activations == Approx(8 * pb + 8 * x));
  CHECK(r.pipeline.ranks[1].activations == Approx(24 * pb + x + 4 * L));
  // The report's memory is the rank with the highest peak (rank 1: 24 blocks' worth and the head).
  CHECK(r.memory.peak == Approx(std::max(r.pipeline.ranks[0].peak_memory, r.pipeline.ranks[1].peak_memory)));
  CHECK(r.memory.activations == Approx(24 * pb + x + 4 * L));
}

TEST_CASE("pipeline step: a V schedule's adjacent stages on one rank have no receive buffers", "[pp][sim][memory]") {
  // ZBVZeroBubble, pp 2, 2 stages per rank of 2 blocks each, m = 2, full AC (a block saves only its input, the p2p
  // tensor x = 512 KiB). Rank 0 holds stages 0 and 3, rank 1 stages 1 and 2, which pass tensors directly
  // (set_local_fwd_input / set_local_bwd_input): receive buffers only from the other rank, m x = 2x each way.
  // Per microbatch in flight: stage 0 2x + x (output), stages 1 and 2 2x - x + x, stage 3 2x - x; stage 3's F keeps
  // its logits L, an I or B of stages > 0 keeps x (the input gradient). The walk's peak (held + fp32 gradients):
  //   rank 0: 0F0 0F1 3F0 3I0 3W0 3F1 3I1 3W1 0I0 ...: at 3I1, 3x + 3x + (x + L) + x - x + (x + L) + x = 9x + 2L with
  //           g3 (at 0I0: 8x + 2L with g0 < g3: the head's 262,656 elements against the embedding's 262,144);
  //           activations 2x + 2x + 9x + 2L = 13x + 2L.
  //   rank 1: 1F0 2F0 1F1 2F1 2I0 2W0 1I0 ...: at 1I0, 8x + x - 2x + x = 8x with g1 + g2 (at 2I0 9x with g2 only, and
  //           g1 = 2 blocks x 4 bytes x 1,180,672 = 9.4 MB > x); activations 2x + 2x + 8x = 12x (with buffers
  //           between its own stages it would be 16x).
  const ClusterSpec cluster = test::cluster_of("h100-sxm", 1);
  const CostParams& P = default_cost_params();
  PlanToggles t{.tp_degree = 2,
                .dp_shard = 2,
                .loss_parallel = true,
                .activation_checkpointing = ActivationCheckpointing::full,
                .local_batch_size = 2};
  t.pp_degree = 2;
  t.pp_schedule = PipelineScheduleKind::zbv_zero_bubble;
  t.pp_stages_per_rank = 2;
  t.pp_split = {2, 2, 2, 2};
  const Plan plan = test::make_plan("sequence_parallel", t);
  Plan micro = plan;
  micro.local_batch_size = 1;
  const MemoryParts parts = memory_parts(lower(eight_blocks(), kTraining, micro), P);
  const double x = 524288, L = parts.logits;
  REQUIRE(parts.saved_per_block == x);
  REQUIRE(L == 1048576);
  const StepReport r = simulate_pipeline(eight_blocks(), kTraining, plan, cluster, P);
  REQUIRE(r.pipeline.ranks[0].stages == std::vector<int>{0, 3});
  REQUIRE(r.pipeline.ranks[1].stages == std::vector<int>{1, 2});
  CHECK(r.pipeline.ranks[0].activations == Approx(13 * x + 2 * L));
  CHECK(r.pipeline.ranks[1].activations == Approx(12 * x));
}

TEST_CASE("pipeline step: a rank's gathered parameters and fp32 unsharded gradients", "[pp][sim][memory]") {
  // Under PP torchtitan keeps the stage's parameters gathered (reshard_after_forward False) and the stage runs its
  // backwards with requires_gradient_sync False: FSDP2's post_backward then upcasts each unsharded gradient to
  // reduce_dtype fp32 (FSDPParam.to_accumulated_grad_if_needed) and accumulates into it until the last backward.
  // The small model at tp 2: a block's local parameters are the linear weights (512 x 512 x 2 + 512 x 256 x 2 +
  // 512 x 1024 x 3) / 2 = 1,179,648 and two norms of 512 = 1,180,672 elements; the embedding 1024 x 512 / 2 = 262,144.
  // Split {6, 2}: rank 0 holds the embedding and 6 blocks, 2 microbatches in flight at B0 (1F1B), and ends with the
  // highest peak, in a block's backward.
  const ClusterSpec cluster = test::cluster_of("h100-sxm", 1);
  const CostParams& P = default_cost_params();
  const Model model = eight_blocks();
  Plan micro = pp_plan(PipelineScheduleKind::one_f_one_b, {6, 2});
  micro.local_batch_size = 1;
  const MemoryParts parts = memory_parts(lower(model, kTraining, micro), P);
  const double grads = 6 * 4 * 1180672.0 + 4 * 262144.0;  // 29,384,704 bytes, fp32
  const StepReport bf16 =
      simulate_pipeline(model, kTraining, pp_plan(PipelineScheduleKind::one_f_one_b, {6, 2}), cluster, P);
  REQUIRE(bf16.memory.peak == Approx(bf16.pipeline.ranks[0].peak_memory));
  CHECK(bf16.memory.peak_phase == "backward");
  // bf16 copies: 6 x 1,180,672 x 2 + 262,144 x 2 = 14,692,352 bytes.
  CHECK(bf16.memory.params_in_flight == Approx(14692352.0));
  CHECK(bf16.memory.working_set == Approx(parts.ws_backward + grads));
  // Float8 all-gather (tensorwise): the linear weights gathered in 1 byte: 6 x (1,179,648 + 1,024 x 2) + 524,288 =
  // 7,614,464 bytes; the gradients stay fp32.
  Plan f8 = pp_plan(PipelineScheduleKind::one_f_one_b, {6, 2});
  f8.float8 = Float8Recipe::tensorwise;
  micro.float8 = Float8Recipe::tensorwise;
  const MemoryParts f8_parts = memory_parts(lower(model, kTraining, micro), P);
  const StepReport f = simulate_pipeline(model, kTraining, f8, cluster, P);
  REQUIRE(f.memory.peak == Approx(f.pipeline.ranks[0].peak_memory));
  CHECK(f.memory.params_in_flight == Approx(7614464.0));
  CHECK(f.memory.working_set == Approx(f8_parts.ws_backward + grads));
}

TEST_CASE("pipeline step: p2p of one activation over NVLink, throughput over tp x pp", "[pp][sim]") {
  const ClusterSpec cluster = test::cluster_of("h100-sxm", 1);
  const CostParams& P = default_cost_params();
  const StepReport r =
      simulate_pipeline(eight_blocks(), kTraining, pp_plan(PipelineScheduleKind::one_f_one_b, {4, 4}), cluster, P);
  // One microbatch's hidden state as this rank holds it: sequence parallel shards it over tp, so 1 x 1024 / 2 tokens x
  // dim 512 x 2 bytes (bf16) = 512 KiB, inside the node.
  CHECK(r.pipeline.p2p_bytes == 524288);
  CHECK_FALSE(r.pipeline.p2p_network);
  const double nvlink =
      P.p2p_latency_us + 524288.0 / (cluster.intra_node.bandwidth_GBps * 1e9 * P.p2p_bandwidth_efficiency) * 1e6;
  CHECK(r.pipeline.p2p_us == Approx(nvlink));
  // Without sequence parallelism every tp rank holds (and sends) the whole 1024 x 512 x 2 = 1 MiB.
  PlanToggles t = pp_plan(PipelineScheduleKind::one_f_one_b, {4, 4}).toggles();
  t.loss_parallel = false;
  const StepReport v = simulate_pipeline(eight_blocks(), kTraining, test::make_plan("vanilla", t), cluster, P);
  CHECK(v.pipeline.p2p_bytes == 1048576);
  // tokens/s per GPU = local batch 4 x 1024 / (tp 2 x pp 2 x step).
  CHECK(r.tokens_per_second_per_gpu == Approx(4 * 1024 / (2 * 2 * r.step_time_ms * 1e-3)));
  // The step is at least the pass of the schedule plus the optimizer.
  CHECK(r.step_time_ms >= r.pipeline.schedule_ms + r.pipeline.optimizer_ms - 1e-9);
  // Across 2 nodes with pp 2 the hops cross the network: the mesh of a pp rank is a whole node.
  const ClusterSpec two = test::cluster_of("h100-sxm", 2);
  Plan wide = pp_plan(PipelineScheduleKind::one_f_one_b, {4, 4});
  wide.dp_shard = 4;
  const StepReport n = simulate_pipeline(eight_blocks(), kTraining, wide, two, P);
  CHECK(n.pipeline.p2p_network);
  CHECK(n.pipeline.p2p_us > r.pipeline.p2p_us);
}

TEST_CASE("pipeline step: the mesh must be the world, the schedule's own refusals name the plan", "[pp][errors]") {
  const ClusterSpec cluster = test::cluster_of("h100-sxm", 1);
  Plan p = pp_plan(PipelineScheduleKind::one_f_one_b, {4, 4});
  p.dp_shard = 1;  // pp 2 x tp 2 x dp 1 = 4 of 8
  CHECK_THROWS_WITH(simulate_pipeline(eight_blocks(), kTraining, p, cluster, default_cost_params()),
                    Contains("pp 2 x dp_replicate 1 x dp_shard 1 x cp 1 x tp 2 = 4 GPUs, but the cluster has 8"));
  // 1F1B needs microbatches >= pp: local batch 1 gives 1 microbatch.
  CHECK_THROWS_WITH(simulate_pipeline(eight_blocks(), kTraining, pp_plan(PipelineScheduleKind::one_f_one_b, {4, 4}, 1),
                                      cluster, default_cost_params()),
                    Contains("needs microbatches >= pp"));
}

TEST_CASE("pipeline explain: stages, p2p and each rank's schedule drawn in time", "[pp][explain]") {
  const ClusterSpec cluster = test::cluster_of("h100-sxm", 1);
  const StepReport r = simulate_pipeline(eight_blocks(), kTraining, pp_plan(PipelineScheduleKind::one_f_one_b, {2, 6}),
                                         cluster, default_cost_params());
  const std::string text = pipeline_explain_text(r, 60);
  CHECK_THAT(text, Contains("stage 0 on pp rank 0: tok_embeddings, layers.0-1\n"));
  CHECK_THAT(text, Contains("stage 1 on pp rank 1: layers.2-7, norm, output\n"));
  // 2 x (2 stages - 1) transfers per microbatch, x 4 microbatches.
  CHECK_THAT(text, Contains("2 x 1 stage boundary between ranks = 2 transfers per microbatch, 8 per schedule pass"));
  // 1F1B on 2 ranks, 4 microbatches: rank 0 warms up with pp - 0 = 2 forwards, rank 1 with 1.
  CHECK_THAT(text, Contains("rank 0   0F0 0F1 0B0 0F2 0B1 0F3 0B2 0B3\n"));
  CHECK_THAT(text, Contains("rank 1   1F0 1B0 1F1 1B1 1F2 1B2 1F3 1B3\n"));
  // The drawing: 60 columns per rank; rank 1 (the bottleneck, busy m (f1 + b1) of the pass) idles at the start, while
  // stage 0's first forward and the hop run, and at the end, while rank 0 runs its last backward: its '.' columns
  // are its idle share of the pass, to a column at each end.
  const size_t row = text.find("rank 1   ");
  REQUIRE(row != std::string::npos);
  const std::string drawn = text.substr(row + 9, 60);
  CHECK(drawn.front() == '.');
  CHECK(drawn.back() == '.');
  const double idle = static_cast<double>(std::count(drawn.begin(), drawn.end(), '.')) / 60;
  CHECK(idle == Approx(r.pipeline.ranks[1].idle_ms / r.pipeline.schedule_ms).margin(2.0 / 60));
  CHECK(drawn.find_first_not_of(".FB") == std::string::npos);
}

TEST_CASE("pipeline step: parameters per GPU are the largest pp rank's stages, as explain counts them", "[pp][sim]") {
  // Issue 37: per GPU was the whole model's (explain) or a memory-weighted share of it (simulate).
  const ClusterSpec cluster = test::cluster_of("h100-sxm", 1);
  const Plan plan = pp_plan(PipelineScheduleKind::one_f_one_b, {3, 5});
  const StepReport r = simulate_pipeline(eight_blocks(), kTraining, plan, cluster, default_cost_params());
  const Program micro = lower(eight_blocks(), kTraining, pipeline_microbatch_plan(plan));
  const std::vector<PipelineStageSpan> spans =
      pipeline_stage_spans(resolve_pipeline(eight_blocks(), plan), plan.pp_schedule);
  // Each pp rank holds what its stage Programs hold (their parameter tensors, their blocks only).
  std::vector<int64_t> stage_programs(2, 0);
  for (int s = 0; s < 2; ++s)
    stage_programs.at(size_t(spans.at(size_t(s)).rank)) +=
        parameter_count(lower_pipeline_stage(micro, spans, s)).per_rank;
  CHECK(r.parameters.per_pp_rank == stage_programs);
  // Together the pp ranks hold what one GPU of the same tp 2 x dp_shard 2 shards holds without the pipeline.
  Plan flat = plan;
  flat.pp_degree = 1;
  flat.pp_split.clear();
  CHECK(stage_programs[0] + stage_programs[1] == parameter_count(lower(eight_blocks(), kTraining, flat)).per_rank);
  const int most = stage_programs[1] > stage_programs[0] ? 1 : 0;
  CHECK(r.parameters.pp_rank == most);
  CHECK(r.parameters.per_rank == stage_programs[size_t(most)]);
  CHECK(r.parameters.total == eight_blocks().total_parameters());
  // explain counts the same (its text and JSON are the microbatch Program's), and neither says "all of them".
  const ParameterCount ex = parameter_count(micro);
  CHECK(ex.per_rank == r.parameters.per_rank);
  CHECK(ex.per_pp_rank == r.parameters.per_pp_rank);
  const std::string share = fmt::format(
      "per GPU {}: pp rank {}'s stages (the most of 2 pp ranks; the least holds {}), its tp 2 shard, "
      "chunked over dp_shard 2 by FSDP)",
      with_thousands(stage_programs[size_t(most)]), most, with_thousands(stage_programs[size_t(1 - most)]));
  CHECK_THAT(report_text(r), Contains(share));
}

TEST_CASE("pipeline step: the top ops are the critical rank's stages' ops, per microbatch", "[pp][sim]") {
  // Issue 37: the table was empty under PP.
  const ClusterSpec cluster = test::cluster_of("h100-sxm", 1);
  const StepReport r = simulate_pipeline(eight_blocks(), kTraining, pp_plan(PipelineScheduleKind::one_f_one_b, {3, 5}),
                                         cluster, default_cost_params());
  REQUIRE_FALSE(r.top_ops.empty());
  const PipelineRankReport& cr = r.pipeline.ranks.at(size_t(r.pipeline.critical_rank));
  const bool holds_first = cr.stages.front() == 0;
  int block_rows = 0;
  for (const OpSummary& op : r.top_ops) {
    CAPTURE(op.name, op.phase);
    CHECK(op.total_us == Approx(op.time_us * op.count));
    if (!holds_first) CHECK(op.name.rfind("tok_embeddings", 0) != 0);  // stage 0's, on the other rank
    // A block's compute op runs once per block of the rank, for each of the 4 microbatches.
    if (op.name.rfind("layers.*.", 0) == 0 && op.stream == Stream::compute && op.phase != "optimizer") {
      CHECK(op.count == cr.layers * r.pipeline.microbatches);
      ++block_rows;
    }
  }
  CHECK(block_rows > 0);
  CHECK_THAT(report_text(r),
             Contains(fmt::format("top ops of pp rank {} (the rank that ends last)", r.pipeline.critical_rank)));
}

TEST_CASE("pipeline step: a schedule's refusal says where its microbatches came from", "[pp][errors]") {
  // Issue 37: "needs microbatches >= pp ..., got 1 < 2" named no key; the local batch comes from the config.
  Plan p = pp_plan(PipelineScheduleKind::one_f_one_b, {4, 4}, 1);
  p.provenance["local_batch_size"] = "config x.yaml";
  CHECK_THROWS_WITH(
      simulate_pipeline(eight_blocks(), kTraining, p, test::cluster_of("h100-sxm", 1), default_cost_params()),
      p.source +
          ": pipeline schedule 1F1B: needs microbatches >= pp (the number of stages), got 1 < 2: "
          "microbatches = local_batch_size 1 (config x.yaml) / pp_microbatch_size 1 = 1");
}
