// HSDP in the simulator: the replicate group's layout on the cluster and its all-reduce cost (hand-derived, with the
// default CostParams: see tests/sim/cost_model_test.cc for the constants), the memory model (sharded by dp_shard
// only), the stream the all-reduces run on, the fast timeline against the expanded one, the mesh-size check, and the
// search's static rules for the replicate axis.
#include <fmt/format.h>

#include <catch2/catch.hpp>

#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "sim/check/baseline.h"
#include "sim/check/compare.h"
#include "sim/cost/comm_cost.h"
#include "sim/memory.h"
#include "sim/report/search_report.h"
#include "sim/report/step_report.h"
#include "sim/report/trace.h"
#include "sim/search/constraints.h"
#include "sim/search/search.h"
#include "sim/simulate.h"
#include "sim/timeline/timeline.h"
#include "tests/error_text.h"
#include "tests/fixtures.h"

using namespace tptune;
using Catch::Matchers::Contains;
using tptune::test::error_of;
using tptune::test::small_config;
using tptune::test::small_model;

namespace {

constexpr int64_t GiB = int64_t{1} << 30;

}  // namespace

TEST_CASE("hsdp: the replicate group strides over whole replicas (tp x dp_shard ranks)", "[hsdp][layout]") {
  // 16 nodes x 8, tp 8 x dp_shard 4 x dp_replicate 4: a replica is 32 ranks = 4 nodes, so the replicate group has one
  // GPU in each of 4 nodes; the shard group (stride tp 8) one GPU in each of 4 nodes too.
  const ClusterSpec c16 = make_cluster(gpu_preset("h100-sxm"), 16, 8);
  GroupLayout r = group_layout(c16, Group::dp_replicate, 8, 4, 4);
  CHECK((r.size == 4 && r.per_node == 1 && r.nodes == 4));
  GroupLayout d = group_layout(c16, Group::dp, 8, 4, 4);
  CHECK((d.size == 4 && d.per_node == 1 && d.nodes == 4));
  // 4 nodes x 8, tp 2 x dp_shard 2 x dp_replicate 8: a replica is 4 ranks (half a node): 2 replicate members per
  // node, over 4 nodes; the shard group (ranks t, t + 2) stays in one node.
  const ClusterSpec c4 = make_cluster(gpu_preset("h100-sxm"), 4, 8);
  r = group_layout(c4, Group::dp_replicate, 2, 2, 8);
  CHECK((r.size == 8 && r.per_node == 2 && r.nodes == 4));
  d = group_layout(c4, Group::dp, 2, 2, 8);
  CHECK((d.size == 2 && d.per_node == 2 && d.nodes == 1));
  // tp 1 x dp_shard 8 x dp_replicate 4: a replica is one node; one replicate member per node.
  r = group_layout(c4, Group::dp_replicate, 1, 8, 4);
  CHECK((r.size == 4 && r.per_node == 1 && r.nodes == 4));
  // The TP group does not change with HSDP.
  GroupLayout t = group_layout(c4, Group::tp, 2, 2, 8);
  CHECK((t.size == 2 && t.per_node == 2 && t.nodes == 1));
  // A mesh larger than the cluster names all three degrees.
  CHECK_THAT(error_of([&] { group_layout(c4, Group::dp_replicate, 8, 2, 4); }),
             Contains("mesh [dp_replicate 4, dp 2, tp 8] needs 64 GPUs; the cluster has 32"));
}

