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
// The numbers come from the spec file only: nothing here computes or assumes an error.
//
// JSON: {"device": "h100-sxm", "basis": "preset" | "calibration_file" | "uncalibrated", "text": "<the line>",
//        "runs": N, "sources": [...], "mean_error": F, "loso_mean_error": F?   (basis "preset")
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
};

// `calibration_file`: the path given with --calibration (empty: none).
PredictionTrust prediction_trust(const GpuSpec& gpu, const std::string& calibration_file = "");
std::string trust_text(const PredictionTrust& t);
nlohmann::json trust_json(const PredictionTrust& t);

}  // namespace tptune
