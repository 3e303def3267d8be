#pragma once
// The clock a power cap leaves, from kernel-level measurements: the sustained GEMM rates a die holds at two or more
// board power limits (gemm_sustained rows with power_limit_W, profiles/kernels) give its rate as a function of the
// limit, and so the part-level CostParams::tensor_clock_fraction of a preset that runs the die at a lower one.
//
//   std::vector<PowerCurveClock> c = power_curve_clocks(load_kernel_record("profiles/kernels"));
//
// For each preset with tensor_clock_fraction < 1 and power_limit_W (sim/gpu_spec.h), and each dtype whose sustained
// rows of the preset's architecture were held at two or more distinct limits:
//   rate(P) = a x P^alpha, fitted by least squares in log space (through the two points when there are two)
//   clock   = rate(P_preset) / rate(P_top) = (P_preset / P_top)^alpha
// P_top is the highest limit among those rows: the full-power part whose datasheet peaks the capped preset carries
// (Hopper: the 700 W SXM). A power law is concave in P for alpha < 1 (what dynamic power growing faster than the clock
// gives) and, through two points, lies under their chord below them: the straight line would be an upper bound.
// The implied clock is the geometric mean over the dtypes (the preset has one clock for every tensor-core dtype).
// Rates are compared in FLOP/s (rows in TFLOPS or PFLOPS; a fraction of each part's own peak is left out: the parts'
// peaks differ).
#include <string>
#include <vector>

#include "sim/calibrate/kernel_record.h"

namespace tptune {

struct PowerCurveClock {
  std::string gpu;                     // the capped preset
  double power_W = 0;                  // its power limit
  double reference_W = 0;              // P_top
  double preset = 0;                   // its tensor_clock_fraction
  double implied = 0;                  // geometric mean over per_dtype's clocks
  std::vector<std::string> per_dtype;  // "bf16 0.758 (alpha 0.823; 665 TFLOPS at 600 W, 755 at 700 W)"
  std::vector<std::string> sources;    // source ids of the rows used, in record order
};

std::vector<PowerCurveClock> power_curve_clocks(const std::vector<KernelSource>& record);

}  // namespace tptune