TEST_CASE("hsdp: the replicate all-reduce costs what its layout says", "[hsdp][cost]") {
  const CostParams& P = default_cost_params();
  // One GPU in each of 4 nodes (tp 8 x dp_shard 4 x dp_replicate 4 on 16 nodes), 1 GiB: the NIC ring.
  // Ring: 8.4 + 2(4-1) x 14 = 92.4 us; 1 GiB x 2(4-1)/4 = 1.5 GiB / (50 GB/s x 0.94 = 47 GB/s) = 34268.36 us ->
  // 34360.76 us. Tree: 8.4 + 2 x 2 x 14 + 2 GiB / 47 GB/s = 45755.5 us. The ring wins.
  const ClusterSpec c16 = make_cluster(gpu_preset("h100-sxm"), 16, 8);
  CommEstimate e =
      collective_cost(CollectiveKind::all_reduce, GiB, group_layout(c16, Group::dp_replicate, 8, 4, 4), c16, P);
  CHECK(e.algorithm == CommAlgorithm::ring);
  CHECK(e.time_us == Approx(34360.76).epsilon(1e-6));
  // Two members per node in 4 nodes (tp 2 x dp_shard 2 x dp_replicate 8 on 4 nodes), 1 GiB: hierarchical.
  //   reduce-scatter in the node, 1 GiB over 2 GPUs: 8.4 + 1 x 3.4 + 1 GiB x 1/2 / (450 x 0.60 = 270 GB/s)
  //     = 11.8 + 1988.41 = 2000.21 us (LL: 6.6 + 0.61 + 536870912 / 81 GB/s = 6635 us, slower);
  //   all-reduce across the 4 nodes of S/2 = 512 MiB: ring 92.4 + 536870912 x 1.5 / 47e9 = 17226.58 us (tree
  //     8.4 + 56 + 2 x 536870912 / 47e9 = 22909.97 us);
  //   all-gather in the node: 2000.21 us. Total 21227.00 us.
  const ClusterSpec c4 = make_cluster(gpu_preset("h100-sxm"), 4, 8);
  e = collective_cost(CollectiveKind::all_reduce, GiB, group_layout(c4, Group::dp_replicate, 2, 2, 8), c4, P);
  CHECK(e.algorithm == CommAlgorithm::hierarchical);
  CHECK(e.time_us == Approx(21227.00).epsilon(1e-6));
  // busbw as nccl-tests prints it: S x 2(n-1)/n / t = 1 GiB x 1.75 / 21227 us = 88.52 GB/s.
  CHECK(e.busbw_GBps == Approx(1.75 * GiB / 21227.00e-6 / 1e9).epsilon(1e-6));
}

TEST_CASE("hsdp: model states are sharded over dp_shard only", "[hsdp][memory]") {
  // Elements of the tp-2 shard: per block norms 2 x 512, wq and wo 512 x 512 / 2 = 131072 each, wk and wv
  // 256 x 512 / 2 = 65536 each, w1 w2 w3 1024 x 512 / 2 = 262144 each: 1180672, x 4 layers = 4722688; embedding and
  // output 1024 x 512 / 2 = 262144 each, final norm 512: 5247488 elements. 16 bytes each (fp32 master, fp32 grad,
  // AdamW m, v) / dp_shard 2 = 41979904 bytes, whatever dp_replicate is.
  const GpuSpec h100 = gpu_preset("h100-sxm");
  const CostParams& P = default_cost_params();
  const MemoryReport fsdp = memory_model(
      test::lower_preset("sequence_parallel", {.tp_degree = 2, .dp_shard = 2, .dp_replicate = 1, .loss_parallel = true},
                         small_model(4), 256),
      h100, P);
  const MemoryReport hsdp = memory_model(
      test::lower_preset("sequence_parallel", {.tp_degree = 2, .dp_shard = 2, .dp_replicate = 4, .loss_parallel = true},
                         small_model(4), 256),
      h100, P);
  const MemoryReport wide = memory_model(
      test::lower_preset("sequence_parallel", {.tp_degree = 2, .dp_shard = 8, .dp_replicate = 1, .loss_parallel = true},
                         small_model(4), 256),
      h100, P);
  CHECK(fsdp.model_states() == 41979904.0);
  CHECK(hsdp.model_states() == fsdp.model_states());
  CHECK(hsdp.peak == fsdp.peak);  // the all-reduce works in place on the reduce-scatter output
  CHECK(hsdp.working_set == fsdp.working_set);
  // The same 8 data-parallel ranks as plain FSDP over 8 hold a quarter of the states each.
  CHECK(wide.model_states() == 41979904.0 / 4);
  CHECK(hsdp.peak > wide.peak);
}

