// The fit to the public record (sim/calibrate/published_fit.h) and its accuracy report
// (sim/calibrate/published_accuracy.h), on a synthetic record: its runs' "measured" numbers are tptune's own
// predictions with known parameter values away from the preset's, so that the fit must find those values again.
#include "sim/calibrate/published_fit.h"

#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <cmath>

#include "plans/util/error.h"
#include "sim/calibrate/calibration.h"
#include "sim/calibrate/published_accuracy.h"
#include "sim/calibrate/published_predict.h"
#include "sim/calibrate/published_record.h"
#include "sim/cost/cost_param_fields.h"
#include "sim/gpu_spec.h"
#include "tests/error_text.h"

using namespace tptune;
using tptune::test::error_of;

namespace {

// A small Llama-shaped model, so that a simulation takes well under a millisecond.
constexpr const char* kModel = "{dim: 1024, n_layers: 4, n_heads: 16, n_kv_heads: 8, ffn_dim: 4096, vocab_size: 32000}";

std::string run(const std::string& id, const std::string& training, const std::string& plan) {
  return fmt::format(R"(  - id: {}
    table: "synthetic"
    quote: "synthetic"
    config:
      model: {}
      training: {}
      cluster: {{gpu: h100-sxm, nodes: 1, gpus_per_node: 8}}
    plan: {}
    measured: {{tokens_per_second_per_gpu: 1, peak_memory_gib: 1}}
)",
                     id, kModel, training, plan);
}

std::string source(const std::string& id, const std::string& runs, const std::string& ratios = "") {
  return fmt::format("source: {{id: {}, citation: synthetic, paper: none, table: none}}\nruns:\n{}{}", id, runs,
                     ratios.empty() ? "" : "ratios:\n" + ratios);
}

// Two sources of differently shaped runs (eager and compiled, tp 1, 2 and 8, float8, AC), so that the GEMM and
// the memory-bound efficiencies both move their tokens/s, differently.
std::vector<PublishedSource> synthetic_record() {
  // Tokens enough that no op is shorter than the host's dispatch of it (CostParams::eager_dispatch_us): a host-bound
  // run would hide the memory-bound efficiency, and a source alone could not determine it.
  const std::string eager = "{seq_len: 8192, local_batch_size: 4, activation_checkpointing: none, compile: false}";
  const std::string compiled =
      "{seq_len: 8192, local_batch_size: 2, activation_checkpointing: selective, compile: true}";
  const std::string full = "{seq_len: 8192, local_batch_size: 4, activation_checkpointing: full, compile: false}";
  std::vector<PublishedSource> s;
  s.push_back(parse_published_source(
      source("synthetic-a",
             run("a-tp1-eager", eager, "{tp: 1}") + run("a-tp1-compiled", compiled, "{tp: 1}") +
                 run("a-tp2-float8", compiled, "{tp: 2, float8: tensorwise}") +
                 run("a-tp8-async", compiled, "{tp: 8, async_tp: true}"),
             "  - {name: \"compiled/eager\", numerator: a-tp1-compiled, denominator: a-tp1-eager}\n"),
      "a.yaml"));
  s.push_back(parse_published_source(
      source("synthetic-b", run("b-tp1-full", full, "{tp: 1}") + run("b-tp2-eager", eager, "{tp: 2}") +
                                run("b-tp4-full", full, "{tp: 4, float8: tensorwise}") +
                                run("b-tp8-eager", eager, "{tp: 8}")),
      "b.yaml"));
  return s;
}

const GpuSpec& h100() {
  static const GpuSpec g = gpu_preset("h100-sxm");
  return g;
}

CostParams truth() {
  CostParams c = device_cost_params(h100());
  c.gemm_efficiency *= 0.8;
  c.memory_bound_efficiency *= 0.75;
  return c;
}

// Sets every run's measured tokens/s and peak memory to the prediction with `c` (the prepared runs point into s).
void measure_with(std::vector<PublishedSource>& s, const PreparedRecord& rec, const CostParams& c) {
  for (const auto& p : rec.runs) {
    const PublishedPrediction q = predict_run(p, c);
    for (auto& src : s)
      for (auto& r : src.runs)
        if (&r == p.run) r.measured = {q.tokens_per_second_per_gpu, q.peak_memory_gib, std::nullopt};
  }
}

}  // namespace

