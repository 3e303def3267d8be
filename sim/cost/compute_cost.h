#pragma once
// Compute cost of one op of the Program on one GPU: how long its kernel runs.
//
//   GEMM       roofline: max(2mnk / (peak(dtype) x efficiency), bytes / (HBM x gemm_memory_efficiency)) + overhead.
//              efficiency = gemm_efficiency(dtype) x wave utilisation x k / (k + gemm_k_overhead), where the output
//              is cut into tiles (128x256, 256x128, or 128x128 at gemm_small_tile_efficiency: the best), tiles run in
//              waves over the SMs and a partial last wave idles SMs; when there are fewer tiles than SMs, k is split
//              (split-K) to fill them.
//              float8 operands run at the fp8 peak (an error on GPUs without float8).
//   attention  flash-style fused kernel: causal FLOPs (AttentionOp::flops) at attention_{fwd,bwd}_efficiency (x the
//              ratio of the SDPA kernel that runs, training.sdpa_backend: attention_<backend>_{fwd,bwd}_ratio) x wave
//              utilisation of batch x heads x seq/128 CTAs, plus b x heads x s(s+1)/2 scores x
//              attention_{fwd,bwd}_score_ns (0 on GPUs; a CPU's exp per score, whatever the head dim).
//   the rest   memory-bound: HBM bytes / (HBM x memory_bound_efficiency) + launch overhead. Bytes per kind:
//              elementwise: ElementwiseOp::bytes x the eager traffic factor of norms / rope / activations, or
//              the compiled one (training.compile, implied by async TP, where CostParams::compile_fuses), AdamW x
//              optimizer_traffic_factor (CostParams); embedding fwd: ids + gathered rows read and written; embedding
//              bwd: zeroed and written table + gradient rows read and accumulated (at embedding_bwd_efficiency);
//              cross-entropy: logits read once per pass (row_max, sum_exp), read + d_logits written (backward),
//              in fp32 after an upcast pass when CostParams::loss_in_fp32 (torchtitan's loss), the exp
//              stages (sum_exp, backward) times CostParams::loss_traffic_factor (1 on GPUs; a CPU's exp per logit);
//              float8 casts: amax reads x, cast reads x and writes 1 byte per element, times
//              fp8_cast_traffic_factor (1 on GPUs; software rounding on a CPU).
//   storage    CostParams::float_storage_bytes (0 on GPUs; 4 on the cpu device, which keeps every float tensor in
//              fp32) replaces the dtype's size in GEMM operand bytes, casts and collectives (sim/timeline/timeline.cc).
// Times are microseconds.

#include "plans/program/program.h"
#include "sim/cost/cost_params.h"
#include "sim/gpu_spec.h"

namespace tptune {

struct ComputeEstimate {
  double time_us = 0;
  double flops = 0;       // useful FLOPs (0 for memory-bound ops)
  double bytes = 0;       // HBM bytes moved
  double efficiency = 0;  // of the bounding peak (FLOP rate, or HBM bandwidth when memory_bound)
  bool memory_bound = false;
};

ComputeEstimate gemm_cost(const GemmOp& g, const GpuSpec& gpu, const CostParams& c);
// `dtype` is the element type of q/k/v (bf16 in mixed-precision training).
// `backend`: the SDPA kernel that runs (Training::sdpa_backend as sdpa_kernel() resolves it; flash, or auto_ for a
// device's own kernel, prices at attention_{fwd,bwd}_efficiency; the others at that times their ratio).
ComputeEstimate attention_cost(const AttentionOp& a, DType dtype, const GpuSpec& gpu, const CostParams& c,
                               SdpaBackend backend = SdpaBackend::flash);
// The SDPA kernel a Program's attention runs on `gpu` (resolve_sdpa_backend of its training settings, the kernel its
// plan's framework fixes (Plan::attention_kernel) and the GPU's architecture; auto_ for the cpu device's own kernel).
SdpaBackend sdpa_kernel(const Training& t, SdpaBackend framework_kernel, const GpuSpec& gpu);
// The rate of `backend`'s kernel over the flash backend's, forward or backward (1 for flash and auto_).
double attention_backend_ratio(SdpaBackend backend, bool backward, const CostParams& c);
// A memory-bound kernel moving `bytes` at `efficiency` of the HBM bandwidth, plus `overhead_us`.
ComputeEstimate memory_bound_cost(double bytes, double efficiency, double overhead_us, const GpuSpec& gpu);
// Any non-collective op of `p` (tensor dtypes are looked up in the Program). Throws for collectives.
ComputeEstimate compute_cost(const Op& op, const Program& p, const GpuSpec& gpu, const CostParams& c);
// The eager torchtitan module whose kernels an elementwise fn stands for, and whether it is the module's backward:
// its traffic factor prices the fn's bytes in compute_cost() (CostParams' norm_, rope_ and activation_ factors, the
// compiled_ ones in a compiled Program, whose fused ops count their own bytes), and the calibration's fit
// (sim/calibrate/fit.cc) fits each module's factors to the ops it names. none: a fn priced at its bytes (AdamW at
// optimizer_traffic_factor).
struct EagerModule {
  enum Kind { none, norm, rope, activation } kind = none;
  bool backward = false;
};
EagerModule eager_module(ElementwiseOp::Fn f);

// Kernels the host launches for `op` (what CostParams::eager_dispatch_us / compiled_dispatch_us is paid per, see
// sim/timeline/timeline.h): 1 per op, except eager composite modules, whose kernel count is taken as their traffic
// factor rounded (norm_traffic_factor 9 for torchtitan's eager RMSNorm, which launches 8: x.float(), pow, mean, add,
// rsqrt, mul, type_as, mul; its backward 15 for 14; SiLU(a) x b 2), and a float8 amax fused into its producer (0).
// Collectives: 1.
int launched_kernels(const Op& op, const Program& p, const CostParams& c);
// The host's time to issue `op`: launched_kernels() x compiled_dispatch_us when the Program runs compiled (training
// .compile, or implied by async TP, where CostParams::compile_fuses), else x eager_dispatch_us; 0 for an op of the
// forward or backward (any phase but the optimizer's) when `graph_replayed` (replays_cuda_graph()).
double dispatch_us(const Op& op, const Program& p, const CostParams& c, bool graph_replayed);
// dispatch_us() of every op of `p`, segment by segment, appended to `out` (the Program's compilation and rate read
// once: the scheduler and cost_ops() ask for every op of every Program the search models).
void append_dispatch_us(const Program& p, const CostParams& c, bool graph_replayed, std::vector<double>& out);
// Whether the step's forward and backward replay a captured CUDA graph, so that the host issues none of their
// kernels one by one: torchtitan 0.3's trainer wraps its forward+backward (model, loss, loss.backward(): FSDP's and
// TP's collectives included) in a CUDA graph by default (TrainingConfig.disable_cuda_graphs false; trainer.py
// wrap_with_cuda_graph, distributed/cudagraph.py), on a CUDA device, and refuses the graphs with a pipeline and with
// expert parallelism through its default token dispatcher (_validate_cuda_graphs: tptune's export turns them off
// there, and so prices them eager). Gradient clipping and the optimizer step run outside the graph, eager. The
// replay's own launch, once per step, is not priced. Plans of the dtensor family run eager.
bool replays_cuda_graph(const Program& p, const GpuSpec& gpu);

}  // namespace tptune