TEST_CASE("hsdp: the all-reduces run on their own stream after their reduce-scatter, off the critical path",
          "[hsdp][timeline]") {
  // tp 2 x dp_shard 2 x dp_replicate 4 on 2 nodes of 8: the replicate group crosses nodes.
  const ClusterSpec cl = make_cluster(gpu_preset("h100-sxm"), 2, 8);
  const CostParams& P = default_cost_params();
  const Program p =
      test::lower_preset("sequence_parallel", {.tp_degree = 2, .dp_shard = 2, .dp_replicate = 4, .loss_parallel = true},
                         small_model(4), 2048);
  const OpCosts oc = cost_ops(p, cl, P);
  const Timeline tl = schedule(p, oc, P);
  int seen = 0;
  for (size_t s = 0; s < p.segments.size(); ++s)
    for (size_t j = 0; j < p.segments[s].ops.size(); ++j) {
      const Op& op = p.segments[s].ops[j];
      const auto* c = std::get_if<CollectiveOp>(&op.kind);
      if (!c || c->group != Group::dp_replicate) continue;
      CHECK(stream_of(op) == Stream::dp_replicate);
      CHECK(oc.duration_us[s][j] > 0);
      const SegmentTimes& st = tl.segments[s];
      for (int i = 0; i < st.instances; ++i) {
        ++seen;
        // It starts no earlier than its reduce-scatter (the op before it) ends.
        CHECK(st.time(i, static_cast<int>(j)).start >= st.time(i, static_cast<int>(j) - 1).end);
      }
    }
  CHECK(seen == 4 + 2);
  CHECK(tl.busy_us[static_cast<int>(Stream::dp_replicate)] > 0);
  // Adding the all-reduces on a stream of their own changes no compute op's duration (the compute stream's work,
  // without what the all-reduces' contention and dispatch add), and the step is no shorter.
  const Program plain =
      test::lower_preset("sequence_parallel", {.tp_degree = 2, .dp_shard = 2, .dp_replicate = 1, .loss_parallel = true},
                         small_model(4), 2048);
  const Timeline tp = schedule(plain, cost_ops(plain, cl, P), P);
  auto work = [](const Timeline& t) { return t.compute_us - t.contention_us - t.host_wait_us; };
  CHECK(work(tl) == Approx(work(tp)).epsilon(1e-12));
  CHECK(tl.step_time_us >= tp.step_time_us);
  CHECK(tl.step_time_us == Approx(tl.compute_us + tl.exposed_tp_us + tl.exposed_dp_us).epsilon(1e-9));
  // The report carries the stream's busy time.
  const StepReport r = simulate(p, cl, P);
  CHECK(r.dp_replicate == 4);
  CHECK(r.dp_replicate_comm_busy_ms == Approx(tl.busy_us[static_cast<int>(Stream::dp_replicate)] / 1e3));
  const nlohmann::json j = report_json(r);
  CHECK(j.at("plan").at("dp_replicate") == 4);
  CHECK(j.at("comm_busy_ms").contains("dp_replicate"));
  CHECK_THAT(report_text(r), Contains("(tp 2, dp 2 x dp_replicate 4 (HSDP))"));
  CHECK_FALSE(report_json(simulate(plain, cl, P)).at("plan").contains("dp_replicate"));
}

