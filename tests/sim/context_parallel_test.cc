// Context parallelism in the simulator: the cp group's layout (inside a node when cp x tp <= gpus_per_node), its ring
// transfers priced by the comm model on that group's links (hand-derived from the default CostParams), the overlap
// each rotate method allows on the timeline (alltoall: a transfer in flight during the block before it; allgather:
// the gather during the diagonal block only), activations divided by cp, tokens/s per GPU over tp x cp, and the
// 128K-token search on 64 H100s that picks CP where TP alone runs out of memory.
#include <catch2/catch.hpp>

#include "plans/lower/lower.h"
#include "sim/check/baseline.h"
#include "sim/check/compare.h"
#include "sim/cost/comm_cost.h"
#include "sim/memory.h"
#include "sim/report/explain.h"
#include "sim/report/html_report.h"
#include "sim/report/trace.h"
#include "sim/search/search.h"
#include "sim/simulate.h"
#include "sim/timeline/timeline.h"
#include "tests/fixtures.h"

using namespace tptune;

namespace {

Program lower_cp(PlanToggles t, int64_t seq, Model m = test::small_model(4)) {
  return lower(m, Training{.seq_len = seq}, test::make_plan("sequence_parallel", t));
}

// The timeline entry of the first op named `name` in segment `kind`, instance 0.
OpTime time_of(const Program& p, const Timeline& tl, SegmentKind kind, const std::string& name) {
  for (size_t s = 0; s < p.segments.size(); ++s) {
    if (p.segments[s].kind != kind) continue;
    for (const Op& op : p.segments[s].ops)
      if (op.name == name) return tl.segments[s].time(0, op.id);
  }
  FAIL("no op " << name);
  return {};
}

}  // namespace

TEST_CASE("context parallel: the cp group is cp ranks with stride tp, in a node when cp x tp fits", "[cp][layout]") {
  const ClusterSpec c = test::cluster_of("h100-sxm", 2);
  // tp 2 x cp 4 = 8: one node, 4 members.
  GroupLayout g = group_layout(c, Group::cp, 2, 4, 1, 4);
  CHECK(g.size == 4);
  CHECK(g.per_node == 4);
  CHECK_FALSE(g.spans_nodes());
  // tp 4 x cp 4 = 16 on nodes of 8: 2 members per node, 2 nodes.
  g = group_layout(c, Group::cp, 4, 4, 1, 4);
  CHECK(g.per_node == 2);
  CHECK(g.nodes == 2);
  // FSDP's group is dp_shard x cp: tp 2 x dp (= dp_shard 2 x cp 4 = 8): 4 per node over 2 nodes.
  g = group_layout(c, Group::dp, 2, 8, 1, 4);
  CHECK(g.size == 8);
  CHECK(g.nodes == 2);
}

TEST_CASE("context parallel: ring transfers priced on the cp group's links", "[cp][comm]") {
  const CostParams& P = default_cost_params();
  const ClusterSpec c = test::cluster_of("h100-sxm", 2);
  // A K/V buffer of 128 MiB passed to the next rank inside a node: p2p latency + bytes / (NVLink 450 GB/s x p2p
  // efficiency) = 5 + 134217728 / (450e9 x 0.8) x 1e6 = 5 + 372.83 = 377.83 us.
  const double S = 134217728;
  const double in_node =
      collective_cost(CollectiveKind::p2p, 134217728, group_layout(c, Group::cp, 1, 8, 1, 8), c, P).time_us;
  CHECK(in_node == Approx(P.p2p_latency_us + S / (450e9 * P.p2p_bandwidth_efficiency) * 1e6));
  CHECK(in_node == Approx(377.83).epsilon(1e-4));
  // The same ring across nodes (tp 8 x cp 2): the slowest hop is the NIC, 50 GB/s: about 9x longer.
  const double across =
      collective_cost(CollectiveKind::p2p, 134217728, group_layout(c, Group::cp, 8, 2, 1, 2), c, P).time_us;
  CHECK(across ==
        Approx(P.p2p_latency_us + S / (50e9 * P.p2p_bandwidth_efficiency * P.network_busbw_efficiency) * 1e6));
}

