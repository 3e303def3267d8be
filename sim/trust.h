#pragma once
// How far to trust a prediction: what the device's figures were fitted to, as every prediction states it (tp-plan
// simulate, explain and search: the text, the JSON's "trust" object, the HTML report).
//
// Three forms, from the device spec's `calibration` block (sim/gpu_spec.h) and the user's --calibration file:
//   "h100-sxm-hbm2e-500w: calibrated on 24 public runs (3 sources), leave-one-source-out error 9 %"
//       the spec has a calibration block (without loso_mean_error: "..., mean error 5 %")
//   "h100-sxm: uncalibrated (figures of sim/gpus/h100-sxm.yaml, not fitted to measured runs; see docs/calibration.md)"
//       no block (an inline cluster.gpu spec: "figures of config.yaml:12, ...")
//   "h100-sxm: calibrated by calib.yaml"
//       --calibration FILE (tp-plan calibrate --out), whatever the spec says
// The architecture level follows, when the spec names kernel-level sources (its `kernel_sources`, profiles/kernels):
//   "...; Hopper kernels compared with 4 kernel-level sources"
// and the first form adds the leave-one-architecture-out error when the block gives it ("..., leave-one-source-out
// error 12 %, leave-one-architecture-out error 3 %").
// The numbers come from the spec file only: nothing here computes or assumes an error.
//
// JSON: {"device": "h100-sxm", "basis": "preset" | "calibration_file" | "uncalibrated", "text": "<the line>",
//        "runs": N, "sources": [...], "mean_error": F, "loso_mean_error": F?,
//        "loao_mean_error": F?                                                 (basis "preset")
//        "architecture": "hopper", "kernel_sources": [...]                     (when the spec names them)
//        "file": "calib.yaml"                                                  (basis "calibration_file")}

#include <nlohmann/json.hpp>
#include <string>

#include "sim/gpu_spec.h"

namespace tptune {

struct PredictionTrust {
  enum class Basis { uncalibrated, preset, calibration_file };
  std::string device;
  Basis basis = Basis::uncalibrated;
  PresetCalibration calibration;  // basis preset
  std::string file;               // basis calibration_file
  std::string origin;             // basis uncalibrated: where the figures come from ("sim/gpus/h100-sxm.yaml")
  std::string architecture;       // the spec's (any basis): "hopper"
  std::vector<std::string> kernel_sources;  // the kernel-level sources its architecture's terms are compared with
};

// `calibration_file`: the path given with --calibration (empty: none).
PredictionTrust prediction_trust(const GpuSpec& gpu, const std::string& calibration_file = "");
std::string trust_text(const PredictionTrust& t);
// The line without its architecture level (the part and stack: the first three forms above).
std::string trust_level_text(const PredictionTrust& t);
nlohmann::json trust_json(const PredictionTrust& t);

}  // namespace tptune