TEST_CASE("hsdp: the fast schedule equals the expanded one on HSDP Programs", "[hsdp][timeline]") {
  struct Case {
    int tp, dp, rep, nodes;
    ActivationCheckpointing ac;
    bool async_tp;
  };
  const Case cases[] = {{2, 2, 4, 2, ActivationCheckpointing::none, false},
                        {8, 2, 2, 4, ActivationCheckpointing::selective, true},
                        {4, 4, 2, 4, ActivationCheckpointing::full, false},
                        {1, 8, 4, 4, ActivationCheckpointing::none, false}};
  const CostParams& P = default_cost_params();
  for (const Case& k : cases)
    for (int layers : {1, 2, 7}) {
      INFO("tp " << k.tp << " dp " << k.dp << " rep " << k.rep << " layers " << layers);
      const Program p = test::lower_preset("sequence_parallel",
                                           {.tp_degree = k.tp,
                                            .dp_shard = k.dp,
                                            .dp_replicate = k.rep,
                                            .async_tp = k.async_tp,
                                            .loss_parallel = true,
                                            .activation_checkpointing = k.ac},
                                           small_model(layers), 2048);
      const ClusterSpec cl = make_cluster(gpu_preset("h100-sxm"), k.nodes, 8);
      const OpCosts oc = cost_ops(p, cl, P);
      const Timeline fast = schedule(p, oc, P), ref = schedule_expanded(p, oc, P);
      REQUIRE(fast.segments.size() == ref.segments.size());
      for (size_t s = 0; s < fast.segments.size(); ++s)
        for (int i = 0; i < fast.segments[s].instances; ++i)
          for (int j = 0; j < fast.segments[s].ops; ++j) {
            REQUIRE(fast.segments[s].time(i, j).start == Approx(ref.segments[s].time(i, j).start).margin(1e-6));
            REQUIRE(fast.segments[s].time(i, j).end == Approx(ref.segments[s].time(i, j).end).margin(1e-6));
          }
      CHECK(fast.step_time_us == Approx(ref.step_time_us).margin(1e-6));
      CHECK(fast.exposed_dp_us == Approx(ref.exposed_dp_us).margin(1e-6));
      for (int s = 0; s < kStreams; ++s) CHECK(fast.busy_us[s] == Approx(ref.busy_us[s]).margin(1e-6));
    }
}

TEST_CASE("hsdp: simulate refuses a mesh larger than the cluster, naming the three degrees", "[hsdp][simulate]") {
  const ClusterSpec cl = make_cluster(gpu_preset("h100-sxm"), 1, 8);
  CHECK_THAT(error_of([&] {
               simulate(test::lower_preset("sequence_parallel",
                                           {.tp_degree = 2, .dp_shard = 2, .dp_replicate = 4, .loss_parallel = true},
                                           small_model(4), 256),
                        cl, default_cost_params());
             }),
             Contains("tp 2 x dp_shard 2 x dp_replicate 4 = 16 GPUs, but the cluster has 8 (1 nodes x 8)"));
  CHECK(error_of([&] {
          simulate(test::lower_preset("sequence_parallel",
                                      {.tp_degree = 2, .dp_shard = 2, .dp_replicate = 2, .loss_parallel = true},
                                      small_model(4), 256),
                   cl, default_cost_params());
        }) == "(no error)");
}

TEST_CASE("hsdp: search space, static rules and the plans of replicate candidates", "[hsdp][search]") {
  // 4 nodes x 8 = 32 GPUs; tp [2, 8] x dp_replicate [1, 2, 3, 16]; one preset, one of everything else.
  const Config cfg = small_config("hsdp-small.yaml", 4, 8,
                                  "{tp_degrees: [2, 8], dp_replicate: [1, 2, 3, 16], presets: [sequence_parallel], "
                                  "float8: [none], async_tp: [false], loss_parallel: [true], "
                                  "activation_checkpointing: [none], local_batch_sizes: [1, 2]}");
  const ResolvedSpace s = resolve_space(cfg);
  CHECK(s.dp_replicate == std::vector<int>{1, 2, 3, 16});
  CHECK(s.size() == 2 * 4 * 2);
  const std::vector<Candidate> cands = enumerate_candidates(s);
  REQUIRE(cands.size() == 16);
  // Enumeration order: tp, then dp_replicate, then the rest (local batch innermost).
  CHECK((cands[0].tp_degree == 2 && cands[0].dp_replicate == 1 && cands[0].dp_shard == 16));
  CHECK((cands[2].tp_degree == 2 && cands[2].dp_replicate == 2 && cands[2].dp_shard == 8));
  CHECK((cands[4].dp_replicate == 3 && cands[4].dp_shard == 0));  // 32 / (2 x 3) is not whole
  CHECK((cands[6].dp_replicate == 16 && cands[6].dp_shard == 1));
  CHECK((cands[14].tp_degree == 8 && cands[14].dp_replicate == 16 && cands[14].dp_shard == 0));  // 8 x 16 > 32
  const ClusterSpec cl = resolve_cluster(cfg);
  Verdict v = check_static(cfg, cl, s, cands[4]);
  CHECK(v.reason == PruneReason::replicate_world);
  CHECK(v.detail == "tp 2 x dp_replicate 3 vs 32 GPUs");
  v = check_static(cfg, cl, s, cands[6]);  // dp_shard 1 in the DTensor family: DDP
  CHECK(v.reason == PruneReason::replicate_ddp);
  CHECK(check_static(cfg, cl, s, cands[2]).ok());
  // The candidate's plan and one line.
  const Plan p = candidate_plan(s, cands[2]);
  CHECK((p.tp_degree == 2 && p.dp_shard == 8 && p.dp_replicate == 2));
  CHECK(describe(s, cands[2]) ==
        "tp 2 dp_replicate 2 sequence_parallel float8=none async_tp=false loss_parallel=true ac=none local_batch=1");
  CHECK(describe(s, cands[0]).rfind("tp 2 sequence_parallel", 0) == 0);
  // The global batch counts every data-parallel rank: local batch x dp_shard x dp_replicate.
  Config gb = cfg;
  gb.search.global_batch_size = 32;
  const ResolvedSpace sg = resolve_space(gb);
  v = check_static(gb, cl, sg, cands[2]);  // 1 x 8 x 2 = 16
  CHECK(v.reason == PruneReason::global_batch);
  CHECK(v.detail == "local batch 1 x dp 8 x dp_replicate 2 = 16 vs global_batch_size 32");
  CHECK(check_static(gb, cl, sg, cands[3]).ok());  // 2 x 8 x 2 = 32
}

