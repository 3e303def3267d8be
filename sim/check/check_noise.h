#pragma once
// The one threshold below which a relative change of a prediction is floating-point noise, not a change: shared by
// the comparison (sim/check/compare.cc) and its reports (sim/check/check_report*.cc).
namespace tptune {

inline constexpr double kNoise = 1e-9;                 // relative
inline constexpr double kNoisePercent = 100 * kNoise;  // the same, in percent

}  // namespace tptune