TEST_CASE("published fit: a synthetic record is fitted back to the parameters that made it") {
  std::vector<PublishedSource> s = synthetic_record();
  const PreparedRecord rec = prepare_published(s);
  REQUIRE(rec.runs.size() == 8);
  REQUIRE(rec.not_predicted.empty());
  const CostParams t = truth();
  measure_with(s, rec, t);
  const PublishedFit f = fit_published(rec, {"h100-sxm", {"gemm_efficiency", "memory_bound_efficiency"}, 0.0});
  REQUIRE(f.values.size() == 2);
  CHECK(f.runs == 8);
  CHECK(f.sources == std::vector<std::string>{"synthetic-a", "synthetic-b"});
  CHECK(f.values[0].prior == device_cost_params(h100()).gemm_efficiency);
  CHECK(std::abs(f.values[0].value / t.gemm_efficiency - 1) < 0.02);
  CHECK(std::abs(f.values[1].value / t.memory_bound_efficiency - 1) < 0.02);
  CHECK(f.objective_after < f.objective_before);
  CHECK(f.overall_before.mean_abs > 0.05);  // the priors are well off these runs
  CHECK(f.overall_after.mean_abs < 0.01);
  // Reproducible bit for bit.
  const PublishedFit again = fit_published(rec, {"h100-sxm", {"gemm_efficiency", "memory_bound_efficiency"}, 0.0});
  CHECK(again.values[0].value == f.values[0].value);
  CHECK(again.values[1].value == f.values[1].value);
  // The regularisation pulls toward the priors: a large lambda keeps the values nearer them.
  const PublishedFit pulled = fit_published(rec, {"h100-sxm", {"gemm_efficiency", "memory_bound_efficiency"}, 10.0});
  CHECK(std::abs(std::log(pulled.values[0].value / f.values[0].prior)) <
        std::abs(std::log(f.values[0].value / f.values[0].prior)));

  SECTION("the calibration file it writes predicts what the fit predicted") {
    const Calibration cal = published_calibration(f, "synthetic");
    CHECK(cal.device == "h100-sxm");
    REQUIRE(cal.params.size() == 2);
    CHECK(cal.params[0].source == "fitted to 8 runs of synthetic-a, synthetic-b (tp-plan calibrate --published)");
    const Calibration back = parse_calibration(calibration_yaml(cal), "cal.yaml");
    CHECK(back.params[0].source == cal.params[0].source);
    CostParams c = device_cost_params(h100());
    apply_calibration(c, back);
    CHECK(std::abs(c.gemm_efficiency / f.values[0].value - 1) < 1e-6);
  }
  SECTION("leave one source out: each source predicted by the fit on the other") {
    const LosoReport r = loso_published(rec, {"h100-sxm", {"gemm_efficiency", "memory_bound_efficiency"}, 0.0});
    REQUIRE(r.rows.size() == 2);
    CHECK(r.rows[0].source == "synthetic-a");
    CHECK(r.rows[0].held_out.runs == 4);
    CHECK(r.pooled.runs == 8);
    CHECK(r.pooled.mean_abs < 0.02);  // the model is exact here: the other source's fit predicts it
    CHECK(loso_text(r).find("leave-one-source-out mean |error|") != std::string::npos);
  }
}

TEST_CASE("published fit: bad names, a GPU without runs and a prior a log-space fit cannot take") {
  std::vector<PublishedSource> s = synthetic_record();
  const PreparedRecord rec = prepare_published(s);
  CHECK(error_of([&] {
          fit_published(rec, {"h100-sxm", {"gemm_efficency"}, 0.01});
        }).starts_with("--fit gemm_efficency: unknown cost parameter; expected one of gemm_efficiency, "));
  CHECK(error_of([&] {
          fit_published(rec, {"h100-sxm", {"gemm_tile_m"}, 0.01});
        }) == "--fit gemm_tile_m: an integral parameter (a size or a switch); the fit takes real ones");
  CHECK(error_of([&] {
          fit_published(rec, {"h100-sxm", {"gemm_efficiency", "gemm_efficiency"}, 0.01});
        }) == "--fit gemm_efficiency: named twice");
  CHECK(error_of([&] {
          fit_published(rec, {"b200", {"gemm_efficiency"}, 0.01});
        }) == "--gpu b200: no predicted run of the record runs on it (its runs' GPUs: h100-sxm)");
  // attention_fwd_score_ns is 0 on GPUs (sim/cost/cost_param_list.h): no log-space fit from 0.
  CHECK(error_of([&] {
          fit_published(rec, {"h100-sxm", {"attention_fwd_score_ns"}, 0.01});
        }) == "--fit attention_fwd_score_ns: the prior of h100-sxm is 0; a fit in log space needs a positive prior");
}

