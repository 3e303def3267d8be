// Gradient accumulation in the simulator (sim/accumulation.h): step(ga) = step(1) + (ga - 1) x microbatch, with the
// microbatch worked out by hand on a hand-built Program (durations set by hand), the report's tokens/s, breakdown and
// op counts, the fast timeline's extrapolated segments against the expanded reference, and the search: its fast
// paths (BatchProgram, shared AC lowering, bound) equal lower() + simulate() of candidate_plan() on a space with
// search.gradient_accumulation true, the static rule and its reason, and the reports.
#include "sim/accumulation.h"

#include <fmt/format.h>

#include <catch2/catch.hpp>

#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "sim/check/baseline.h"
#include "sim/check/compare.h"
#include "sim/report/search_report.h"
#include "sim/report/step_report.h"
#include "sim/search/constraints.h"
#include "sim/search/search.h"
#include "sim/simulate.h"
#include "sim/timeline/timeline.h"
#include "tests/fixtures.h"
#include "tests/program_builder.h"

using namespace tptune;
using Catch::Matchers::Contains;
using tptune::test::small_config;
using tptune::test::small_model;
using Builder = tptune::test::ProgramBuilder;

namespace {

CollectiveOp coll(CollectiveKind k, Group g) { return CollectiveOp{k, g}; }

// embed.fwd: fwd 100 us. head: a TP all-reduce 30 us, then the loss 50 us (reads it). embed.bwd: the gradient 200 us
// (reads the loss), then its FSDP reduce-scatter 300 us on the DP stream. optimizer: AdamW 40 us (reads the shard).
Program hand_built() {
  Builder b;
  const TensorId a = b.tensor("a"), r = b.tensor("r"), l = b.tensor("l"), g = b.tensor("g"), gs = b.tensor("gs");
  b.segment(SegmentKind::embed_fwd);
  b.op("fwd", ElementwiseOp{}, {}, {a});
  b.segment(SegmentKind::head);
  b.op("all_reduce", coll(CollectiveKind::all_reduce, Group::tp), {a}, {r});
  b.op("loss", ElementwiseOp{}, {r}, {l}, {0});
  b.segment(SegmentKind::embed_bwd);
  b.op("grad", ElementwiseOp{}, {l}, {g});
  b.op("reduce_scatter", coll(CollectiveKind::reduce_scatter, Group::dp), {g}, {gs}, {0});
  b.segment(SegmentKind::optimizer);
  b.op("adamw", ElementwiseOp{}, {gs}, {});
  b.p.model = small_model(1);  // for MFU (its ratio is checked)
  b.p.tp = 1;
  b.p.dp = 8;
  b.p.training.seq_len = 1000;
  b.p.training.local_batch_size = 1;
  return b.p;
}
OpCosts hand_costs() { return OpCosts{{{100}, {30, 50}, {200, 300}, {40}}}; }

// The schedule of the hand-set durations alone: no host dispatch, no compute slowed beside collectives.
CostParams schedule_only() {
  CostParams c;
  c.eager_dispatch_us = c.compiled_dispatch_us = 0;
  c.overlap_compute_slowdown = c.overlap_p2p_compute_slowdown = 0;
  return c;
}

}  // namespace