TEST_CASE("context parallel: what overlaps on the timeline, per rotate method", "[cp][timeline]") {
  const ClusterSpec cl = test::cluster_of("h100-sxm", 1);
  const CostParams& P = default_cost_params();
  // alltoall, cp 4: the p2p of step 1 runs while block 0 computes; block 1 starts once it has arrived.
  {
    const Program p = lower_cp({.dp_shard = 2, .cp_degree = 4, .cp_rotate = CpRotate::alltoall}, 16384);
    const Timeline tl = schedule(p, cost_ops(p, cl, P), P);
    const OpTime x1 = time_of(p, tl, SegmentKind::block_fwd, "attention.ring.fwd.p2p.1");
    const OpTime b0 = time_of(p, tl, SegmentKind::block_fwd, "attention.core.fwd");
    const OpTime b1 = time_of(p, tl, SegmentKind::block_fwd, "attention.core.fwd.1");
    CHECK(x1.start <= b0.start);  // issued before the block
    CHECK(x1.end > b0.start);     // in flight while it computes
    CHECK(b1.start >= x1.end);
    CHECK(b1.start >= b0.end);
  }
  // allgather: one gather, issued before the diagonal block; every later block waits for all of it.
  {
    const Program p = lower_cp({.dp_shard = 2, .cp_degree = 4}, 16384);
    const Timeline tl = schedule(p, cost_ops(p, cl, P), P);
    const OpTime g = time_of(p, tl, SegmentKind::block_fwd, "attention.ring.fwd.all_gather");
    const OpTime b0 = time_of(p, tl, SegmentKind::block_fwd, "attention.core.fwd");
    const OpTime b1 = time_of(p, tl, SegmentKind::block_fwd, "attention.core.fwd.1");
    CHECK(g.end > b0.start);
    CHECK(b1.start >= g.end);
    CHECK(b1.start >= b0.end);
    const StepReport r = simulate(p, cl, P);
    CHECK(r.cp_comm_busy_ms > 0);
    CHECK(r.tp_comm_busy_ms == 0);  // tp 1
  }
}

TEST_CASE("context parallel: the trace and the HTML timeline have a cp lane", "[cp][report]") {
  const ClusterSpec cl = test::cluster_of("h100-sxm", 1);
  const CostParams& P = default_cost_params();
  const Program p = lower_cp({.tp_degree = 2, .dp_shard = 2, .cp_degree = 2, .cp_rotate = CpRotate::alltoall}, 4096);
  const OpCosts oc = cost_ops(p, cl, P);
  const Timeline tl = schedule(p, oc, P);
  // Five lanes: compute, TP, DP, DP replicate (empty here) and CP, named as the streams are.
  const std::string svg = html_block_timeline(p, oc, tl);
  CHECK(svg.find("CP comm") != std::string::npos);
  const nlohmann::json trace = chrome_trace(p, oc, tl);
  bool cp_track = false;
  for (const auto& e : trace["traceEvents"]) cp_track |= e["name"] == "thread_name" && e["args"]["name"] == "cp comm";
  CHECK(cp_track);
}

TEST_CASE("context parallel: tp-plan check records cp and notices a baseline of another degree", "[cp][check]") {
  const ClusterSpec cl = test::cluster_of("h100-sxm", 1);
  const CostParams& P = default_cost_params();
  auto baseline = [&](PlanToggles t) { return baseline_from_report(simulate(lower_cp(t, 4096), cl, P)); };
  const CheckBaseline plain = baseline({.tp_degree = 2, .dp_shard = 4});
  const CheckBaseline cp2 = baseline({.tp_degree = 2, .dp_shard = 2, .cp_degree = 2});
  const CheckBaseline ring = baseline({.tp_degree = 2, .dp_shard = 2, .cp_degree = 2, .cp_rotate = CpRotate::alltoall});
  CHECK_FALSE(plain.setup.count("cp"));  // baselines of plans without CP read as before
  CHECK(cp2.setup.at("cp") == "2 (rotate allgather, load balance on)");
  CHECK(compare(plain, cp2, {0.5, 0.5}).setup_changes ==
        std::vector<std::string>{"dp 4 -> 2", "cp 1 -> 2 (rotate allgather, load balance on)"});
  CHECK(compare(cp2, ring, {0.5, 0.5}).setup_changes ==
        std::vector<std::string>{"cp 2 (rotate allgather, load balance on) -> 2 (rotate alltoall, load balance on)"});
  CHECK(compare(cp2, cp2, {0.5, 0.5}).setup_changes.empty());
}

