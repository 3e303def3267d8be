// What CPU ranks add to calibration: ranks that outnumber the cores (oversubscribed_efficiency from the gemm bench's
// sweeps, and the per-op rows such a bench must not feed), measured collective curves kept point by point, and their
// file format. Expected values are worked out in the comments.
#include <catch2/catch.hpp>
#include <functional>

#include "plans/language/config.h"
#include "plans/language/plan.h"
#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "sim/calibrate/calibration.h"
#include "sim/calibrate/fit.h"
#include "sim/cluster_spec.h"
#include "sim/cost/comm_cost.h"
#include "sim/cost/cost_param_fields.h"
#include "sim/shared_machine.h"
#include "sim/simulate.h"
#include "tests/error_text.h"

using namespace tptune;
using nlohmann::json;
using tptune::test::error_of;

namespace {

// A gemm bench on `ranks` ranks of a `cores`-core machine: four shapes whose per-op medians are `per_op_us` each, and
// the sweep (the four back to back) taking `sweep_us`.
json gemm_bench(int ranks, int cores, double per_op_us, double sweep_us) {
  json rs = json::array();
  for (int64_t m : {16, 32, 64, 128})
    rs.push_back({{"m", m},
                  {"n", 64},
                  {"k", 64},
                  {"dtype", "fp32"},
                  {"b_dtype", "fp32"},
                  {"c_dtype", "fp32"},
                  {"time_us", {{"median", per_op_us * static_cast<double>(m) / 16}}}});
  return {{"format", "tptune-bench"},
          {"version", 1},
          {"bench", "gemm"},
          {"environment",
           {{"backend", "cpu"},
            {"device", "test cpu"},
            {"threads_per_rank", 1},
            {"ranks", ranks},
            {"cores", cores},
            {"libraries", {{"eigen", "3.4.0"}}}}},
          {"results", rs},
          {"sweep", {{"gemms", 4}, {"time_us", {{"median", sweep_us}}}}}};
}

double fitted(const Calibration& cal, const std::string& name) {
  for (const auto& p : cal.params)
    if (p.name == name) return p.value;
  FAIL("parameter " << name << " was not fitted");
  return 0;
}

}  // namespace

TEST_CASE("oversubscribed_efficiency: the sweep at 4 ranks on 2 cores against the sweep alone") {
  // Alone (1 rank): the sweep takes 10 ms. 4 ranks on 2 cores, each at concurrent_rank_rate (cpu preset 0.7, not
  // refitted: no profiles here) x 2/4 x efficiency of its rate alone: 10 / (0.7 x 0.5 x e) = 35 ms gives e =
  // 10 / 35 x 1 x 4 / (0.7 x 2) = 0.8163.
  const std::vector<Measurements> ms{parse_measurements(gemm_bench(1, 2, 10, 10000), "alone.json"),
                                     parse_measurements(gemm_bench(4, 2, 10, 35000), "four.json")};
  CHECK(oversubscribed(ms[1]));
  CHECK_FALSE(oversubscribed(ms[0]));
  const Calibration cal = fit_calibration(ms, gpu_preset("cpu"), {});
  CHECK(fitted(cal, "oversubscribed_efficiency") == Approx(10.0 / 35 * 4 / (0.7 * 2)).epsilon(1e-9));
  // A sweep shorter than the scheduler's slices (under 10 ms) shows no turns and is not used.
  const Calibration short_sweep =
      fit_calibration({ms[0], parse_measurements(gemm_bench(4, 2, 10, 3500), "short.json")}, gpu_preset("cpu"), {});
  for (const auto& p : short_sweep.params) CHECK(p.name != "oversubscribed_efficiency");
  // The oversubscribed bench's per-op rows (here 10x slower: ranks waiting for a core inside the timed call) are
  // not fitted: the GEMM efficiency is the one bench alone gives. Refitting without the 4-rank file must agree.
  const Calibration alone = fit_calibration({ms[0]}, gpu_preset("cpu"), {});
  std::vector<Measurements> slow = ms;
  for (auto& o : slow[1].ops) o.time_us *= 10;
  const Calibration with_slow = fit_calibration(slow, gpu_preset("cpu"), {});
  CHECK(fitted(with_slow, "gemm_fp32_efficiency") == fitted(alone, "gemm_fp32_efficiency"));
  CHECK(fitted(with_slow, "gemm_overhead_us") == fitted(alone, "gemm_overhead_us"));

  // Ranks sharing a machine run at concurrent_rank_rate of the device's rates, whatever the timing.
  CostParams c = device_cost_params(gpu_preset("cpu"));
  c.concurrent_rank_rate = 0.8;
  c.oversubscribed_efficiency = 0.9;
  const double peak = gpu_preset("cpu").fp32_tflops;
  const ClusterSpec four = measurement_cluster(gpu_preset("cpu"), ms[1]),
                    one = measurement_cluster(gpu_preset("cpu"), ms[0]);
  CHECK(four.gpus_per_node == 4);
  CHECK(four.cores_per_node == 2);
  CHECK(one.cores_per_node == 0);
  CHECK(at_shared_rates(four, c).gpu.fp32_tflops == Approx(peak * 0.8));
  CHECK(at_shared_rates(one, c).gpu.fp32_tflops == Approx(peak));
  // 4 ranks on 2 cores at efficiency 0.9: every compute op of an overlapped step takes 4 / (2 x 0.9) = 2.2222x.
  CHECK(oversubscription_slowdown(four, c) == Approx(4.0 / (2 * 0.9)));
  CHECK(oversubscription_slowdown(one, c) == 1.0);
}