TEST_CASE("accumulation: step(ga) = step(1) + (ga - 1) x microbatch, by hand", "[accumulation][simulate]") {
  const Program p = hand_built();
  const OpCosts c = hand_costs();
  const Timeline tl = schedule(p, c, schedule_only());
  // fwd [0, 100]; all_reduce [100, 130] on the TP stream; loss [130, 180] (30 us exposed TP); grad [180, 380];
  // reduce_scatter [380, 680] on the DP stream; adamw waits for it: [680, 720]. step(1) = 720 us.
  REQUIRE(tl.step_time_us == 720);
  // The next microbatch can start when the last op of a non-optimizer segment that is not a DP collective ends: grad
  // at 380 (the reduce-scatter drains beside the next microbatch; the optimizer runs once per step).
  CHECK(microbatch_us(p, tl) == 380);
  CHECK(accumulated_step_us(p, tl, 1) == 720);
  // step(4) = 720 + 3 x 380 = 1860 us.
  CHECK(accumulated_step_us(p, tl, 4) == 1860);

  const ClusterSpec cluster = make_cluster(gpu_preset("h100-sxm"), 1, 8);
  const StepReport one = make_report(p, cluster, c, tl, MemoryReport{}, 12, 1);
  const StepReport four = make_report(p, cluster, c, tl, MemoryReport{}, 12, 4);
  CHECK(one.gradient_accumulation_steps == 1);
  CHECK(four.gradient_accumulation_steps == 4);
  CHECK(four.step_time_ms == Approx(1.860).epsilon(1e-12));
  // tokens/s: 1 x 1000 tokens / 720 us vs 4 x 1000 tokens / 1860 us: ratio 4 x 720 / 1860 = 1.548...
  CHECK(one.tokens_per_second_per_gpu == Approx(1000 / 720e-6));
  CHECK(four.tokens_per_second_per_gpu == Approx(4000 / 1860e-6));
  CHECK(four.tokens_per_second_per_gpu / one.tokens_per_second_per_gpu == Approx(4.0 * 720 / 1860));
  CHECK(four.mfu / one.mfu == Approx(4.0 * 720 / 1860));
  // Breakdown: compute 390 + 3 x 350 (fwd + loss + grad) = 1440 us; exposed DP 300 (the optimizer's wait, once);
  // exposed TP the rest, 1860 - 1440 - 300 = 120 = 4 x 30.
  CHECK(four.compute_ms == Approx(1.440));
  CHECK(four.exposed_dp_comm_ms == Approx(0.300));
  CHECK(four.exposed_tp_comm_ms == Approx(0.120));
  CHECK(four.compute_ms + four.exposed_tp_comm_ms + four.exposed_dp_comm_ms == Approx(four.step_time_ms));
  // Streams busy: the reduce-scatter and the all-reduce run once per microbatch.
  CHECK(four.dp_comm_busy_ms == Approx(1.200));
  CHECK(four.tp_comm_busy_ms == Approx(0.120));
  // Op counts: per microbatch x 4, the optimizer once.
  for (const OpSummary& o : four.top_ops) CHECK(o.count == (o.name == "adamw" ? 1 : 4));
  // The Program's plan is the default: 0 takes it (ga 1 here), and a plan with ga 4 gives the same as the argument.
  CHECK(make_report(p, cluster, c, tl, MemoryReport{}).step_time_ms == one.step_time_ms);
  Program p4 = p;
  p4.plan.gradient_accumulation_steps = 4;
  CHECK(make_report(p4, cluster, c, tl, MemoryReport{}).step_time_ms == four.step_time_ms);
  // The text report has the line and the JSON the key only when > 1.
  CHECK_THAT(report_text(four), Contains("gradient accum.             4   microbatches per optimizer step"));
  CHECK_THAT(report_text(one), !Contains("gradient accum."));
  CHECK(report_json(four).at("plan").at("gradient_accumulation_steps") == 4);
  CHECK_FALSE(report_json(one).at("plan").contains("gradient_accumulation_steps"));
}