TEST_CASE("hsdp: the search ranks replicate candidates like brute force, and reports them", "[hsdp][search]") {
  const Config cfg = small_config("hsdp-small.yaml", 4, 8,
                                  "{tp_degrees: [1, 2, 8], dp_replicate: [1, 2, 4, 32], presets: [sequence_parallel],"
                                  " float8: [none, tensorwise], async_tp: [false], loss_parallel: [true], "
                                  "activation_checkpointing: [none, full], local_batch_sizes: [1, 2]}");
  SearchOptions o;
  o.threads = 2;
  const SearchResult r = search(cfg, o);
  CHECK(r.evaluated == 3 * 4 * 2 * 2 * 2);
  size_t hsdp_feasible = 0;
  for (size_t i = 0; i < r.results.size(); ++i) {
    const CandidateResult& c = r.results[i];
    INFO(describe(r.space, c.candidate) << " | " << c.pruned << " " << c.detail);
    if (c.pruned == PruneReason::replicate_world || c.pruned == PruneReason::world) continue;
    const Plan plan = candidate_plan(r.space, c.candidate);
    CHECK(static_cast<int64_t>(plan.tp_degree) * plan.dp_shard * plan.dp_replicate == 32);
    bool ok = false;
    StepReport b;
    try {
      b = simulate(lower(cfg.model, cfg.training, plan), r.cluster, default_cost_params());
      ok = true;
    } catch (const Error&) {
    }
    if (c.pruned == PruneReason::replicate_ddp) {
      CHECK_FALSE(ok);  // the lowering refuses it too
      continue;
    }
    CHECK(ok == (c.feasible() || c.pruned == PruneReason::memory));
    if (c.feasible()) {
      CHECK(c.report.step_time_ms == b.step_time_ms);
      CHECK(c.report.memory.peak == b.memory.peak);
      CHECK(c.report.dp_replicate == c.candidate.dp_replicate);
      hsdp_feasible += c.candidate.dp_replicate > 1;
    }
  }
  CHECK(hsdp_feasible > 0);
  // Reports: the tp column reads tp x dp_replicate, the JSON plan carries the degree, the exported plan too.
  const std::string table = search_table(cfg, r, 50);
  CHECK_THAT(table, Contains("HSDP: dp_replicate [1, 2, 4, 32]"));
  CHECK_THAT(table, Contains("2x2 "));
  const nlohmann::json j = search_json(r, {}, 50);
  bool json_hsdp = false;
  for (const auto& e : j.at("top")) json_hsdp |= e.at("plan").contains("dp_replicate");
  CHECK(json_hsdp);
  for (int i : r.ranking) {
    const Plan wp = result_plan(r, i);
    if (wp.dp_replicate == 1) continue;
    const Plan back = load_plan_string(plan_to_yaml(wp), "winner.yaml");
    CHECK(back.dp_replicate == wp.dp_replicate);
    CHECK(simulate(lower(cfg.model, cfg.training, back), r.cluster, default_cost_params()).step_time_ms ==
          r.results[static_cast<size_t>(i)].report.step_time_ms);
    break;
  }
}

