#pragma once
// The cost model's tunable parameters: efficiencies and latencies, as data in one struct.
//
// Hardware peaks live in the GPU specs (sim/gpus/*.yaml); this struct says how much of them real kernels and
// collectives reach, and what fixed costs they pay. The defaults below are what we believe for Hopper-class GPUs
// from public measurements (each with its source); calibration (`tp-plan calibrate`, sim/calibrate/) replaces
// them with a fit of measured profiles. All times are in microseconds.

#include <array>
#include <cstdint>
#include <vector>

#include "plans/dtype.h"
#include "plans/placement.h"

namespace tptune {

// A curve over the number of ranks of an intra-node collective: `value[i]` at `ranks[i]`, interpolated linearly in
// log2(ranks) and held constant outside.
struct RankCurve {
  std::array<double, 3> ranks{2, 4, 8};
  std::array<double, 3> value{1, 1, 1};
  double at(int n) const;
};

// A measured alpha-beta curve of one collective on one intra-node group size (a calibration's fit of nccl-tests-style
// data): time = alpha_us + S x bus_factor(kind, ranks) / busbw, S the full tensor's bytes (sim/comm_cost.h).
struct MeasuredCollective {
  CollectiveKind kind = CollectiveKind::all_reduce;
  int ranks = 2;
  double alpha_us = 0;
  double busbw_GBps = 1;
  // The measured medians, (size S in bytes, time in us), S strictly ascending. With two or more, a size inside their
  // range takes the time interpolated linearly in S between its two neighbours (a measured curve need not be one
  // alpha-beta line: MPI and NCCL switch algorithms and protocols with the size), a size below the first takes the
  // first time, and a size above the last takes the alpha-beta line.
  std::vector<std::array<double, 2>> points;
  double time_us(CollectiveKind k, double bytes) const;  // of this curve (k: its kind, for the bus factor)
};

struct CostParams {
  // ---- Compute: GEMMs --------------------------------------------------------------------------------------------
  // Fraction of the dense peak a large, well-shaped GEMM reaches, before the shape terms below (wave quantization
  // and the per-tile k overhead take another ~4% at 8192^3). bf16/fp16: an 8192^3 bf16 GEMM measured ~790 TFLOP/s on
  // an H200 (80% of 989; REFERENCE.md), and public cuBLAS H100 runs land at 70-80%.
  double gemm_efficiency = 0.84;
  // float8 (e4m3/e5m2 operands) on the fp8 peak: public cuBLASLt H100 measurements reach ~1.2-1.45 PFLOP/s at 8192^3
  // (about 65-73% of 1979); the cast/scale kernels are separate ops in the Program and costed as memory-bound.
  double gemm_fp8_efficiency = 0.72;
  // float8 rowwise (per-row scales applied in the GEMM epilogue, CUTLASS rowwise-scaled kernels) runs below the
  // tensorwise cuBLAS kernel: torchao's float8 README and torchtitan's float8 docs report smaller end-to-end speedups
  // for `rowwise` than for `tensorwise` on the same model. Multiplies gemm_fp8_efficiency for rowwise plans.
  double gemm_fp8_rowwise_factor = 0.9;
  // fp32 GEMMs (CUDA-core rate; fp32 training is for CPU verification, rarely simulated).
  double gemm_fp32_efficiency = 0.80;
  // Output tile of one CTA (cuBLAS/CUTLASS Hopper kernels use 128x128 .. 128x256 tiles); tiles are spread in waves
  // over the GPU's SMs, and a partial last wave wastes the idle SMs (wave quantization). Both orientations of the
  // tile are tried and the better one is taken (cuBLAS heuristics pick per shape).
  int gemm_tile_m = 128;
  int gemm_tile_n = 256;
  // Mid-size outputs get more CTAs from 128x128 tiles (cuBLAS heuristics choose them there), which reach a little
  // less of the peak than the large tile (less reuse per loaded operand).
  int gemm_small_tile = 128;
  double gemm_small_tile_efficiency = 0.90;
  // Per-tile fixed work (prologue, epilogue, pipeline fill) in units of k: efficiency x k / (k + gemm_k_overhead).
  // Small-k GEMMs (weight gradients of thin layers, attention projections of few heads) run far below peak.
  double gemm_k_overhead = 128;
  // Fraction of HBM bandwidth a GEMM's operand traffic reaches when it is memory-bound (skinny GEMMs).
  double gemm_memory_efficiency = 0.85;
  // Fixed cost per GEMM kernel (launch, ramp-up and tail), on top of the roofline.
  double gemm_overhead_us = 2.0;