TEST_CASE("context parallel: activations / cp, tokens per GPU over tp x cp", "[cp][memory]") {
  const ClusterSpec cl = test::cluster_of("h100-sxm", 1);
  const CostParams& P = default_cost_params();
  const GpuSpec& gpu = cl.gpu;
  // The same sequence, 8192 tokens, on one rank and split over 4: what a block saves for backward is a quarter.
  const MemoryReport one = memory_model(lower_cp({.dp_shard = 8}, 8192), gpu, P);
  const MemoryReport four = memory_model(lower_cp({.dp_shard = 2, .cp_degree = 4}, 8192), gpu, P);
  CHECK(four.saved_per_block == Approx(one.saved_per_block / 4));
  CHECK(four.activations == Approx(one.activations / 4));
  // Model states: FSDP over dp_shard 2 x cp 4 = 8 ranks, as over dp_shard 8.
  CHECK(four.model_states() == one.model_states());
  // Tokens/s per GPU: a step moves b x seq tokens through tp x cp GPUs: 1 x 8192 / (1 x 4) per GPU per step.
  const Program p = lower_cp({.dp_shard = 2, .cp_degree = 4}, 8192);
  const StepReport r = simulate(p, cl, P);
  CHECK(r.tokens_per_second_per_gpu == Approx(8192.0 / 4 / (r.step_time_ms * 1e-3)));
  CHECK(r.cp_degree == 4);
  CHECK(r.dp_shard == 2);
}

TEST_CASE("context parallel: at 128K tokens on 64 H100s the search picks CP where TP alone runs out of memory",
          "[cp][search]") {
  Config cfg = test::example_config("llama3-70b-128k-cp.yaml");
  SearchOptions o;
  o.threads = 2;
  const SearchResult r = search(cfg, o);
  REQUIRE(r.winner());
  const Candidate& w = r.winner()->candidate;
  CHECK(w.cp_degree > 1);
  // TP alone at the winner's activation checkpointing runs out of memory: one TP group holds a whole 131072-token
  // sequence. The TP-only plans that fit (full AC, recomputing every block) are slower than the winner.
  size_t tp_only_at_policy = 0;
  for (const CandidateResult& c : r.results) {
    if (c.candidate.cp_degree != 1) continue;
    if (c.candidate.activation_checkpointing == w.activation_checkpointing) {
      ++tp_only_at_policy;
      CHECK(c.pruned == PruneReason::memory);
    } else if (c.feasible()) {
      CHECK(c.report.tokens_per_second_per_gpu < r.winner()->report.tokens_per_second_per_gpu);
    }
  }
  CHECK(tp_only_at_policy > 0);
  // explain of the winner lists the ring's transfers on the cp group, and its memory fits.
  Plan plan = candidate_plan(r.space, w);
  Config at = cfg;
  at.training = candidate_training(cfg.training, w);
  const Program p = lower(at.model, at.training, plan);
  const nlohmann::json j = explain_json(p);
  CHECK(j["cp_degree"] == w.cp_degree);
  CHECK(j["per_step"]["cp"]["count"].get<int64_t>() > 0);
  CHECK(r.winner()->report.memory.fits);
}

TEST_CASE("context parallelism: a mesh past the cluster names cp and the dp_shard given", "[cp][simulate]") {
  // Issue 37: tp 1, cp 2, dp_shard 4 on 4 GPUs said "tp 1 x dp_shard 8 = 8 GPUs" (FSDP's group, dp_shard x cp).
  Program p = lower_cp({.tp_degree = 1, .dp_shard = 4, .cp_degree = 2}, 256);
  p.plan.provenance["dp_shard"] = "option --dp-shard";
  const ClusterSpec four = make_cluster(gpu_preset("h100-sxm"), 1, 4);
  CHECK_THROWS_WITH(check_supported(p, four),
                    p.plan.source +
                        ": tp 1 x dp_shard 4 x cp 2 = 8 GPUs, but the cluster has 4 (1 nodes x 4): lower dp_shard "
                        "(option --dp-shard)");
  // A pipeline's Program counts its pp ranks in: pp 2 of the same mesh needs 16.
  p.plan.pp_degree = 2;
  CHECK_THROWS_WITH(check_supported(p, make_cluster(gpu_preset("h100-sxm"), 1, 8)),
                    Catch::Matchers::Contains("tp 1 x dp_shard 4 x cp 2 x pp 2 = 16 GPUs, but the cluster has 8"));
  p.plan.pp_degree = 1;
  CHECK_NOTHROW(check_supported(p, make_cluster(gpu_preset("h100-sxm"), 1, 8)));
}