TEST_CASE(
    "accumulation: a DP stream busier than a microbatch sets the period, CPU ranks wait for their DP "
    "collectives",
    "[accumulation][simulate]") {
  const Program p = hand_built();
  const ClusterSpec cluster = make_cluster(gpu_preset("h100-sxm"), 1, 8);
  SECTION("the reduce-scatter outlasts the microbatch") {
    // As above with a 500 us reduce-scatter: grad ends at 380, reduce_scatter [380, 880], adamw [880, 920]: step(1)
    // 920 us. Each microbatch's reduce-scatter needs the DP stream for 500 us, longer than the 380 us before the next
    // microbatch could start, so the period is 500: step(4) = 920 + 3 x 500 = 2420 us.
    const OpCosts c{{{100}, {30, 50}, {200, 500}, {40}}};
    const Timeline tl = schedule(p, c, schedule_only());
    REQUIRE(tl.step_time_us == 920);
    CHECK(microbatch_times(p, tl).critical_us == 380);
    CHECK(microbatch_times(p, tl).dp_busy_us == 500);
    CHECK(accumulated_step_us(p, tl, 4) == 2420);
    // Breakdown: compute 390 + 3 x 350 = 1440; exposed DP 500 (the optimizer's wait) + 3 x (500 - 380) = 860;
    // exposed TP the rest, 2420 - 1440 - 860 = 120 = 4 x 30.
    const StepReport r = make_report(p, cluster, c, tl, MemoryReport{}, 12, 4);
    CHECK(r.compute_ms == Approx(1.440));
    CHECK(r.exposed_dp_comm_ms == Approx(0.860));
    CHECK(r.exposed_tp_comm_ms == Approx(0.120));
  }
  SECTION("collectives that cannot overlap compute (CPU ranks)") {
    // comm_overlaps_compute 0, one stream: fwd [0, 100], all_reduce [100, 130], loss [130, 180], grad [180, 380],
    // reduce_scatter [380, 680], adamw [680, 720]: step(1) 720 us. The next microbatch waits for the reduce-scatter
    // on the rank's thread: period 680, step(4) = 720 + 3 x 680 = 2760 us.
    CostParams cpu = schedule_only();
    cpu.comm_overlaps_compute = 0;
    const Timeline tl = schedule(p, hand_costs(), cpu);
    REQUIRE(tl.step_time_us == 720);
    CHECK(microbatch_us(p, tl) == 680);
    CHECK(accumulated_step_us(p, tl, 4) == 2760);
  }
}

TEST_CASE("accumulation: the microbatch of an extrapolated timeline equals the expanded one's", "[accumulation]") {
  for (int layers : {2, 9, 32}) {
    for (ActivationCheckpointing ac : {ActivationCheckpointing::none, ActivationCheckpointing::full}) {
      INFO(layers << " layers, AC " << to_string(ac));
      Plan base;
      base.tp_degree = 2;
      base.dp_shard = 4;
      base.loss_parallel = true;
      base.activation_checkpointing = ac;
      base.gradient_accumulation_steps = 8;
      Training t;
      t.seq_len = 256;
      const Program p = lower(small_model(layers), t, preset_plan("sequence_parallel", base));
      CHECK(p.plan.gradient_accumulation_steps == 8);  // carried, not read by the lowering
      const ClusterSpec cluster = make_cluster(gpu_preset("h100-sxm"), 1, 8);
      const OpCosts costs = cost_ops(p, cluster, default_cost_params());
      const Timeline fast = schedule(p, costs, default_cost_params());
      const Timeline ref = schedule_expanded(p, costs, default_cost_params());
      CHECK(microbatch_us(p, fast) == Approx(microbatch_us(p, ref)).epsilon(1e-12));
      // A microbatch is shorter than the step (the optimizer waits for the last reduce-scatters) and positive.
      CHECK(microbatch_us(p, fast) > 0);
      CHECK(microbatch_us(p, fast) < fast.step_time_us);
      const StepReport r = simulate(p, cluster, default_cost_params());
      CHECK(r.step_time_ms == Approx((fast.step_time_us + 7 * microbatch_us(p, fast)) / 1e3).epsilon(1e-12));
      // The same Program at ga 1: the Program does not depend on it.
      Plan one = base;
      one.gradient_accumulation_steps = 1;
      const Program p1 = lower(small_model(layers), t, preset_plan("sequence_parallel", one));
      const StepReport r1 = simulate(p1, cluster, default_cost_params());
      CHECK(r1.step_time_ms == Approx(fast.step_time_us / 1e3).epsilon(1e-12));
      CHECK(r.memory.peak == r1.memory.peak);                             // gradients accumulate in the same buffers
      CHECK(r.tokens_per_second_per_gpu > r1.tokens_per_second_per_gpu);  // the optimizer's time is amortised
    }
  }
}

