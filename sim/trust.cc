#include "sim/trust.h"

#include <fmt/format.h>

#include <cmath>
#include <set>

namespace tptune {

namespace {

// A fraction as a whole percentage: 0.094 -> "9 %" (one decimal under 1 %: "0.4 %").
std::string percent(double f) {
  const double p = 100 * f;
  return p < 1 && p > 0 ? fmt::format("{:.1f} %", p) : fmt::format("{:.0f} %", std::nearbyint(p));
}

const char* basis_name(PredictionTrust::Basis b) {
  switch (b) {
    case PredictionTrust::Basis::preset:
      return "preset";
    case PredictionTrust::Basis::calibration_file:
      return "calibration_file";
    case PredictionTrust::Basis::uncalibrated:
      break;
  }
  return "uncalibrated";
}

}  // namespace

PredictionTrust prediction_trust(const GpuSpec& gpu, const std::string& calibration_file) {
  PredictionTrust t;
  t.device = gpu.name;
  if (!calibration_file.empty()) {
    t.basis = PredictionTrust::Basis::calibration_file;
    t.file = calibration_file;
  } else if (gpu.calibration.present()) {
    t.basis = PredictionTrust::Basis::preset;
    t.calibration = gpu.calibration;
  } else {
    // A preset's origin is "sim/gpus/NAME.yaml:LINE" (the map's first line): the file is what the user looks up.
    t.origin = gpu.origin;
    if (t.origin.rfind("sim/gpus/", 0) == 0) t.origin = t.origin.substr(0, t.origin.find(':'));
  }
  return t;
}

std::string trust_text(const PredictionTrust& t) {
  switch (t.basis) {
    case PredictionTrust::Basis::calibration_file:
      return fmt::format("{}: calibrated by {}", t.device, t.file);
    case PredictionTrust::Basis::preset: {
      const PresetCalibration& c = t.calibration;
      const size_t sources = std::set<std::string>(c.sources.begin(), c.sources.end()).size();
      std::string s = fmt::format("{}: calibrated on {} public run{} ({} source{})", t.device, c.runs,
                                  c.runs == 1 ? "" : "s", sources, sources == 1 ? "" : "s");
      if (c.loso_mean_error >= 0) return s + ", leave-one-source-out error " + percent(c.loso_mean_error);
      return s + ", mean error " + percent(c.mean_error);
    }
    case PredictionTrust::Basis::uncalibrated:
      break;
  }
  return fmt::format("{}: uncalibrated (figures of {}, not fitted to measured runs; see docs/calibration.md)", t.device,
                     t.origin.empty() ? "the config" : t.origin);
}

nlohmann::json trust_json(const PredictionTrust& t) {
  nlohmann::json j = {{"device", t.device}, {"basis", basis_name(t.basis)}, {"text", trust_text(t)}};
  if (t.basis == PredictionTrust::Basis::preset) {
    j["runs"] = t.calibration.runs;
    j["sources"] = t.calibration.sources;
    j["mean_error"] = t.calibration.mean_error;
    if (t.calibration.loso_mean_error >= 0) j["loso_mean_error"] = t.calibration.loso_mean_error;
  }
  if (t.basis == PredictionTrust::Basis::calibration_file) j["file"] = t.file;
  return j;
}

}  // namespace tptune