TEST_CASE("oversubscribed steps: the whole compute op takes its turns, overheads included, collectives as measured") {
  // tiny-llama SP at tp 4 "measured" with 4 ranks on 2 cores.
  const Config cfg = load_config(std::string(TPTUNE_SOURCE_DIR) + "/examples/tiny-llama.yaml");
  Plan plan = preset_plan("sequence_parallel", Plan{});
  plan.tp_degree = 4;
  plan.dp_shard = 1;
  Measurements m;
  m.ranks = 4;
  m.environment = {{"cores", 2}, {"ranks", 4}};
  m.program = lower(cfg.model, cfg.training, plan);
  CostParams c = device_cost_params(gpu_preset("cpu"));
  c.oversubscribed_efficiency = 0.8;
  c.gemm_overhead_us = 50;  // large, so that scaling only the rates would show
  const OpCosts alone = measured_run_costs(*m.program, gpu_preset("cpu"), m, c, Timing::serialized);
  const OpCosts step = measured_run_costs(*m.program, gpu_preset("cpu"), m, c, Timing::overlapped);
  size_t compute = 0, collectives = 0;
  for (size_t s = 0; s < m.program->segments.size(); ++s)
    for (size_t i = 0; i < m.program->segments[s].ops.size(); ++i) {
      const bool collective = std::holds_alternative<CollectiveOp>(m.program->segments[s].ops[i].kind);
      // 4 ranks / (2 cores x 0.8) = 2.5x for compute, 1x for collectives.
      CHECK(step.duration_us[s][i] == Approx(alone.duration_us[s][i] * (collective ? 1.0 : 2.5)));
      ++(collective ? collectives : compute);
    }
  CHECK(compute > 0);
  CHECK(collectives > 0);

  // The same machine as a user describes it: simulate() schedules those durations, as accuracy() does for the
  // profile.
  const Config cpu4 = load_config_string(
      "model: {preset: llama3-8b}\ncluster: {device: cpu, nodes: 1, gpus_per_node: 4, cores_per_node: 2}\n",
      "cpu4.yaml");
  REQUIRE(resolve_cluster(cpu4).cores_per_node == 2);
  CHECK(simulate(*m.program, resolve_cluster(cpu4), c).step_time_ms * 1e3 ==
        Approx(schedule(*m.program, step, c).step_time_us).epsilon(1e-12));
}

TEST_CASE("cluster.cores_per_node: CPU ranks only, in range, file:line errors") {
  auto err = [](const std::string& cluster) {
    return error_of([&] { load_config_string("model: {preset: llama3-8b}\ncluster: " + cluster + "\n", "c.yaml"); });
  };
  CHECK(err("{gpu: h100-sxm, cores_per_node: 2}") ==
        "c.yaml:2: cluster.cores_per_node: expected only with device: cpu (CPU ranks share a node's cores; a GPU is a "
        "device of its own), got device 'h100-sxm'");
  CHECK(err("{device: cpu, gpus_per_node: 4, cores_per_node: 0}") ==
        "c.yaml:2: cluster.cores_per_node: expected an integer in 1..1024, got '0'");
  // As many cores as ranks or more: no turns.
  const Config c = load_config_string(
      "model: {preset: llama3-8b}\ncluster: {device: cpu, gpus_per_node: 2, cores_per_node: 8}\n", "c.yaml");
  CHECK(oversubscription_slowdown(resolve_cluster(c), CostParams{}) == 1.0);
}

TEST_CASE("oversubscribed_efficiency: not fitted without a reference sweep of the same shapes") {
  json other = gemm_bench(1, 2, 10, 10000);
  other["results"][0]["m"] = 8;  // another shape list
  const std::vector<Measurements> ms{parse_measurements(other, "alone.json"),
                                     parse_measurements(gemm_bench(4, 2, 10, 35000), "four.json")};
  const Calibration cal = fit_calibration(ms, gpu_preset("cpu"), {});
  for (const auto& p : cal.params) CHECK(p.name != "oversubscribed_efficiency");
}

TEST_CASE("bench files: a sweep that does not cover the results is refused") {
  json j = gemm_bench(1, 2, 10, 1000);
  j["sweep"]["gemms"] = 3;
  CHECK(error_of([&] { parse_measurements(j, "g.json"); }) == "g.json: sweep.gemms: expected 4 (one per result)");
  j["sweep"] = {{"gemms", 4}, {"time_us", {{"median", -1}}}};
  CHECK(error_of([&] { parse_measurements(j, "g.json"); }) ==
        "g.json: sweep.time_us.median: expected a non-negative number, got -1");
}

