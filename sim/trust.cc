#include "sim/trust.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <iterator>
#include <set>

#include "plans/util/enum_names.h"

namespace tptune {

namespace {

// A fraction as a whole percentage: 0.094 -> "9 %" (one decimal under 1 %: "0.4 %").
std::string percent(double f) {
  const double p = 100 * f;
  return p < 1 && p > 0 ? fmt::format("{:.1f} %", p) : fmt::format("{:.0f} %", std::nearbyint(p));
}

// PredictionTrust::Basis's enumerators, in declaration order.
constexpr std::string_view kBasisNames[] = {"uncalibrated", "preset", "calibration_file"};
static_assert(std::size(kBasisNames) == enum_count(PredictionTrust::Basis::calibration_file));

std::string_view basis_name(PredictionTrust::Basis b) { return name_of(kBasisNames, b); }

}  // namespace

PredictionTrust prediction_trust(const GpuSpec& gpu, const std::string& calibration_file) {
  PredictionTrust t;
  t.device = gpu.name;
  t.architecture = gpu.architecture;
  t.kernel_sources = gpu.kernel_sources;
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

// "; Hopper kernels compared with 4 kernel-level sources", or nothing when the spec names none.
std::string kernel_level(const PredictionTrust& t) {
  if (t.kernel_sources.empty() || t.architecture.empty()) return "";
  const size_t n = std::set<std::string>(t.kernel_sources.begin(), t.kernel_sources.end()).size();
  std::string arch = t.architecture;
  arch[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(arch[0])));
  return fmt::format("; {} kernels compared with {} kernel-level source{}", arch, n, n == 1 ? "" : "s");
}

std::string trust_text(const PredictionTrust& t) { return trust_level_text(t) + kernel_level(t); }

std::string trust_level_text(const PredictionTrust& t) {
  switch (t.basis) {
    case PredictionTrust::Basis::calibration_file:
      return fmt::format("{}: calibrated by {}", t.device, t.file);
    case PredictionTrust::Basis::preset: {
      const PresetCalibration& c = t.calibration;
      const size_t sources = std::set<std::string>(c.sources.begin(), c.sources.end()).size();
      std::string s = fmt::format("{}: calibrated on {} public run{} ({} source{})", t.device, c.runs,
                                  c.runs == 1 ? "" : "s", sources, sources == 1 ? "" : "s");
      s += c.loso_mean_error >= 0 ? ", leave-one-source-out error " + percent(c.loso_mean_error)
                                  : ", mean error " + percent(c.mean_error);
      if (c.loao_mean_error >= 0) s += ", leave-one-architecture-out error " + percent(c.loao_mean_error);
      return s;
    }
    case PredictionTrust::Basis::uncalibrated:
      break;
  }
  return fmt::format("{}: uncalibrated (figures of {}, not fitted to measured runs; see docs/calibration.md)", t.device,
                     t.origin.empty() ? "the config" : t.origin);
}

nlohmann::json trust_json(const PredictionTrust& t) {
  nlohmann::json j = {{"device", t.device}, {"basis", std::string(basis_name(t.basis))}, {"text", trust_text(t)}};
  if (t.basis == PredictionTrust::Basis::preset) {
    j["runs"] = t.calibration.runs;
    j["sources"] = t.calibration.sources;
    j["mean_error"] = t.calibration.mean_error;
    if (t.calibration.loso_mean_error >= 0) j["loso_mean_error"] = t.calibration.loso_mean_error;
    if (t.calibration.loao_mean_error >= 0) j["loao_mean_error"] = t.calibration.loao_mean_error;
  }
  if (t.basis == PredictionTrust::Basis::calibration_file) j["file"] = t.file;
  if (!t.kernel_sources.empty()) {
    j["architecture"] = t.architecture;
    j["kernel_sources"] = t.kernel_sources;
  }
  return j;
}

}  // namespace tptune
