#include "sim/calibrate/accuracy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "plans/util/error.h"
#include "sim/calibrate/fit.h"
#include "sim/pipeline/step.h"
#include "sim/simulate.h"
#include "sim/timeline/timeline.h"

namespace tptune {

std::optional<double> kendall_tau(const std::vector<double>& a, const std::vector<double>& b) {
  const size_t n = std::min(a.size(), b.size());
  if (n < 2) return std::nullopt;
  double s = 0;
  for (size_t i = 0; i < n; ++i)
    for (size_t j = i + 1; j < n; ++j) {
      const double x = a[i] - a[j], y = b[i] - b[j];
      s += ((x > 0) - (x < 0)) * ((y > 0) - (y < 0));  // +1 concordant, -1 discordant, 0 tied
    }
  return s / (static_cast<double>(n) * (n - 1) / 2);
}

namespace {

std::string plan_label(const Program& p) {
  std::string s = fmt::format("{} tp {}", p.plan.family, p.tp);
  if (p.plan.float8 != Float8Recipe::none) s += fmt::format(" float8 {}", to_string(p.plan.float8));
  if (p.plan.async_tp) s += " async";
  if (p.plan.loss_parallel) s += " loss-parallel";
  s +=
      fmt::format(" [{}d {}L s{} b{}]", p.model.dim, p.model.n_layers, p.training.seq_len, p.training.local_batch_size);
  return s;
}

std::string class_of(const Op& op) {
  if (std::holds_alternative<GemmOp>(op.kind)) return "gemm";
  if (std::holds_alternative<AttentionOp>(op.kind)) return "attention";
  if (std::holds_alternative<CollectiveOp>(op.kind)) return "collective";
  return "memory_bound";
}

// A memory-bound op's kind: the optimizer's updates, else its IR kind (elementwise, embedding, cross_entropy,
// cast_fp8).
std::string memory_kind_of(const Op& op) {
  return op.phase == Phase::optimizer ? std::string("optimizer") : std::string(kind_name(op.kind));
}

void add_error(ClassAccuracy& c, double predicted_us, double measured_us) {
  const double e = (predicted_us - measured_us) / measured_us;
  c.predicted_ms += predicted_us / 1e3;
  c.measured_ms += measured_us / 1e3;
  c.mape = (c.mape * c.samples + std::abs(e)) / (c.samples + 1);
  c.max_error = std::max(c.max_error, std::abs(e));
  ++c.samples;
}

}  // namespace

AccuracyReport accuracy(const std::vector<Measurements>& profiles, const GpuSpec& device, const CostParams& c) {
  AccuracyReport r;
  r.per_op.op_class = "all";
  std::map<std::string, ClassAccuracy> classes, kinds;
  std::vector<double> pred, meas;
  for (const auto& m : profiles) {
    if (!m.program) throw Error(fmt::format("{}: a bench file, not a profile: accuracy compares whole steps", m.path));
    // A single-GPU profile (rank 0's compute at the local shapes of tp N, its collectives not run) has no step: its
    // compute-only step is compared with the serialized sum of its compute ops instead.
    const bool single = m.local_shapes_of_tp > 0;
    if (single && !(m.compute_wall_us > 0))
      throw Error(
          fmt::format("{}: compute_wall_us: missing or 0 (expected the compute-only step time a profile at "
                      "the local shapes of tp {} has)",
                      m.path, m.local_shapes_of_tp));
    if (!single && !(m.step_wall_us > 0))
      throw Error(m.step_wall_us == 0
                      ? fmt::format("{}: step_wall_us: missing or 0 (expected the measured step time: profiles of "
                                    "several ranks from this tp-run version or later have it)",
                                    m.path)
                      : fmt::format("{}: step_wall_us: expected a positive time, got {}", m.path, m.step_wall_us));
    // Nothing measured (every op record 0 or "measured": false): there are no errors to bound, and a --fail-above
    // gate must not pass on it.
    if (std::none_of(m.ops.begin(), m.ops.end(), [](const MeasuredOp& o) { return o.time_us > 0; }))
      throw Error(
          fmt::format("{}: ops: no op has a measured time above 0 ({} timed records, the others not "
                      "measured): nothing to compare",
                      m.path, m.ops.size()));
    const Program& p = *m.program;
    const ClusterSpec cluster = measurement_cluster(device, m);
    // A single-GPU profile's Program is checked and priced on the GPUs it was lowered for (its collectives need their
    // groups), each op as the one process that ran it computes it: no neighbours sharing its rates (as calibrate
    // fits it: measurement_cluster, one rank).
    ClusterSpec lowered_for = cluster;
    CostParams alone = c;
    if (single) {
      lowered_for.gpus_per_node = static_cast<int>(std::min<int64_t>(int64_t{p.tp} * std::max(p.dp, 1), INT32_MAX));
      lowered_for.cores_per_node = 0;
      alone.concurrent_rank_rate = 1;
    }
    check_supported(p, lowered_for);
    StepAccuracy s;
    s.profile = m.path;
    s.plan = plan_label(p);
    s.local_shapes_of_tp = m.local_shapes_of_tp;
    s.unseeded_collectives = m.unseeded_collectives;
    if (single) {
      s.plan += fmt::format(" (local shapes on 1 GPU: compute only)");
    } else if (m.pipeline) {
      // The pipeline's step as tp-plan simulates it, less the optimizer: the profile's steps run none
      // (runtime/pipeline/profile.h).
      const MeasuredPipeline& pl = *m.pipeline;
      const StepReport sr = simulate_pipeline(pl.model, pl.training, pl.plan, cluster, c);
      s.predicted_ms = sr.step_time_ms - sr.pipeline.optimizer_ms;
      s.plan +=
          fmt::format(" pp {} {} mb {}", pl.plan.pp_degree, to_string(pl.plan.pp_schedule), sr.pipeline.microbatches);
      for (size_t k = 0; k < sr.pipeline.ranks.size() && k < pl.rank_end_us.size(); ++k)
        s.pipeline_ranks.push_back({static_cast<int>(k), sr.pipeline.ranks[k].busy_ms, pl.rank_busy_us[k] / 1e3,
                                    sr.pipeline.ranks[k].end_ms, pl.rank_end_us[k] / 1e3});
    } else {
      const OpCosts costs = measured_run_costs(p, device, m, c, Timing::overlapped);
      s.predicted_ms = schedule(p, costs, c).step_time_us / 1e3;
    }
    s.measured_ms = (single ? m.compute_wall_us : m.step_wall_us) / 1e3;
    // Ops timed one at a time: not slowed by oversubscription (sim/calibrate/fit.h).
    const OpCosts op_costs =
        single ? cost_ops(p, lowered_for, alone) : measured_run_costs(p, device, m, c, Timing::serialized);
    double ps = 0, ms = 0, pc = 0, mc = 0;
    for (const auto& o : m.ops) {
      // A pipeline's point-to-point samples are no op of the Program.
      const bool of_program = o.source == MeasuredOp::Source::program;
      const double t =
          of_program ? op_costs.duration_us[size_t(o.segment)][size_t(o.op)] : model_time_us(o, m, cluster, c);
      const std::string cname =
          of_program ? class_of(p.segments[size_t(o.segment)].ops[size_t(o.op)]) : std::string("collective");
      ps += t;
      ms += o.time_us;
      if (cname != "collective") {
        pc += t;
        mc += o.time_us;
      }
      if (o.time_us <= 0) continue;
      const double e = (t - o.time_us) / o.time_us;
      add_error(r.per_op, t, o.time_us);
      add_error(classes[cname], t, o.time_us);
      if (of_program && cname == "memory_bound")
        add_error(kinds[memory_kind_of(p.segments[size_t(o.segment)].ops[size_t(o.op)])], t, o.time_us);
      r.ops.push_back({m.path, o.name, cname, t, o.time_us, e});
      r.worst_ops.push_back(r.ops.back());
      std::sort(r.worst_ops.begin(), r.worst_ops.end(),
                [](const OpAccuracy& a, const OpAccuracy& b) { return std::abs(a.error) > std::abs(b.error); });
      if (r.worst_ops.size() > 10) r.worst_ops.pop_back();
    }
    s.predicted_serial_ms = ps / 1e3;
    s.measured_serial_ms = ms / 1e3;
    s.serial_error = ms > 0 ? (ps - ms) / ms : 0;
    s.predicted_compute_ms = pc / 1e3;
    s.measured_compute_ms = mc / 1e3;
    s.compute_error = mc > 0 ? (pc - mc) / mc : 0;
    if (single) s.predicted_ms = s.predicted_compute_ms;  // one stream of compute: the serialized compute sum
    s.error = (s.predicted_ms - s.measured_ms) / s.measured_ms;
    pred.push_back(s.predicted_ms);
    meas.push_back(s.measured_ms);
    r.step_mape += std::abs(s.error) / static_cast<double>(profiles.size());
    r.step_max_error = std::max(r.step_max_error, std::abs(s.error));
    r.steps.push_back(std::move(s));
  }
  for (auto& [k, v] : classes) {
    v.op_class = k;
    r.classes.push_back(v);
  }
  for (auto& [k, v] : kinds) {
    v.op_class = k;
    r.memory_kinds.push_back(v);
  }
  r.kendall_tau = kendall_tau(pred, meas);
  return r;
}

std::string accuracy_text(const AccuracyReport& r) {
  std::string out;
  for (const auto& t : r.terms) out += "parameter: " + t + "\n";
  out += fmt::format("{:<44} {:>9} {:>9} {:>7}   {:>9} {:>9} {:>7}   {:>9} {:>9} {:>7}\n", "profile (plan)", "pred ms",
                     "meas ms", "error", "serial pr", "serial me", "error", "compute p", "compute m", "error");
  for (const auto& s : r.steps)
    out += fmt::format(
        "{:<44} {:>9.3f} {:>9.3f} {:>+6.1f}%   {:>9.3f} {:>9.3f} {:>+6.1f}%   {:>9.3f} {:>9.3f} {:>+6.1f}%\n  {}\n",
        s.profile.size() > 44 ? "..." + s.profile.substr(s.profile.size() - 41) : s.profile, s.predicted_ms,
        s.measured_ms, 100 * s.error, s.predicted_serial_ms, s.measured_serial_ms, 100 * s.serial_error,
        s.predicted_compute_ms, s.measured_compute_ms, 100 * s.compute_error, s.plan);
  for (const auto& s : r.steps)
    if (s.unseeded_collectives > 0)
      out += fmt::format(
          "  {}: its {} skipped collectives were not seeded (a profile from before tp-run seeded them): the compute "
          "downstream of them ran on zeros, and its times are not a real run's\n",
          s.profile, s.unseeded_collectives);
  for (const auto& s : r.steps)
    for (const auto& k : s.pipeline_ranks)
      out += fmt::format(
          "  {}: pp rank {}: busy {:.3f} ms predicted, {:.3f} measured; ends at {:.3f} ms predicted, "
          "{:.3f} measured\n",
          s.profile, k.pp_rank, k.predicted_busy_ms, k.measured_busy_ms, k.predicted_end_ms, k.measured_end_ms);
  out += fmt::format("step: MAPE {:.1f}%, max error {:.1f}% over {} profiles\n", 100 * r.step_mape,
                     100 * r.step_max_error, r.steps.size());
  out += fmt::format("per op: MAPE {:.1f}%, max error {:.1f}% over {} ops\n", 100 * r.per_op.mape,
                     100 * r.per_op.max_error, r.per_op.samples);
  auto class_line = [](const ClassAccuracy& c, const char* indent) {
    return fmt::format("{}{:<14} MAPE {:>6.1f}%  max {:>7.1f}%  ({} ops; sums {:.2f} ms predicted, {:.2f} measured)\n",
                       indent, c.op_class, 100 * c.mape, 100 * c.max_error, c.samples, c.predicted_ms, c.measured_ms);
  };
  for (const auto& c : r.classes) {
    out += class_line(c, "  ");
    if (c.op_class == "memory_bound")
      for (const auto& k : r.memory_kinds) out += class_line(k, "    ");
  }
  if (!r.worst_ops.empty()) out += "worst ops:\n";
  for (const auto& o : r.worst_ops)
    out += fmt::format("  {:>+8.1f}%  {:>10.1f} us predicted, {:>10.1f} measured  {} ({}, {})\n", 100 * o.error,
                       o.predicted_us, o.measured_us, o.name, o.op_class, o.profile);
  out += r.kendall_tau ? fmt::format("ranking: Kendall tau {:.3f} over {} plans\n", *r.kendall_tau, r.steps.size())
                       : "ranking: Kendall tau needs two profiles or more\n";
  return out;
}

// A pp rank's row: its JSON members are its fields, by the same names (to_json, found by ADL).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(StepAccuracy::PipelineRank, pp_rank, predicted_busy_ms, measured_busy_ms,
                                   predicted_end_ms, measured_end_ms)