TEST_CASE("measured collective points: interpolated in the size, the line beyond") {
  MeasuredCollective m{CollectiveKind::all_reduce, 4, 10, 2.0, {{8, 4}, {16, 6}, {1024, 100}}};
  CHECK(m.time_us(CollectiveKind::all_reduce, 4) == 4);  // below the first size: the first time
  CHECK(m.time_us(CollectiveKind::all_reduce, 8) == 4);
  CHECK(m.time_us(CollectiveKind::all_reduce, 12) == 5);    // halfway between 8 and 16: (4 + 6) / 2
  CHECK(m.time_us(CollectiveKind::all_reduce, 520) == 53);  // 6 + 94 x (520 - 16) / (1024 - 16) = 6 + 47
  CHECK(m.time_us(CollectiveKind::all_reduce, 1024) == 100);
  // Above the last: alpha + S x bus factor / busbw = 10 us + 2048 B x 2 (4 - 1) / 4 / 2 GB/s = 10 + 1.536 us.
  CHECK(m.time_us(CollectiveKind::all_reduce, 2048) == Approx(11.536));
  // collective_cost uses it for a group of that size inside a node.
  CostParams c;
  c.measured_collectives = {m};
  const ClusterSpec cl = make_cluster(gpu_preset("cpu"), 1, 4);
  CHECK(collective_cost(CollectiveKind::all_reduce, 12, {4, 4, 1}, cl, c).time_us == 5);
  // In a step (collective_step_factor 1.6): 5 us x 1.6 = 8 us. The analytic model of a GPU ignores the factor.
  c.collective_step_factor = 1.6;
  CHECK(collective_cost(CollectiveKind::all_reduce, 12, {4, 4, 1}, cl, c).time_us == Approx(8.0));
  CostParams gpu;
  gpu.collective_step_factor = 1.6;
  const ClusterSpec h100 = make_cluster(gpu_preset("h100-sxm"), 1, 8);
  CHECK(collective_cost(CollectiveKind::all_reduce, 1 << 20, {8, 8, 1}, h100, gpu).time_us ==
        collective_cost(CollectiveKind::all_reduce, 1 << 20, {8, 8, 1}, h100, CostParams{}).time_us);
}

TEST_CASE("calibrate keeps the measured median at each size of a collective") {
  json rs = json::array();
  // Two samples at 1 KiB (10 and 14 us: median 12) and one at 4 KiB (20 us).
  for (auto [bytes, us] : {std::pair{1024, 10.0}, {1024, 14.0}, {4096, 20.0}})
    rs.push_back({{"collective", "all_gather"}, {"ranks", 2}, {"bytes", bytes}, {"time_us", {{"median", us}}}});
  json j = {{"format", "tptune-bench"},
            {"version", 1},
            {"bench", "collectives"},
            {"environment",
             {{"backend", "cpu"}, {"device", "test cpu"}, {"threads_per_rank", 1}, {"ranks", 2}, {"cores", 2}}},
            {"results", rs}};
  const Calibration cal = fit_calibration({parse_measurements(j, "c.json")}, gpu_preset("cpu"), {});
  REQUIRE(cal.collectives.size() == 1);
  const auto& pts = cal.collectives[0].curve.points;
  REQUIRE(pts.size() == 2);
  CHECK(pts[0] == std::array<double, 2>{1024, 12});
  CHECK(pts[1] == std::array<double, 2>{4096, 20});

  // The file keeps them: save -> load gives the same points.
  const std::string path = std::string(TPTUNE_BINARY_DIR) + "/calibrate_points.yaml";
  save_calibration(cal, path);
  CHECK(load_calibration(path).collectives[0].curve.points == pts);
}

TEST_CASE("calibration files: bad collective points get one-line file:line errors") {
  auto err = [](const std::string& points) {
    return error_of([&] {
      parse_calibration(
          "format: tptune-calibration\nversion: 1\ndevice: cpu\ncollectives:\n  - {collective: "
          "all_reduce, ranks: 2, alpha_us: 1, busbw_GBps: 3, points: " +
              points + "}\n",
          "c.yaml");
    });
  };
  CHECK(err("[[8, 4], [16, 6]]") == "(no error)");
  CHECK(err("[[16, 4], [8, 6]]") ==
        "c.yaml:5: collectives[0].points[1][0]: expected a size in bytes from 1 to 1e15, larger than the previous "
        "point's, got 8");
  CHECK(err("[[8, -4]]") == "c.yaml:5: collectives[0].points[0][1]: expected a time of 0 .. 1e9 us, got -4");
  CHECK(err("[[8]]") == "c.yaml:5: collectives[0].points[0]: expected a [bytes, us] pair, got a list");
  CHECK(err("7").find("c.yaml:5: collectives[0].points: expected a list of [bytes, us] pairs") == 0);
}

TEST_CASE("cpu device: collectives do not overlap compute, GPU presets keep the overlap") {
  CHECK(device_cost_params(gpu_preset("cpu")).comm_overlaps_compute == 0);
  for (const char* gpu : {"h100-sxm", "h200", "a100-sxm-80gb", "b200"})
    CHECK(device_cost_params(gpu_preset(gpu)).comm_overlaps_compute == 1);
}
