#pragma once
// Synthetic profiles for the calibration and measurement tests (tests/sim/calibrate_test.cc,
// tests/sim/profile_measurements_test.cc): tiny-llama's Programs with op records as tp-run profile writes them (one
// per op of expand(), in execution order) and times from a CostParams, so that a fit has a known answer.
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "plans/language/config.h"
#include "plans/language/plan.h"
#include "plans/lower/lower.h"
#include "plans/program/program_identity.h"
#include "sim/calibrate/fit.h"
#include "sim/calibrate/measurements.h"
#include "sim/cost/compute_cost.h"
#include "sim/shared_machine.h"
#include "sim/simulate.h"
#include "sim/timeline/timeline.h"

namespace tptune::test::synthetic {

using nlohmann::json;

inline std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

inline json environment(const std::string& eigen = "3.4.0") {
  return {{"backend", "cpu"},
          {"device", "test cpu"},
          {"threads_per_rank", 1},
          {"ranks", 2},
          {"libraries", {{"eigen", eigen}, {"mpi", "test mpi"}}}};
}

// The parameters the synthetic measurements are made from (far from the cpu defaults, so that a fit that returned
// the defaults would fail).
inline CostParams truth() {
  CostParams c = device_cost_params(gpu_preset("cpu"));
  c.gemm_efficiency = c.gemm_fp32_efficiency = c.gemm_fp8_efficiency = 0.3;
  c.gemm_k_overhead = 64;
  c.gemm_overhead_us = 3;
  c.attention_fwd_efficiency = 0.05;
  c.attention_bwd_efficiency = 0.03;
  c.attention_overhead_us = 2;
  c.attention_fwd_score_ns = 4;
  c.attention_bwd_score_ns = 6;
  c.memory_bound_efficiency = 0.2;
  c.fp8_cast_traffic_factor = 20;
  c.norm_traffic_factor = c.norm_bwd_traffic_factor = 2.5;  // one column for both passes (sim/calibrate/fit.cc)
  c.loss_traffic_factor = 12;
  c.memory_bound_overhead_us = 1.5;
  c.optimizer_overhead_us = 0.7;
  c.optimizer_traffic_factor = 5;
  c.concurrent_rank_rate = 0.6;
  c.measured_collectives = {{CollectiveKind::all_reduce, 2, 12, 0.7},
                            {CollectiveKind::all_gather, 2, 9, 1.1},
                            {CollectiveKind::reduce_scatter, 2, 10, 0.9}};
  return c;
}

// Deterministic +-`noise` relative perturbation of sample i.
inline double jitter(size_t i, double noise) { return 1.0 + noise * std::sin(1.7 * static_cast<double>(i) + 0.3); }

// The segment that holds template op `op`.
inline const Segment& segment_of(const Program& p, const Op& op) {
  for (const Segment& s : p.segments)
    if (!s.ops.empty() && &op >= &s.ops.front() && &op <= &s.ops.back()) return s;
  FAIL("an op outside the Program's segments");
  throw 0;
}

// Op records as tp-run profile writes them: one per op of expand(p), in execution order, op i timed time_us(op, i).
inline json op_records(const Program& p, const std::function<double(const Op&, size_t)>& time_us) {
  const FlatProgram flat = expand(p);
  json ops = json::array();
  for (size_t i = 0; i < flat.ops.size(); ++i) {
    const FlatOp& f = flat.ops[i];
    ops.push_back({{"name", f.name},
                   {"segment", to_string(segment_of(p, *f.op).kind)},
                   {"layer", f.layer},
                   {"template_op", f.op->id},
                   {"kind", std::string(kind_name(f.op->kind))},
                   {"time_us", {{"median", time_us(*f.op, i)}}}});
  }
  return ops;
}

// A profile's "program" as tp-run profile writes it: what it is a profile of, and the YAML that lowers it again.
inline json program_of(const Program& p, const std::string& cfg_text, const Plan& plan) {
  json j = program_identity(p);
  j["config_yaml"] = cfg_text;
  j["plan_yaml"] = plan_to_yaml(plan);
  return j;
}

// Variants of tiny-llama (head dim 8) for the synthetic profiles.
struct Variant {
  int n_heads = 8, n_kv_heads = 4;  // head dim 64 / n_heads
  bool float8 = false;              // float8 tensorwise
  int tp = 2;
};

// A profile of tiny-llama's `preset` plan at tp 2 whose op times are the model's under `c` (times jitter).
inline json synthetic_profile(const std::string& preset, const CostParams& c, double noise, int64_t batch = 2,
                              Variant v = {}) {
  std::string cfg_text = read_text(std::string(TPTUNE_SOURCE_DIR) + "/examples/tiny-llama.yaml");
  auto replace = [&](const std::string& from, const std::string& to) {
    const size_t at = cfg_text.find(from);
    REQUIRE(at != std::string::npos);
    cfg_text.replace(at, from.size(), to);
  };
  replace("n_heads: 8 ", fmt::format("n_heads: {} ", v.n_heads));
  replace("n_kv_heads: 4 ", fmt::format("n_kv_heads: {} ", v.n_kv_heads));
  Config cfg = load_config_string(cfg_text);
  Plan base;
  base.tp_degree = v.tp;
  base.dp_shard = 1;
  base.local_batch_size = batch;
  base.loss_parallel = preset == "sequence_parallel";
  if (v.float8) base.float8 = Float8Recipe::tensorwise;
  Plan plan = preset_plan(preset, base);
  Program p = lower(cfg.model, cfg.training, plan);
  json env = environment();
  env["ranks"] = v.tp;
  // The cluster the measurement "ran" on: ranks sharing a machine run at c.concurrent_rank_rate (fit.h).
  Measurements shell;
  shell.ranks = v.tp;
  shell.environment = env;
  const ClusterSpec ran_on = measurement_cluster(gpu_preset("cpu"), shell);
  const ClusterSpec cl = at_shared_rates(ran_on, c);  // one op's rates (cost_ops() applies them itself)
  const OpCosts costs = cost_ops(p, ran_on, c);
  return {
      {"format", "tptune-profile"},
      {"version", 1},
      {"environment", env},
      {"program", program_of(p, cfg_text, plan)},
      {"ops", op_records(p, [&](const Op& op, size_t i) { return op_duration_us(op, p, cl, c) * jitter(i, noise); })},
      {"step_wall_us", {{"median", schedule(p, costs, c).step_time_us}}}};
}

}  // namespace tptune::test::synthetic