  // ---- Compute: attention (flash-style fused kernel, causal FLOPs of AttentionOp::flops) -------------------------
  // FlashAttention-3 paper (Shah et al. 2024): on H100 bf16, head_dim 128, causal, long sequences, FA2 reaches
  // ~35-40% of peak forward and FA3 ~60-75%; backward runs lower. torchtitan's SDPA runs the flash (FA2-class)
  // kernel unless the cuDNN backend is chosen; we take FA2-class figures, a little above its forward.
  double attention_fwd_efficiency = 0.40;
  double attention_bwd_efficiency = 0.33;
  int attention_block_q = 128;  // query rows per CTA (wave quantization over batch x heads x seq/128)
  double attention_overhead_us = 4.0;
  // Time per attention score (one query-key pair of one head: b x heads x s(s+1)/2 causal pairs) on top of the FLOP
  // roofline, in nanoseconds. 0 on GPUs: flash kernels hide the softmax exp behind the tensor-core matmuls. A CPU
  // kernel pays an exp (and the max/normalise passes) per score whatever the head dim, which is why its attention
  // cost is not proportional to its FLOPs (2*b*h*s^2*d): at small head dims the exps dominate. Forward and backward
  // (which recomputes P: one more exp per score, and dS = P * (dP - D)).
  double attention_fwd_score_ns = 0;
  double attention_bwd_score_ns = 0;

  // ---- Compute: memory-bound ops (norms, rope, activations, residual adds, casts, embedding, loss) ---------------
  // Fraction of datasheet HBM bandwidth. A device-to-device copy reached 4.3 of 4.8 TB/s on an H200 (0.9,
  // REFERENCE.md); eager norm/activation kernels with reductions land lower.
  double memory_bound_efficiency = 0.80;
  // Launch overhead per memory-bound kernel (3-5 us on Hopper with the CPU ahead of the GPU).
  double memory_bound_overhead_us = 4.0;
  // HBM traffic of torchtitan's eager modules over the fused-kernel bytes the Program counts (ElementwiseOp::bytes).
  // RMSNorm runs as ~7 composite kernels in fp32 (x.float(), pow, mean, rsqrt, mul, type_as, mul: ~36 bytes per
  // element against 4 fused; PyTorch's newer fused rms_norm gets close to 1); rotary embedding goes through complex
  // views in fp32 (~5x); SiLU(a) * b is two kernels (~1.7x); residual adds are one kernel. With torch.compile all of
  // these fuse: set them to 1. Defaults sit between the composite and the fused forms.
  double norm_traffic_factor = 6.0;
  double rope_traffic_factor = 4.0;
  double activation_traffic_factor = 1.7;
  // Cross-entropy stages that compute an exp per logit (sum of exp, backward) over their byte count: 1 where they
  // are memory-bound (GPUs); a CPU is bound by the exps, and calibration finds the factor (sim/gpus/cpu.yaml).
  double loss_traffic_factor = 1.0;
  // With torch.compile (training.compile, torchtitan --compile.enable) inductor emits one kernel per norm, rope and
  // activation that reads its inputs and writes its outputs once: exactly the fused bytes the Program counts.
  // (The eager defaults above are what the same modules cost without it.)
  double compiled_norm_traffic_factor = 1.0;
  double compiled_rope_traffic_factor = 1.0;
  double compiled_activation_traffic_factor = 1.0;
  // Whether the device's runtime applies torch.compile's fusion at all (1: the compiled factors above and the fused
  // amax below apply when training.compile is on, or implied by async TP). 0 on the cpu device: tp-run executes the
  // Program's kernels one by one, compiled or not.
  int compile_fuses = 1;
  // Compiled float8 casts: inductor fuses the tensorwise amax reduction into the kernel that produces the tensor
  // (norm, activation, or the previous GEMM's epilogue for gradients), so the amax stage neither re-reads the tensor
  // nor launches a kernel; the cast itself (which needs the global scale first) stays one read + one 1-byte write.
  bool compiled_fuses_amax = true;
  // Float8 cast stage (CastFp8Op::Stage::cast) over its bytes: 1 where the cast is a memory-bound kernel (GPUs); a
  // device that emulates float8 in software rounds each element with scalar code (kernels/cpu/float8.cc: frexp,
  // floor, ldexp per element) and is bound by that, not by bytes (sim/gpus/cpu.yaml).
  double fp8_cast_traffic_factor = 1.0;
  // Bytes one floating-point element occupies in device memory and on the wire, whatever its IR dtype; 0: the
  // dtype's own size (GPUs). The CPU backend stores every float tensor as fp32 (runtime/backend.h), so a float8
  // all-gather moves 4 bytes per element there, not 1; the cast writes 4 bytes. Applied to collectives, casts and
  // GEMM operand traffic (the Program's elementwise byte counts already use the training dtype).
  int float_storage_bytes = 0;
  // Embedding backward (sort + segmented accumulate, atomics) reaches a fraction of the memory-bound rate.
  double embedding_bwd_efficiency = 0.35;
  // torchtitan's loss upcasts the logits (cross_entropy(pred.float(), ...)): the loss kernels read and write fp32,
  // after a cast pass, and an fp32 copy of the logits and of their gradient live through the head's backward.
  bool loss_in_fp32 = true;
  // AdamW runs as a multi-tensor (foreach/fused) kernel: one launch covers many parameters, so the launch cost per
  // parameter tensor is small.
  double optimizer_overhead_us = 0.5;
  // AdamW's time over its bytes (param, grad, two moments read; param and moments written): 1 where the fused kernel
  // is memory-bound (GPUs); a CPU loop pays a sqrt and a divide per element (kernels/cpu/adamw.cc) and is bound by
  // them (sim/gpus/cpu.yaml).
  double optimizer_traffic_factor = 1.0;

