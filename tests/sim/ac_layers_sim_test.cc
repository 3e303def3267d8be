// A plan's ac_layers in the simulator: the fast schedule against the expanded one on split Programs of the example
// configs, the memory model's two kinds of block, and the monotonicity of step time and peak memory in k.
#include <catch2/catch.hpp>
#include <set>

#include "plans/language/config.h"
#include "plans/lower/lower.h"
#include "sim/cluster_spec.h"
#include "sim/cost/cost_params.h"
#include "sim/memory.h"
#include "sim/report/step_report.h"
#include "sim/simulate.h"
#include "sim/timeline/timeline.h"
#include "tests/fixtures.h"

using namespace tptune;

namespace {

// The example's cluster at tp = gpus per node, dp_shard the rest; loss parallel with sequence parallel.
Program lower_k(const Config& cfg, const char* preset, ActivationCheckpointing ac, int64_t k) {
  const int tp = cfg.cluster.gpus_per_node;
  return lower(cfg.model, cfg.training,
               test::make_plan(preset, {.tp_degree = tp,
                                        .dp_shard = cfg.cluster.world_size() / tp,
                                        .loss_parallel = std::string(preset) == "sequence_parallel",
                                        .activation_checkpointing = ac,
                                        .ac_layers = k,
                                        .local_batch_size = cfg.training.local_batch_size}));
}

}  // namespace

TEST_CASE("ac_layers: the fast schedule equals the expanded one on split Programs of the examples") {
  for (const char* file : {"tiny-llama.yaml", "llama3-8b-h100.yaml"}) {
    const Config cfg = test::example_config(file);
    const ClusterSpec cl = resolve_cluster(cfg);
    const int64_t L = cfg.model.n_layers;
    for (const char* preset : {"sequence_parallel", "vanilla"})
      for (auto ac : {ActivationCheckpointing::full, ActivationCheckpointing::selective})
        for (int64_t k : {int64_t{1}, L / 2, L - 1}) {
          if (k < 1) continue;
          INFO(file << " " << preset << " " << to_string(ac) << " k " << k);
          const Program p = lower_k(cfg, preset, ac, k);
          const CostParams& c = default_cost_params();
          const OpCosts oc = cost_ops(p, cl, c);
          const Timeline fast = schedule(p, oc, c), ref = schedule_expanded(p, oc, c);
          REQUIRE(fast.segments.size() == ref.segments.size());
          for (size_t s = 0; s < fast.segments.size(); ++s) {
            REQUIRE(fast.segments[s].instances == ref.segments[s].instances);
            for (int i = 0; i < fast.segments[s].instances; ++i)
              for (int j = 0; j < fast.segments[s].ops; ++j) {
                INFO("segment " << s << " instance " << i << " op " << j);
                REQUIRE(fast.segments[s].time(i, j).start == Approx(ref.segments[s].time(i, j).start).margin(1e-6));
                REQUIRE(fast.segments[s].time(i, j).end == Approx(ref.segments[s].time(i, j).end).margin(1e-6));
              }
          }
          CHECK(fast.step_time_us == Approx(ref.step_time_us).margin(1e-6));
        }
  }
}

TEST_CASE("ac_layers: activations are (L-k) blocks without AC plus k checkpointed blocks, the peak falls with k") {
  const Config cfg = test::example_config("llama3-8b-h100.yaml");
  const ClusterSpec cl = resolve_cluster(cfg);
  const CostParams& c = default_cost_params();
  const int64_t L = cfg.model.n_layers;
  const MemoryReport none =
      memory_model(lower_k(cfg, "sequence_parallel", ActivationCheckpointing::none, 0), cl.gpu, c);
  const MemoryReport full =
      memory_model(lower_k(cfg, "sequence_parallel", ActivationCheckpointing::full, 0), cl.gpu, c);
  // k = 0 checkpoints every block (as k = L); the others from none (k "= 0 blocks") down to full.
  CHECK(memory_model(lower_k(cfg, "sequence_parallel", ActivationCheckpointing::full, 0), cl.gpu, c).peak == full.peak);
  double last_peak = none.peak;
  for (int64_t k = 1; k <= L; ++k) {
    INFO("k " << k);
    const MemoryReport m = memory_model(lower_k(cfg, "sequence_parallel", ActivationCheckpointing::full, k), cl.gpu, c);
    if (k > 0 && k < L) {
      CHECK(m.checkpointed_blocks == k);
      CHECK(m.saved_per_block == none.saved_per_block);
      CHECK(m.saved_per_checkpointed_block == full.saved_per_block);
      // Byte counts are integers held in doubles far below 2^53: the sum is exact.
      CHECK(m.activations ==
            static_cast<double>(L - k) * none.saved_per_block + static_cast<double>(k) * full.saved_per_block);
    }
    CHECK(m.peak <= last_peak);
    last_peak = m.peak;
  }
  CHECK(last_peak == full.peak);
}

TEST_CASE("ac_layers: step time grows with the checkpointed blocks, k = L is full AC on every block") {
  const Config cfg = test::example_config("llama3-8b-h100.yaml");
  const ClusterSpec cl = resolve_cluster(cfg);
  const CostParams& c = default_cost_params();
  const int64_t L = cfg.model.n_layers;
  const double plain =
      simulate(lower_k(cfg, "sequence_parallel", ActivationCheckpointing::none, 0), cl, c).step_time_ms;
  const double every =
      simulate(lower_k(cfg, "sequence_parallel", ActivationCheckpointing::full, 0), cl, c).step_time_ms;
  double last = plain;
  for (int64_t k = 1; k <= L; ++k) {
    INFO("k " << k);
    const double t = simulate(lower_k(cfg, "sequence_parallel", ActivationCheckpointing::full, k), cl, c).step_time_ms;
    CHECK(t >= last);
    last = t;
  }
  CHECK(last == every);
}

TEST_CASE("ac_layers: simulate's text and JSON name the checkpointed blocks, top ops count both block backwards") {
  const Config cfg = test::example_config("llama3-8b-h100.yaml");
  const ClusterSpec cl = resolve_cluster(cfg);
  const StepReport r =
      simulate(lower_k(cfg, "sequence_parallel", ActivationCheckpointing::full, 16), cl, default_cost_params());
  const std::string text = report_text(r);
  CHECK_THAT(text, Catch::Contains("activation checkpointing full on the first 16 of 32 blocks"));
  CHECK_THAT(text,
             Catch::Contains("saved per block without AC x 16") && Catch::Contains("per checkpointed block x 16"));
  const nlohmann::json j = report_json(r);
  CHECK(j["plan"]["ac_layers"] == 16);
  CHECK(j["memory_gib"]["checkpointed_blocks"] == 16);
  // An op of the block backward is reported once, 32 times per step (16 in each segment), as without the split.
  std::set<std::string> names;
  for (const OpSummary& op : r.top_ops) {
    CHECK(names.insert(op.name).second);
    if (op.name.starts_with("layers.*.") && op.phase == "backward") CHECK(op.count == 32);
  }
  const nlohmann::json every = report_json(
      simulate(lower_k(cfg, "sequence_parallel", ActivationCheckpointing::full, 0), cl, default_cost_params()));
  CHECK(!every["plan"].contains("ac_layers"));
  CHECK(!every["memory_gib"].contains("checkpointed_blocks"));
}