TEST_CASE("published accuracy: errors, tau, ratios and the committed-figures check") {
  std::vector<PublishedSource> s = synthetic_record();
  const PreparedRecord rec = prepare_published(s);
  measure_with(s, rec, truth());
  const PublishedAccuracy exact = published_accuracy(s, rec, [](const GpuSpec&) { return truth(); });
  REQUIRE(exact.sources.size() == 2);
  CHECK(exact.overall.runs == 8);
  CHECK(exact.overall.max_abs < 1e-12);
  CHECK(*exact.sources[0].summary.kendall_tau == 1.0);
  REQUIRE(exact.ratios.size() == 1);
  CHECK(std::abs(*exact.ratios[0].difference) < 1e-12);
  const PublishedAccuracy prior = published_accuracy(s, rec, [](const GpuSpec& g) { return device_cost_params(g); });
  // Higher efficiencies predict more tokens/s: every error positive, so the signed mean is the mean |error|.
  CHECK(prior.overall.signed_mean > 0.05);
  CHECK(prior.overall.signed_mean == Approx(prior.overall.mean_abs));
  const PublishedRunResult& r0 = prior.runs[0];
  CHECK(r0.error == Approx((r0.predicted - r0.measured) / r0.measured));
  CHECK(published_accuracy_text(prior).find("overall: 8 runs of 2 sources") != std::string::npos);
  // The committed figures: the same figures pass, worse ones are named.
  CHECK(figures_worse_than(prior, published_accuracy_json(prior), "c.json").empty());
  const std::vector<std::string> worse = figures_worse_than(prior, published_accuracy_json(exact), "c.json");
  // Per source its mean and max |error| (0 committed); peak memory does not depend on these efficiencies: exact in
  // both, and both order the runs alike (tau 1).
  REQUIRE(worse.size() == 4);
  CHECK(worse[0].starts_with("synthetic-a: tokens/s mean |error| "));
  CHECK(worse[3].starts_with("synthetic-b: tokens/s max |error| "));
  CHECK(worse[0].ends_with("committed 0.0% (more than 0.5 points worse)"));
  // A committed tau above the current one by more than 0.01 is named.
  nlohmann::json higher_tau = published_accuracy_json(prior);
  REQUIRE(*prior.sources[0].summary.kendall_tau == 1.0);
  higher_tau["sources"][0]["kendall_tau"] = 1.02;
  const std::vector<std::string> tau = figures_worse_than(prior, higher_tau, "c.json");
  REQUIRE(tau.size() == 1);
  CHECK(tau[0] == "synthetic-a: Kendall tau 1.000, committed 1.020 (lower by more than 0.01)");
  CHECK(error_of([&] { figures_worse_than(prior, nlohmann::json::array(), "c.json"); }) ==
        "c.json: expected a tp-plan accuracy --published --json file (with \"sources\")");
}

TEST_CASE("published fit: pipeline-parallel runs are held out of the fit", "[published][pp]") {
  // A third synthetic run with pipeline parallelism (2 stages of 2 blocks, 4 microbatches): predicted by accuracy,
  // never fitted to.
  std::vector<PublishedSource> s = synthetic_record();
  s.push_back(parse_published_source(
      source("synthetic-pp",
             run("pp-1f1b", "{seq_len: 8192, local_batch_size: 4, activation_checkpointing: full, compile: false}",
                 "{tp: 2, pp: 2, pp_schedule: 1F1B, pp_microbatch_size: 1}") +
                 run("no-pp", "{seq_len: 8192, local_batch_size: 4, activation_checkpointing: full, compile: false}",
                     "{tp: 2}")),
      "pp.yaml"));
  const PreparedRecord rec = prepare_published(s);
  REQUIRE(rec.runs.size() == 10);  // 4 + 4 + 2, all predicted
  measure_with(s, rec, truth());
  const PublishedFit f = fit_published(rec, {"h100-sxm", {"gemm_efficiency"}, 0.0});
  CHECK(f.runs == 9);  // every run but pp-1f1b
}