TEST_CASE("hsdp: the Chrome trace has a track for the replicate stream only for HSDP plans", "[hsdp][trace]") {
  const ClusterSpec cl = make_cluster(gpu_preset("h100-sxm"), 2, 8);
  const CostParams& P = default_cost_params();
  auto tracks = [&](const Program& p) {
    const OpCosts oc = cost_ops(p, cl, P);
    const nlohmann::json t = chrome_trace(p, oc, schedule(p, oc, P));
    std::vector<std::string> names;
    int on_replicate = 0;
    for (const auto& e : t.at("traceEvents")) {
      if (e.at("name") == "thread_name") names.push_back(e.at("args").at("name"));
      if (e.at("ph") == "X" && e.at("tid") == static_cast<int>(Stream::dp_replicate)) {
        CHECK(e.at("args").at("group") == "dp_replicate");
        ++on_replicate;
      }
    }
    return std::pair{names, on_replicate};
  };
  const auto [hsdp_names, hsdp_ops] = tracks(
      test::lower_preset("sequence_parallel", {.tp_degree = 2, .dp_shard = 2, .dp_replicate = 4, .loss_parallel = true},
                         small_model(4), 256));
  CHECK(hsdp_names == std::vector<std::string>{"compute", "tp comm", "dp comm", "dp_replicate comm"});
  CHECK(hsdp_ops == 4 + 2);
  const auto [plain_names, plain_ops] = tracks(
      test::lower_preset("sequence_parallel", {.tp_degree = 2, .dp_shard = 2, .dp_replicate = 1, .loss_parallel = true},
                         small_model(4), 256));
  CHECK(plain_names == std::vector<std::string>{"compute", "tp comm", "dp comm"});
  CHECK(plain_ops == 0);
}

TEST_CASE("hsdp: tp-plan check notices a replicate degree that differs from the baseline's", "[hsdp][check]") {
  const ClusterSpec cl = make_cluster(gpu_preset("h100-sxm"), 2, 8);
  const CostParams& P = default_cost_params();
  const CheckBaseline plain = baseline_from_report(simulate(
      test::lower_preset("sequence_parallel", {.tp_degree = 2, .dp_shard = 2, .dp_replicate = 1, .loss_parallel = true},
                         small_model(4), 256),
      cl, P));
  const CheckBaseline hsdp = baseline_from_report(simulate(
      test::lower_preset("sequence_parallel", {.tp_degree = 2, .dp_shard = 2, .dp_replicate = 4, .loss_parallel = true},
                         small_model(4), 256),
      cl, P));
  const CheckBaseline hsdp2 = baseline_from_report(simulate(
      test::lower_preset("sequence_parallel", {.tp_degree = 2, .dp_shard = 2, .dp_replicate = 2, .loss_parallel = true},
                         small_model(4), 256),
      cl, P));
  CHECK_FALSE(plain.setup.count("dp_replicate"));  // baselines of other plans read as before
  CHECK(hsdp.setup.at("dp_replicate") == "4");
  CHECK(compare(plain, hsdp, {0.5, 0.5}).setup_changes == std::vector<std::string>{"dp_replicate 1 -> 4"});
  CHECK(compare(hsdp2, hsdp, {0.5, 0.5}).setup_changes == std::vector<std::string>{"dp_replicate 2 -> 4"});
  CHECK(compare(hsdp, hsdp, {0.5, 0.5}).setup_changes.empty());
  CHECK(compare(hsdp, plain, {0.5, 0.5}).setup_changes == std::vector<std::string>{"dp_replicate 4 -> 1"});
}
