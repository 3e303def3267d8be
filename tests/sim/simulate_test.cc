// simulate(): the report's conventions (torchtitan's tokens/s and MFU, a breakdown that adds up), its JSON and text
// forms, the Chrome trace, and that it can run on many threads at once.
#include "sim/simulate.h"

#include <catch2/catch.hpp>
#include <set>
#include <thread>

#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "sim/report/step_report.h"
#include "sim/report/trace.h"
#include "tests/fixtures.h"

using namespace tptune;

namespace {}  // namespace

TEST_CASE("report conventions: tokens/s per GPU, MFU, a breakdown that adds up") {
  Program p = test::lower_preset("sequence_parallel", {.tp_degree = 4, .dp_shard = 4, .loss_parallel = true});
  StepReport r = simulate(p, test::cluster_of("h100-sxm", 2), default_cost_params());
  // tokens/s per GPU = local batch 1 x 8192 / (tp 4 x step time).
  CHECK(r.tokens_per_second_per_gpu == Approx(8192.0 / (4 * r.step_time_ms * 1e-3)));
  // MFU = tokens/s x (6 x non-embedding params + 12 x L x H x D x S) / 989 TFLOP/s.
  CHECK(r.mfu == Approx(r.tokens_per_second_per_gpu * p.model.training_flops_per_token(8192) / 989e12));
  CHECK(r.compute_ms + r.exposed_tp_comm_ms + r.exposed_dp_comm_ms == Approx(r.step_time_ms).epsilon(1e-9));
  CHECK(r.exposed_tp_comm_ms <= r.tp_comm_busy_ms + 1e-9);
  CHECK(r.exposed_dp_comm_ms <= r.dp_comm_busy_ms + 1e-9);
  // 32 blocks of forward and backward fit in the step.
  CHECK(r.block_forward_ms > 0);
  CHECK(r.block_backward_ms > r.block_forward_ms);
  CHECK(32 * (r.block_forward_ms + r.block_backward_ms) < r.step_time_ms);
  REQUIRE(!r.top_ops.empty());
  for (size_t i = 1; i < r.top_ops.size(); ++i) CHECK(r.top_ops[i - 1].total_us >= r.top_ops[i].total_us);
  CHECK(r.top_ops[0].name.rfind("layers.*.", 0) == 0);
}

TEST_CASE("JSON report has the documented keys") {
  StepReport r =
      simulate(test::lower_preset("sequence_parallel", {.tp_degree = 8, .dp_shard = 1, .loss_parallel = true}),
               test::cluster_of("h100-sxm", 1), default_cost_params());
  nlohmann::json j = report_json(r);
  for (const char* k : {"step_time_ms", "tokens_per_second_per_gpu", "mfu", "peak_memory_gib", "fits_in_memory",
                        "breakdown_ms", "per_block_ms"})
    CHECK(j.contains(k));
  CHECK(j["step_time_ms"].get<double>() == r.step_time_ms);
  CHECK(j["breakdown_ms"]["compute"].get<double>() == r.compute_ms);
  CHECK(j["breakdown_ms"].contains("exposed_tp_comm"));
  CHECK(j["breakdown_ms"].contains("exposed_dp_comm"));
  CHECK(j["per_block_ms"]["forward"].get<double>() == r.block_forward_ms);
  CHECK(j["per_block_ms"]["backward"].get<double>() == r.block_backward_ms);
  CHECK(j["fits_in_memory"].get<bool>() == r.memory.fits);
  CHECK(j["peak_memory_gib"].get<double>() == Approx(r.memory.peak / 1073741824.0));
}

TEST_CASE("text report: the headline figures, and a plan that does not fit says by how much") {
  StepReport r =
      simulate(test::lower_preset("sequence_parallel", {.tp_degree = 8, .dp_shard = 1, .loss_parallel = true}),
               test::cluster_of("h100-sxm", 1), default_cost_params());
  std::string t = report_text(r);
  CHECK_THAT(t, Catch::Contains("step time"));
  CHECK_THAT(t, Catch::Contains("MFU"));
  CHECK_THAT(t, Catch::Contains("exposed TP communication"));
  CHECK_THAT(t, Catch::Contains("layers.*."));
  // Llama3-70B on one node without FSDP: 70B x 16 B / 8 GPUs of model states alone is ~140 GB.
  Model m;
  REQUIRE(model_preset("llama3-70b", m));
  Plan base;
  base.tp_degree = 8;
  Program big = lower(m, Training{}, preset_plan("sequence_parallel", base));
  StepReport over = simulate(big, test::cluster_of("h100-sxm", 1), default_cost_params());
  CHECK_FALSE(over.memory.fits);
  CHECK_THAT(report_text(over), Catch::Contains("DOES NOT FIT, over by"));
  CHECK(report_json(over)["memory_headroom_gib"].get<double>() < 0);
}