  // ---- Communication (NCCL-style alpha-beta) ---------------------------------------------------------------------
  // Achievable bus bandwidth as a fraction of the link's line rate (busbw of nccl-tests), for ring all-gather /
  // reduce-scatter / all-reduce inside an NVSwitch node, by group size. 8 GPUs: ~370 GB/s of 450 on 8xH100
  // (nccl-tests issues #212, #272); 2 and 4 GPUs: busbw of the autoparallel H100 fits (algbw 537 / 434 GB/s for
  // 1 GB all-gathers -> busbw 268 / 325 of 450).
  RankCurve ring_busbw_efficiency{{2, 4, 8}, {0.60, 0.72, 0.82}};
  // NVLS (NVLink SHARP) all-reduce busbw over line rate: 8xH100 ~475 GB/s busbw of 450 (in-switch reduction beats
  // the ring; nccl-tests issues #212, #290), 8xH200 475; 2 and 4 GPUs from the autoparallel all-reduce fits (algbw
  // 324 / 236 GB/s -> busbw 324 / 354).
  RankCurve nvls_busbw_efficiency{{2, 4, 8}, {0.72, 0.79, 1.055}};
  // Inter-node: NDR 400 Gb/s InfiniBand reaches 46-49 GB/s per NIC in nccl-tests (issue #267): 0.94 of 50.
  double network_busbw_efficiency = 0.94;
  // Base latencies per collective call (NCCL src/graph/tuning.cc, Simple / LL protocols; ring and tree alike).
  double simple_base_latency_us = 8.4;
  double ll_base_latency_us = 6.6;
  // LL's per-hop latency relative to Simple's (tuning.cc: NVLink 0.6 vs 3.4 us, network 2.7 vs 14 us: ~0.18).
  double ll_hop_latency_ratio = 0.18;
  // LL moves 8-byte lines carrying 4 data bytes and NCCL caps its per-channel rate: a fraction of Simple's busbw.
  double ll_bandwidth_fraction = 0.3;
  // NVLS all-reduce latency (independent of group size: one pass through the switch). The autoparallel H100 fit
  // gives ~31 us for an 8-GPU all-reduce.
  double nvls_latency_us = 30.0;
  // Async TP ring steps (symmetric-memory copy-engine pulls): fixed latency per step and fraction of the link's
  // bandwidth reached by one peer-to-peer transfer.
  double p2p_latency_us = 5.0;
  double p2p_bandwidth_efficiency = 0.80;
  // Calibrated curves (empty by default): where one matches a collective's kind and group size inside a node, it
  // replaces the algorithm model above (sim/comm_cost.h).
  std::vector<MeasuredCollective> measured_collectives;
  const MeasuredCollective* measured(CollectiveKind k, int ranks) const;

