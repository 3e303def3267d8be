#pragma once
// Fitting the architecture-level cost terms to kernel-level public measurements (profiles/kernels,
// sim/calibrate/kernel_record.h): `tp-plan calibrate --kernels DIR`.
//
//   KernelFit f = fit_kernels(load_kernel_record("profiles/kernels"));
//   fmt::print("{}", kernel_fit_text(f));
//
// Levels. A GPU preset composes the part (sim/gpus/NAME.yaml: datasheet peaks, and the sustained tensor clock a power
// cap leaves, CostParams::tensor_clock_fraction), its architecture's kernels (GEMM, attention, streaming and NCCL
// efficiencies, shared by every part of the architecture: GpuSpec::architecture) and the software stack (eager or
// compiled PyTorch: traffic factors, dispatch; fitted end to end, sim/calibrate/published_fit.h). Kernel data fits the
// second level only.
//
// Each measurement i names a part and a term T(i) of its architecture:
//   gemm bf16/fp16       gemm_efficiency          fp8: gemm_fp8_efficiency
//   attention_fwd        attention_fwd_efficiency (per backend: flash2, flash3, cudnn, ...)
//   attention_bwd        attention_bwd_efficiency (per backend)
//   attention_fwd_bwd    attention_fwd_efficiency (per backend), the backward at the prior's bwd/fwd ratio: a pass
//                        of F forward and 2.5 F backward FLOPs runs at 3.5 / (1 / e_fwd + 2.5 / e_bwd)
//   memory_bound         memory_bound_efficiency
//   all_reduce ring      ring_busbw_efficiency at the group size; nvls: nvls_busbw_efficiency (busbw / NVLink rate)
// The model's value at the term's efficiency 1, x_i, is what tptune's own cost functions give for the measurement's
// shape on the part (sim/cost/compute_cost.h: wave quantization and the per-tile k overhead of a GEMM, the attention's
// CTA waves; a figure printed without a shape is taken at the asymptote: no wave or k term) at the part's tensor
// clock. Every figure is a fraction of the datasheet's dense peak (or HBM rate, or busbw over the NVLink rate), and
//   T = exp(mean over its rows of ln(measured_i / x_i))      (least squares in log space: a geometric mean)
// Residual of a row: T x_i / measured_i - 1.
// A power-capped part (tensor_clock_fraction < 1 in its preset) is a part-level question: its tensor-core rows do
// not fit the architecture's terms; the report states the clock they imply, measured / (T x_i at clock 1).
// Rows on a part without a preset, or on one without an architecture, are listed as not fitted.
// Every figure above is a short burst (the GPU at its boost clock, below its power limit), so x_i is taken at
// sustained_tensor_fraction 1. A gemm_sustained row prints the rate the part holds once saturated at its power limit
// beside its burst rate: a part-level figure, fitted into no architecture term; the report states the
// sustained_tensor_fraction each preset's rows imply, exp(mean ln(sustained / burst)), beside the preset's value.
// Sustained rows held at stated power limits give a capped preset's clock a second, part-level figure: the rate its
// die holds at its own limit (sim/calibrate/power_curve.h).
#include <string>
#include <vector>

#include "sim/calibrate/kernel_record.h"
#include "sim/calibrate/power_curve.h"

namespace tptune {

struct KernelTermFit {
  std::string architecture;  // "hopper"
  std::string name;          // the cost parameter: "gemm_efficiency", "ring_busbw_efficiency@8"
  std::string backend;       // attention: the kernel ("flash2"); empty otherwise
  double prior = 0;          // the architecture's value before (the default, or the presets' cost_params)
  double value = 0;          // fitted
  int rows = 0;
  std::vector<std::string> sources;  // ids, in folder order
};

struct KernelResidual {
  std::string source, id, at, gpu, architecture, term;
  double measured = 0;   // as a fraction (of peak, HBM, or NVLink per direction)
  double predicted = 0;  // the fitted model's fraction
  bool fitted = true;    // false: a power-capped part's row (predicted at its preset's clock), not in the fit
  double error() const { return predicted / measured - 1; }
};

struct ImpliedClock {
  std::string gpu;
  double preset = 0;   // the preset's tensor_clock_fraction
  double implied = 0;  // geometric mean over its tensor-core rows of measured / (T x_i at clock 1)
  int rows = 0;
  std::vector<std::string> sources;
};

struct ImpliedSustained {
  std::string gpu;
  double preset = 0;   // the preset's sustained_tensor_fraction
  double implied = 0;  // geometric mean over its gemm_sustained rows of sustained / burst; 0: no row of its own
  int rows = 0;
  std::vector<std::string> sources;
  std::vector<std::string> per_row;  // "bf16 0.888", in file order
};

struct KernelFit {
  std::vector<std::string> sources;  // every source id, in folder order
  std::vector<KernelTermFit> terms;  // by architecture, then term
  std::vector<KernelResidual> residuals;
  std::vector<ImpliedClock> clocks;
  std::vector<ImpliedSustained> sustained;    // every preset with an architecture, in preset order
  std::vector<PowerCurveClock> power_clocks;  // capped presets whose die has sustained rows at two or more limits
  std::vector<std::string> not_fitted;        // "<source> <id>: <why>"
  // The architecture-level sources behind `architecture`: the ids of the sources with a fitted row on it.
  std::vector<std::string> sources_of(const std::string& architecture) const;
};

KernelFit fit_kernels(const std::vector<KernelSource>& record);
// The report: fitted terms with their priors, residuals per GPU (mean |error| and each row), implied clocks.
std::string kernel_fit_text(const KernelFit& f);

}  // namespace tptune
