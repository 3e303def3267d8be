#pragma once
// The software stack of tptune's own runtime (issue 38, item 1: "tp-run itself is a stack"): the cost parameters a
// prediction of a tp-run profile uses on a GPU, in place of the PyTorch stack the GPU presets carry.
//
//   CostParams c = tp_run_cost_params(gpu);   // the device preset's part and architecture, tp-run's stack
//   apply_calibration(c, cal);                // a calibration fitted to tp-run profiles, over it
//
// tp-run runs each op of the Program as one kernel of kernels/cuda, reading and writing the op's own bytes, launched
// from C++: so every stack-level traffic factor of eager PyTorch's modules (RMSNorm's 9.0 / 14.7, rope's, SiLU's,
// measured on torchtitan's Python) is 1, as are the compiled ones (its fused ops move their own bytes too); no Python
// dispatch per kernel (eager_dispatch_us, compiled_dispatch_us 0: the per-kernel launch is the architecture's
// *_overhead_us); AdamW is its own kernel over the Program's bytes (optimizer_traffic_factor 1); its collectives
// read and write the tensors in place (fsdp_copy_traffic_factor 0: no FSDP2 copy-in/copy-out kernels).
// What stays the preset's: the part and the architecture (how fast the GPU runs a kernel of those bytes), and the
// terms that describe the Program's own kernels (loss, casts, layout copies). The cpu device is unchanged: its preset
// is tp-run's CPU runtime already (sim/gpus/cpu.yaml), every stack term measured on it.
#include "sim/cost/cost_params.h"
#include "sim/gpu_spec.h"

namespace tptune {

CostParams tp_run_cost_params(const GpuSpec& gpu);

}  // namespace tptune