  // ---- Devices that share a machine (CPU ranks) -------------------------------------------------------------------
  // Compute and memory rate of one rank while every core of its machine runs a rank, over its rate alone. 1 for GPUs
  // (each has its own); CPU ranks share caches, memory bandwidth and (on a VM) physical cores: on the 2-vCPU VM of
  // sim/gpus/cpu.yaml, GEMMs of a tp-2 run measured ~0.73x the per-FLOP rate of the same run at tp 1. Applied to
  // measured runs of more than one rank (sim/calibrate/fit.h: measurement_cluster), with the cores/ranks share when
  // ranks outnumber cores.
  double concurrent_rank_rate = 1.0;
  // When ranks outnumber cores (CPU ranks oversubscribed: tp 4 on 2 cores), each rank of an overlapped step runs at
  // cores/ranks of that rate times this: the time lost to the turns themselves (context switches, caches refilled
  // after another rank ran, a rank holding a core while it polls a collective). 1 for GPUs. Fitted from `tp-run
  // bench gemm` run at more ranks than cores beside a run at no more (the "sweep" wall of both, fit.h).
  double oversubscribed_efficiency = 1.0;
  // Whether a collective runs while the rank computes (1: GPUs, where NCCL kernels run on their own streams). 0: the
  // CPU backend, where MPI progresses a non-blocking collective only inside MPI calls and tp-run has no progress
  // thread, so a collective takes its time on the rank's one thread: the timeline (sim/timeline.h) then runs
  // collectives on the compute stream, and all their time is exposed.
  int comm_overlaps_compute = 1;
  // A collective inside a training step over the same collective in `tp-run bench collectives`, for the calibrated
  // curves (measured_collectives) only. 1 for GPUs. CPU ranks: the benchmark reuses the same buffers, so that its
  // data sits in the cores' caches, while a step's buffers were last touched by other ops or by the other rank:
  // measured on the 2-core VM, a 64 KiB reduce-scatter in a step took 1.4-2.5x its benchmark time. Fitted by
  // `tp-plan calibrate` from the collectives of the profiles against the benchmark's curves (fit.h).
  double collective_step_factor = 1.0;

  // ---- Memory ----------------------------------------------------------------------------------------------------
  // Memory the training process holds besides tensors: CUDA context, cuBLAS workspaces and NCCL buffers (~1-2 GiB
  // on Hopper), plus caching-allocator fragmentation as a fraction of the tensor peak.
  double memory_runtime_overhead_GiB = 1.5;
  double memory_fragmentation = 0.05;
  // Unsharded compute copies of block parameters alive at once: the block being computed and the one FSDP
  // prefetches (the schedule issues each block's all-gather one block ahead).
  int blocks_in_flight = 2;
};

// Bytes per element of `t` as the device stores it (CostParams::float_storage_bytes; int32 and the like unchanged).
inline int stored_bytes_per_element(DType t, const CostParams& c) {
  return c.float_storage_bytes > 0 ? c.float_storage_bytes : bytes_per_element(t);
}
// A byte count of `t` elements (a collective's `bytes`) as the device moves them.
inline int64_t stored_bytes(int64_t bytes, DType t, const CostParams& c) {
  return c.float_storage_bytes > 0 ? bytes / bytes_per_element(t) * c.float_storage_bytes : bytes;
}

// The defaults above (a named constant, so that callers can say what they use).
inline const CostParams& default_cost_params() {
  static const CostParams p;
  return p;
}

}  // namespace tptune