TEST_CASE("accumulation: the search's static rule (a multiple of local batch x dp) and each candidate's ga",
          "[accumulation][search]") {
  // 1 node x 8: tp 2 -> dp 4, tp 8 -> dp 1. Global batch 24.
  const Config cfg =
      small_config("ga-small.yaml", 1, 8,
                   "{tp_degrees: [2, 8], presets: [sequence_parallel], float8: [none], async_tp: "
                   "[false], loss_parallel: [true], activation_checkpointing: [none], "
                   "local_batch_sizes: [1, 2, 4, 16], global_batch_size: 24, gradient_accumulation: true}");
  const ResolvedSpace s = resolve_space(cfg);
  CHECK(s.gradient_accumulation);
  const ClusterSpec cl = resolve_cluster(cfg);
  const std::vector<Candidate> cs = enumerate_candidates(s);
  REQUIRE(cs.size() == 8);
  // tp 2 (dp 4): 24 / 4 = 6, 24 / 8 = 3, 24 / 16 no, 24 / 64 no. tp 8 (dp 1): 24, 12, 6, 24 / 16 no.
  const int64_t expect_ga[] = {6, 3, 1, 1, 24, 12, 6, 1};
  for (size_t i = 0; i < cs.size(); ++i) {
    INFO(describe(s, cs[i]));
    CHECK(cs[i].gradient_accumulation_steps == expect_ga[i]);
    const Verdict v = check_static(cfg, cl, s, cs[i]);
    CHECK(v.ok() == (expect_ga[i] > 1));
    if (!v.ok()) CHECK(v.reason == PruneReason::global_batch_multiple);
    if (v.ok()) CHECK(candidate_plan(s, cs[i]).gradient_accumulation_steps == expect_ga[i]);
  }
  CHECK(check_static(cfg, cl, s, cs[2]).detail == "global_batch_size 24 vs local batch 4 x dp 4 x dp_replicate 1 = 16");
  CHECK_THAT(describe(s, cs[0]), Contains("local_batch=1 grad_accum=6"));
  CHECK_THAT(describe(s, cs[2]), !Contains("grad_accum"));
  // Without accumulation the rule is equality, as before: local batch x dp = 24 nowhere here.
  Config eq = cfg;
  eq.search.gradient_accumulation = false;
  const ResolvedSpace se = resolve_space(eq);
  for (const Candidate& c : enumerate_candidates(se)) {
    CHECK(c.gradient_accumulation_steps == 1);
    CHECK(check_static(eq, cl, se, c).reason == PruneReason::global_batch);
  }
}