TEST_CASE("simulating a float8 plan on A100 is refused, naming the plan and the GPU") {
  Model m;
  REQUIRE(model_preset("llama3-8b", m));
  Plan base;
  base.tp_degree = 8;
  base.float8 = Float8Recipe::tensorwise;
  Program p = lower(m, Training{}, preset_plan("sequence_parallel", base));
  try {
    simulate(p, make_cluster(gpu_preset("a100-sxm-80gb"), 1, 8), default_cost_params());
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("float8: tensorwise is not supported on a100-sxm-80gb"));
  }
}

TEST_CASE("a mesh larger than the cluster is an error") {
  Program p = test::lower_preset("sequence_parallel", {.tp_degree = 8, .dp_shard = 4, .loss_parallel = true});
  CHECK_THROWS_WITH(simulate(p, test::cluster_of("h100-sxm", 2), default_cost_params()),
                    Catch::Contains("but the cluster has 16"));
}

TEST_CASE("Chrome trace: one track per stream, every op instance named by FQN and phase") {
  Program p =
      test::lower_preset("sequence_parallel", {.tp_degree = 4, .dp_shard = 2, .async_tp = true, .loss_parallel = true},
                         test::llama3_8b(), 2048);
  ClusterSpec c = test::cluster_of("h100-sxm", 1);
  const CostParams& params = default_cost_params();
  OpCosts costs = cost_ops(p, c, params);
  Timeline tl = schedule(p, costs, params);
  nlohmann::json t = chrome_trace(p, costs, tl);
  size_t expected = 0;
  for (const SegmentTimes& s : tl.segments) expected += static_cast<size_t>(s.instances) * s.ops;
  size_t events = 0, copies = 0;
  std::set<int> tids;
  bool saw_layer31 = false, saw_chunk = false, saw_dp = false;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "M") continue;
    ++events;
    copies +=
        e["args"]["kind"] == "fsdp_copy" ? 1 : 0;  // FSDP's copies: slices of their own (sim/timeline/fsdp_copies.h)
    tids.insert(e["tid"].get<int>());
    std::string name = e["name"];
    saw_layer31 |= name == "layers.31.attention.wq.fwd.chunk0";
    saw_chunk |= e["args"].contains("chunk");
    saw_dp |= e["tid"].get<int>() == 2;
    CHECK(e["cat"] == e["args"]["phase"]);
    CHECK(e["dur"].get<double>() >= 0);
  }
  CHECK(events - copies == expected);
  CHECK(copies > 0);  // dp 2
  CHECK(events == static_cast<size_t>(chrome_trace_events(p, costs, tl)));
  CHECK(tids == std::set<int>{0, 1, 2});
  CHECK(saw_layer31);
  CHECK(saw_chunk);
  CHECK(saw_dp);
}

TEST_CASE("simulate is thread-safe: concurrent runs give the sequential results") {
  std::vector<Program> programs = {
      test::lower_preset("sequence_parallel", {.tp_degree = 8, .dp_shard = 1, .loss_parallel = true}),
      test::lower_preset("sequence_parallel", {.tp_degree = 4, .dp_shard = 2, .async_tp = true, .loss_parallel = true}),
      test::lower_preset("sequence_parallel", {.tp_degree = 2, .dp_shard = 4, .loss_parallel = true})};
  ClusterSpec c = test::cluster_of("h100-sxm", 1);
  std::vector<double> expected;
  for (const Program& p : programs) expected.push_back(simulate(p, c, default_cost_params()).step_time_ms);
  std::vector<std::vector<double>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep)
        for (const Program& p : programs)
          got[static_cast<size_t>(t)].push_back(simulate(p, c, default_cost_params()).step_time_ms);
    });
  for (auto& th : threads) th.join();
  for (const auto& g : got)
    for (size_t i = 0; i < g.size(); ++i) CHECK(g[i] == expected[i % programs.size()]);
}
