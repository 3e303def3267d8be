// How far to trust a prediction (sim/trust.h): the calibration block of a device spec and its line.
#include "sim/trust.h"

#include <yaml-cpp/yaml.h>

#include <catch2/catch.hpp>

#include "plans/util/error.h"
#include "tests/error_text.h"

using namespace tptune;
using tptune::test::error_of;

namespace {
// An inline spec (as a config's cluster.gpu) with `extra` appended at its indentation.
GpuSpec spec(const std::string& extra) {
  const std::string text =
      "gpu:\n  name: g1\n  bf16_tflops: 500\n  fp16_tflops: 500\n  fp8_tflops: 0\n"
      "  fp32_tflops: 50\n  hbm_bandwidth_GBps: 2000\n  memory_GiB: 48\n  sm_count: 100\n"
      "  nvlink_bandwidth_GBps: 200\n  nvlink_latency_us: 3\n  nvswitch: true\n  nvls: false\n"
      "  network_bandwidth_GBps: 25\n  network_latency_us: 10\n" +
      extra;
  return parse_gpu_spec(YAML::Load(text)["gpu"], "cfg.yaml");
}
}  // namespace

TEST_CASE("a preset without a calibration block is uncalibrated, and says whose figures it uses") {
  const PredictionTrust t = prediction_trust(gpu_preset("h100-sxm"));
  CHECK(t.basis == PredictionTrust::Basis::uncalibrated);
  CHECK(trust_text(t) ==
        "h100-sxm: uncalibrated (figures of sim/gpus/h100-sxm.yaml, not fitted to measured runs; see "
        "docs/calibration.md)");
  const nlohmann::json j = trust_json(t);
  CHECK(j["basis"] == "uncalibrated");
  CHECK(j["device"] == "h100-sxm");
  CHECK(j["text"] == trust_text(t));
  CHECK_FALSE(j.contains("runs"));
  // An inline spec names the config line it came from.
  CHECK(trust_text(prediction_trust(spec(""))) ==
        "g1: uncalibrated (figures of cfg.yaml:2, not fitted to measured runs; see docs/calibration.md)");
}

TEST_CASE("a calibration block: runs, distinct sources, the leave-one-source-out error when given") {
  const GpuSpec g = spec(
      "  calibration:\n    runs: 24\n    sources: [torchtitan-h100-202412, torchtitan-asynctp-h100-202506, "
      "torchtitan-performance-md]\n    mean_error: 0.05\n    loso_mean_error: 0.094\n");
  REQUIRE(g.calibration.present());
  CHECK(g.calibration.runs == 24);
  CHECK(g.calibration.sources.size() == 3);
  const PredictionTrust t = prediction_trust(g);
  CHECK(trust_text(t) == "g1: calibrated on 24 public runs (3 sources), leave-one-source-out error 9 %");
  const nlohmann::json j = trust_json(t);
  CHECK(j["basis"] == "preset");
  CHECK(j["runs"] == 24);
  CHECK(j["mean_error"] == 0.05);
  CHECK(j["loso_mean_error"] == 0.094);
  CHECK(j["sources"].size() == 3);
  // Without loso_mean_error: the in-sample mean; one source counted once however often it is listed.
  const GpuSpec one = spec("  calibration: {runs: 1, sources: [a, a], mean_error: 0.125}\n");
  CHECK(trust_text(prediction_trust(one)) == "g1: calibrated on 1 public run (1 source), mean error 12 %");
  CHECK_FALSE(trust_json(prediction_trust(one)).contains("loso_mean_error"));
}

TEST_CASE("a --calibration file replaces what the spec says") {
  const GpuSpec g = spec("  calibration: {runs: 3, sources: [a], mean_error: 0.1}\n");
  const PredictionTrust t = prediction_trust(g, "fit.yaml");
  CHECK(t.basis == PredictionTrust::Basis::calibration_file);
  CHECK(trust_text(t) == "g1: calibrated by fit.yaml");
  CHECK(trust_json(t)["file"] == "fit.yaml");
  CHECK(trust_json(t)["basis"] == "calibration_file");
}

TEST_CASE("calibration block errors name the file, the line and the key") {
  CHECK(error_of([] { spec("  calibration: 3\n"); }) ==
        "cfg.yaml:16: calibration: expected a map {runs, sources, mean_error, loso_mean_error}, got '3'");
  CHECK(error_of([] { spec("  calibration: {runs: 0, sources: [a], mean_error: 0.1}\n"); }) ==
        "cfg.yaml:16: calibration.runs: expected an integer in [1, 1000000], got '0'");
  CHECK(error_of([] { spec("  calibration: {runs: 2.5, sources: [a], mean_error: 0.1}\n"); }) ==
        "cfg.yaml:16: calibration.runs: expected an integer in [1, 1000000], got '2.5'");
  CHECK(error_of([] { spec("  calibration: {runs: 2, sources: [], mean_error: 0.1}\n"); }) ==
        "cfg.yaml:16: calibration.sources: expected a list of one or more source ids, got a list");
  CHECK(error_of([] { spec("  calibration: {runs: 2, sources: [a], mean_error: -1}\n"); }) ==
        "cfg.yaml:16: calibration.mean_error: expected a fraction in [0, 10] (0.09 = 9 %), got '-1'");
  CHECK(error_of([] { spec("  calibration: {runs: 2, sources: [a], mean_error: .nan}\n"); }) ==
        "cfg.yaml:16: calibration.mean_error: expected a fraction in [0, 10] (0.09 = 9 %), got '.nan'");
  CHECK(error_of([] { spec("  calibration: {runs: 2, sources: [a]}\n"); }) ==
        "cfg.yaml:16: calibration: mean_error: missing (a calibration block states runs, sources and mean_error)");
  CHECK(error_of([] { spec("  calibration: {runs: 2, sources: [a], mean_error: 0.1, error: 3}\n"); }) ==
        "cfg.yaml:16: calibration.error: unknown key, expected runs, sources, mean_error or loso_mean_error");
}