TEST_CASE("accumulation: the search equals brute force (lower + simulate of candidate_plan) with its fast paths",
          "[accumulation][search][brute]") {
  // 2 nodes x 8, global batch 96: tp 1 (dp 16), 2 (dp 8), 4 (dp 4), 8 (dp 2), 16 (dp 1) with local batches 1..4, so
  // that the batch-parametric Program, the shared AC lowering and the skip of larger batches all see candidates of
  // one structure with different ga (and some that the rule prunes).
  const Config cfg = small_config("ga-small.yaml", 2, 8,
                                  "{tp_degrees: [1, 2, 4, 8, 16], presets: [vanilla, sequence_parallel], float8: "
                                  "[none, tensorwise], async_tp: [false, true], loss_parallel: [true], "
                                  "activation_checkpointing: [none, full], local_batch_sizes: [1, 2, 3, 4], "
                                  "global_batch_size: 96, gradient_accumulation: true}");
  for (size_t bound : {size_t{0}, size_t{3}}) {
    INFO("bound_top " << bound);
    SearchOptions o;
    o.threads = 2;
    o.bound_top = bound;
    const SearchResult r = search(cfg, o);
    const std::vector<Candidate> cands = enumerate_candidates(r.space);
    REQUIRE(cands.size() == r.results.size());
    CHECK(r.pruned.count(PruneReason::global_batch_multiple));
    CHECK(r.pruned.count(PruneReason::bound) == 0);  // every feasible candidate here accumulates: none is bound-pruned
    size_t accumulating = 0;
    for (size_t i = 0; i < cands.size(); ++i) {
      const CandidateResult& s = r.results[i];
      INFO(describe(r.space, cands[i]) << " | " << s.pruned << " " << s.detail);
      if (s.pruned == PruneReason::world || s.pruned == PruneReason::global_batch_multiple ||
          s.pruned == PruneReason::redundant)
        continue;
      const Plan plan = candidate_plan(r.space, cands[i]);
      CHECK(plan.global_batch_size() == 96);
      bool ok = false;
      StepReport b;
      try {
        b = simulate(lower(cfg.model, cfg.training, plan), r.cluster, default_cost_params());
        ok = true;
      } catch (const Error&) {
      }
      const bool fits = ok && fits_with_headroom(b.memory, r.space.memory_headroom_gib);
      CHECK(s.feasible() == fits);
      if (s.feasible() && fits) {
        CHECK(s.report.gradient_accumulation_steps == plan.gradient_accumulation_steps);
        CHECK(s.report.step_time_ms == b.step_time_ms);
        CHECK(s.report.tokens_per_second_per_gpu == b.tokens_per_second_per_gpu);
        CHECK(s.report.mfu == b.mfu);
        CHECK(s.report.memory.peak == b.memory.peak);
        CHECK(s.report.compute_ms == b.compute_ms);
        CHECK(s.report.exposed_tp_comm_ms == b.exposed_tp_comm_ms);
        CHECK(s.report.exposed_dp_comm_ms == b.exposed_dp_comm_ms);
        accumulating += plan.gradient_accumulation_steps > 1;
      }
    }
    CHECK(accumulating > 0);
    // Reports: the batch column reads local batch x microbatches, the JSON plan and the exported winner carry ga.
    REQUIRE(r.winner());
    const std::string table = search_table(cfg, r, 10);
    CHECK_THAT(table, Contains("global batch 96 sequences (gradient accumulation"));
    CHECK_THAT(table, Contains(fmt::format("{}x{}", r.winner()->candidate.local_batch_size,
                                           r.winner()->candidate.gradient_accumulation_steps)));
    const nlohmann::json j = search_json(r, {}, 10);
    CHECK(j.at("top").at(0).at("plan").value("gradient_accumulation_steps", int64_t{1}) ==
          r.winner()->candidate.gradient_accumulation_steps);
    const Plan wp = result_plan(r, r.ranking[0]);
    const Plan back = load_plan_string(plan_to_yaml(wp), "winner.yaml");
    CHECK(back.gradient_accumulation_steps == r.winner()->candidate.gradient_accumulation_steps);
    CHECK(simulate(lower(cfg.model, cfg.training, back), r.cluster, default_cost_params()).step_time_ms ==
          r.winner()->report.step_time_ms);
  }
}

TEST_CASE("accumulation: a space without gradient_accumulation is unchanged (every candidate at ga 1)",
          "[accumulation][search]") {
  const Config cfg = small_config("ga-small.yaml", 1, 8, "{tp_degrees: [2, 8], local_batch_sizes: [1, 2]}");
  const SearchResult r = search(cfg, {});
  for (const CandidateResult& c : r.results) CHECK(c.candidate.gradient_accumulation_steps == 1);
  for (int i : r.ranking) CHECK(r.results[static_cast<size_t>(i)].report.gradient_accumulation_steps == 1);
  CHECK_THAT(search_table(cfg, r, 5), !Contains("gradient accumulation"));
}

TEST_CASE("accumulation: tp-plan check notices accumulation steps that differ from the baseline's",
          "[accumulation][check]") {
  const Program p = hand_built();
  const Timeline tl = schedule(p, hand_costs(), schedule_only());
  const ClusterSpec cl = make_cluster(gpu_preset("h100-sxm"), 1, 8);
  const CheckBaseline one = baseline_from_report(make_report(p, cl, hand_costs(), tl, MemoryReport{}, 12, 1));
  const CheckBaseline four = baseline_from_report(make_report(p, cl, hand_costs(), tl, MemoryReport{}, 12, 4));
  CHECK_FALSE(one.setup.count("gradient_accumulation_steps"));  // baselines of other runs read as before
  CHECK(four.setup.at("gradient_accumulation_steps") == "4");
  CHECK(compare(one, four, {0.5, 0.5}).setup_changes == std::vector<std::string>{"gradient_accumulation_steps 1 -> 4"});
  CHECK(compare(four, one, {0.5, 0.5}).setup_changes == std::vector<std::string>{"gradient_accumulation_steps 4 -> 1"});
  CHECK(compare(four, four, {0.5, 0.5}).setup_changes.empty());
}