nlohmann::json accuracy_json(const AccuracyReport& r) {
  using nlohmann::json;
  json steps = json::array();
  for (const auto& s : r.steps) {
    steps.push_back({{"profile", s.profile},
                     {"plan", s.plan},
                     {"predicted_ms", s.predicted_ms},
                     {"measured_ms", s.measured_ms},
                     {"error", s.error},
                     {"predicted_serialized_ms", s.predicted_serial_ms},
                     {"measured_serialized_ms", s.measured_serial_ms},
                     {"serialized_error", s.serial_error},
                     {"predicted_compute_ms", s.predicted_compute_ms},
                     {"measured_compute_ms", s.measured_compute_ms},
                     {"compute_error", s.compute_error}});
    if (!s.pipeline_ranks.empty()) steps.back()["pipeline_ranks"] = s.pipeline_ranks;
    if (s.local_shapes_of_tp > 0) {
      steps.back()["local_shapes_of_tp"] = s.local_shapes_of_tp;
      steps.back()["unseeded_collectives"] = s.unseeded_collectives;
    }
  }
  auto class_map = [](const std::vector<ClassAccuracy>& cs) {
    json m = json::object();
    for (const auto& c : cs)
      m[c.op_class] = {{"mape", c.mape},
                       {"max_error", c.max_error},
                       {"samples", c.samples},
                       {"predicted_ms", c.predicted_ms},
                       {"measured_ms", c.measured_ms}};
    return m;
  };
  const json classes = class_map(r.classes), memory_kinds = class_map(r.memory_kinds);
  auto op_list = [](const std::vector<OpAccuracy>& ops) {
    json a = json::array();
    for (const auto& o : ops)
      a.push_back({{"profile", o.profile},
                   {"name", o.name},
                   {"class", o.op_class},
                   {"predicted_us", o.predicted_us},
                   {"measured_us", o.measured_us},
                   {"error", o.error}});
    return a;
  };
  const json worst = op_list(r.worst_ops);
  return {{"steps", steps},
          {"worst_ops", worst},
          {"per_op", {{"mape", r.per_op.mape}, {"max_error", r.per_op.max_error}, {"samples", r.per_op.samples}}},
          {"per_class", classes},
          {"per_memory_kind", memory_kinds},
          {"step", {{"mape", r.step_mape}, {"max_error", r.step_max_error}}},
          {"kendall_tau", r.kendall_tau ? json(*r.kendall_tau) : json(nullptr)},
          {"terms", r.terms},
          {"ops", op_list(r.ops)}};
}

}  // namespace tptune
