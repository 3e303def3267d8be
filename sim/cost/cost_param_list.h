// The fields of CostParams (sim/cost/cost_params.h), each with its type, default and documentation: the one list that
// generates the struct's members and the table that sets them by name (sim/cost/cost_param_fields.h). A new cost
// parameter is one line here.
//
// No include guard: a file that expands the list defines both macros, includes this file, and undefines them.
//   TPTUNE_COST_PARAM(type, name, default, lo, hi);  a scalar that device presets (`cost_params:` in sim/gpus/*.yaml)
//                                                    and calibration files set by name, to a value in [lo, hi]
//                                                    (int and bool fields take integral values)
//   TPTUNE_COST_FIELD(type, name, default...);       a member the table does not name (set in code only); the
//                                                    default is the member's brace initialiser
// The table lists its fields in the order of this file: `tp-plan calibrate` prints the fields a fit did not determine
// in that order, and an unknown name's error lists the known ones in it.
//
// Ranges: efficiencies are fractions of a peak: (0, 4] leaves room for a spec whose peak is low, as a CPU preset's is
// on a faster host (sim/gpus/cpu.yaml's 32 GFLOP/s fp32 was measured on a ~2 GHz host; a 3.1 GHz EPYC runs the same
// Eigen build at 50: a fitted GEMM efficiency of 1.55). Overheads and latencies in microseconds up to 1 s. Traffic
// factors are ratios of bytes moved to fused bytes.

#if !defined(TPTUNE_COST_PARAM) || !defined(TPTUNE_COST_FIELD)
#error "sim/cost_param_list.h: define TPTUNE_COST_PARAM and TPTUNE_COST_FIELD before including it"
#endif

// ---- Compute: GEMMs --------------------------------------------------------------------------------------------
// Fraction of the dense peak a large, well-shaped GEMM reaches, before the shape terms below (wave quantization
// and the per-tile k overhead take another ~4% at 8192^3). bf16/fp16: an 8192^3 bf16 GEMM measured ~790 TFLOP/s on
// an H200 (80% of 989), and public cuBLAS H100 runs land at 70-80%.
TPTUNE_COST_PARAM(double, gemm_efficiency, 0.84, 1e-4, 4.0);
// float8 (e4m3/e5m2 operands) on the fp8 peak: public cuBLASLt H100 measurements reach ~1.2-1.45 PFLOP/s at 8192^3
// (about 65-73% of 1979); the cast/scale kernels are separate ops in the Program and costed as memory-bound.
TPTUNE_COST_PARAM(double, gemm_fp8_efficiency, 0.72, 1e-4, 4.0);
// float8 rowwise (torchao's `rowwise` recipe: per-row scales applied in the GEMM epilogue, torch._scaled_mm's
// rowwise-scaled kernels) over the tensorwise cuBLAS kernel: multiplies gemm_fp8_efficiency for rowwise plans. A
// stack term (sim/cost/cost_levels.h): the recipe and the kernel torch calls for it are torchao's and torch's choice,
// so every GPU preset shares it. 0.6636: fitted to the public record (tp-plan calibrate --published profiles/published
// --gpu h100-sxm-hbm2e-500w, with tensor_clock_fraction, attention_fwd_efficiency, attention_bwd_efficiency and
// gemm_fp8_efficiency; docs/calibration.md, "The shipped fit"), from the prior 0.90 (torchao's float8 README and
// torchtitan's float8 docs: smaller end-to-end speedups for `rowwise` than for `tensorwise` on the same model). Only
// torchtitan-asynctp-h100-202506 ran rowwise: without that source the fit keeps the prior and its rowwise runs are
// 25-32 % optimistic. Mechanism (pytorch/torchtitan#1207, pytorch/ao#2410): rowwise float8 slows the small
// attention.wk/wv linears most, which the default filter converts.
TPTUNE_COST_PARAM(double, gemm_fp8_rowwise_factor, 0.6636, 1e-3, 2.0);
// float8 operand layout copies: torch._scaled_mm (cuBLASLt's float8 GEMMs) takes A row-major and B column-major,
// i.e. both operands K-major, and torchao's Float8Tensor mm (torchao/float8/float8_ops.py, preprocess_addmm) copies
// an operand that is not: `a.contiguous()` and `b.t().contiguous().t()`. In a float8 linear that is the weight in the
// grad_input GEMM, and grad_output and the input in the grad_weight GEMM (torchao/float8/float8_linear.py:
// grad_output.t() @ input): a read and a write of tokens x features one-byte elements each, a memory-bound kernel
// per copy. Multiplies those copy bytes: 1 on GPUs; 0 on a device whose GEMM takes any layout (the cpu device: the
// CPU backend's float8 emulation multiplies in place).
TPTUNE_COST_PARAM(double, fp8_layout_copy_factor, 1.0, 0, 100);
// fp32 GEMMs (CUDA-core rate; fp32 training is for CPU verification, rarely simulated).
TPTUNE_COST_PARAM(double, gemm_fp32_efficiency, 0.80, 1e-4, 4.0);
// Grouped GEMMs (GemmOp::groups > 1: a mixture of experts' routed experts, torch._grouped_mm) over the rate of a dense
// GEMM of the same shape: multiplies the GEMM efficiency of every dtype. The grouped kernel is another kernel than
// cuBLAS's dense one: torchao's microbenchmark of bf16 torch._grouped_mm forward + backward on a B200
// (profiles/kernels/torchao-moe-grouped-mm.yaml; torch 2.10.0a0) runs at 0.40-0.46 of the rate tptune prices the same
// GEMMs at (burst scale) with 2-8 groups, 0.434 as `tp-plan calibrate --kernels` fits it (sim/gpus/b200.yaml;
// tests/sim/grouped_gemm_test.cc). 1: priced as dense GEMMs (parts without a measurement).
TPTUNE_COST_PARAM(double, grouped_gemm_factor, 1.0, 1e-3, 2.0);
// Sustained tensor-core clock over the clock of the datasheet's dense peak: a power-capped part (torchtitan's 500 W
// HBM2e H100 against the 700 W SXM5 the figures describe) throttles its clocks under dense matmul load, so every
// tensor-core rate (bf16/fp16/float8 GEMMs and attention, not fp32 CUDA-core GEMMs or memory-bound kernels) runs at
// this fraction of the spec's peak. 1: the part runs at the clock its datasheet figures assume. A preset sets it
// (sim/gpus/h100-sxm-hbm2e-500w.yaml), and `tp-plan calibrate` can fit it by name like any cost parameter.
TPTUNE_COST_PARAM(double, tensor_clock_fraction, 1.0, 0.1, 1.0);
// Sustained tensor-core rate under the part's power limit over its short-burst rate: kernel-level GEMM and attention
// figures (ml-engineering's MAMF, torchao's roofline, the FlashAttention papers) time short bursts that run at the
// boost clock, while a training step keeps the chip saturated at its power limit, where it holds a lower rate
// (stas00/ml-engineering compute/accelerator/README.md, "Maximum Achievable and Sustainable Matmul FLOPS": MSMF over
// MAMF 0.888 on H200 SXM, 0.83 on B200; profiles/kernels/ml-engineering-msmf.yaml). Multiplies every tensor-core rate
// as tensor_clock_fraction does (bf16/fp16/float8 GEMMs and attention, not fp32 or memory-bound kernels). 1: no burst
// above the sustained rate (the cpu device). Each GPU preset sets it with its source.
TPTUNE_COST_PARAM(double, sustained_tensor_fraction, 1.0, 0.1, 1.0);
// Output tile of one CTA (cuBLAS/CUTLASS Hopper kernels use 128x128 .. 128x256 tiles); tiles are spread in waves
// over the GPU's SMs, and a partial last wave wastes the idle SMs (wave quantization). Both orientations of the
// tile are tried and the better one is taken (cuBLAS heuristics pick per shape).
TPTUNE_COST_PARAM(int, gemm_tile_m, 128, 1, 4096);
TPTUNE_COST_PARAM(int, gemm_tile_n, 256, 1, 4096);
// Mid-size outputs get more CTAs from 128x128 tiles (cuBLAS heuristics choose them there), which reach a little
// less of the peak than the large tile (less reuse per loaded operand).
TPTUNE_COST_PARAM(int, gemm_small_tile, 128, 1, 4096);
TPTUNE_COST_PARAM(double, gemm_small_tile_efficiency, 0.90, 1e-3, 1.5);
// Per-tile fixed work (prologue, epilogue, pipeline fill) in units of k at the bf16 rate: efficiency x k / (k +
// gemm_k_overhead). Small-k GEMMs (weight gradients of thin layers, attention projections of few heads) run far below
// peak. The work is a time: float8 operands stream k peak(fp8)/peak(bf16) times faster, so for them it counts that
// many times more k (sim/cost/compute_cost.cc), and float8's gain shrinks with k.
TPTUNE_COST_PARAM(double, gemm_k_overhead, 128, 0, 1e6);
// Fraction of HBM bandwidth a GEMM's operand traffic reaches when it is memory-bound (skinny GEMMs).
TPTUNE_COST_PARAM(double, gemm_memory_efficiency, 0.85, 1e-4, 1.5);
// Fixed cost per GEMM kernel (launch, ramp-up and tail), on top of the roofline.
TPTUNE_COST_PARAM(double, gemm_overhead_us, 2.0, 0, 1e6);

// ---- Compute: attention (flash-style fused kernel, causal FLOPs of AttentionOp::flops) -------------------------
// FlashAttention-3 paper (Shah et al. 2024): on H100 bf16, head_dim 128, causal, long sequences, FA2 reaches
// ~35-40% of peak forward and FA3 ~60-75%; backward runs lower. torchtitan's SDPA runs the flash (FA2-class)
// kernel unless the cuDNN backend is chosen; we take FA2-class figures, a little above its forward.
TPTUNE_COST_PARAM(double, attention_fwd_efficiency, 0.40, 1e-5, 4.0);
TPTUNE_COST_PARAM(double, attention_bwd_efficiency, 0.33, 1e-5, 4.0);
// query rows per CTA (wave quantization over batch x heads x seq/128)
TPTUNE_COST_PARAM(int, attention_block_q, 128, 1, 4096);
TPTUNE_COST_PARAM(double, attention_overhead_us, 4.0, 0, 1e6);
// Time per attention score (one query-key pair of one head: b x heads x s(s+1)/2 causal pairs) on top of the FLOP
// roofline, in nanoseconds. 0 on GPUs: flash kernels hide the softmax exp behind the tensor-core matmuls. A CPU
// kernel pays an exp (and the max/normalise passes) per score whatever the head dim, which is why its attention
// cost is not proportional to its FLOPs (2*b*h*s^2*d): at small head dims the exps dominate. Forward and backward
// (which recomputes P: one more exp per score, and dS = P * (dP - D)).
TPTUNE_COST_PARAM(double, attention_fwd_score_ns, 0, 0, 1e6);
TPTUNE_COST_PARAM(double, attention_bwd_score_ns, 0, 0, 1e6);
// The other SDPA kernels (training.sdpa_backend, plans/language/backends/sdpa_backend.h), as their rate over the flash
// backend's (FlashAttention-2, attention_{fwd,bwd}_efficiency above, and what a fit of them moves), forward and
// backward: the efficiency a kernel reaches is the flash figure times its ratio, so that a fitted flash efficiency
// (the 500 W part's clock and stack) carries to the kernel a user's torch picks.
//   cudnn      Hopper: cuDNN's fused flash kernels (cuDNN 9.19, torch 2.11's wheels) ran 0.568 of the H200's dense
//              peak forward and 0.450 backward in our profiles (profiles/h200/README.md: 8B and 70B, head dim 128,
//              seq 8192, causal), against FlashAttention-2's 0.35 forward on H100 (FlashAttention-3 paper's abstract,
//              profiles/kernels/flashattention-papers.yaml) and 0.33 backward (the flash prior above): 1.62 and 1.36.
//              Published H100 kernel runs agree in direction: pytorch/pytorch#128888 (drisspg's SDPA benchmark, H100,
//              fp16, causal, 16 heads of 128, seq 4096): flash 102.8 / 178.5 TFLOPS forward / backward, cuDNN 189.0 /
//              241.1 (1.84, 1.35); pytorch/pytorch#142132 (tritonbench, H100, seq 4608, head dim 128, forward): SDPA's
//              flash 329.5 TFLOPS, cuDNN 631.3 (1.92). Blackwell keeps the Hopper ratios (no public number;
//              torchtitan#1209: "B200 is much more performant than FAv2"); so does Ampere, where auto never picks
//              cuDNN (an explicit cudnn on an A100 is priced with them, untested).
//   efficient  the memory-efficient kernel (xformers' CUTLASS kernel, FlashAttention-1's tiling): FlashAttention-2's
//              abstract reports "around 2x speedup compared to FlashAttention", so half the flash rate (an
//              inference: the FA2 paper's charts that put xformers beside FlashAttention-1 are images).
//   flex       FlexAttention's Triton kernels: the PyTorch blog "FlexAttention: The Flexibility of PyTorch with the
//              Performance of FlashAttention" (August 2024): "90% of FlashAttention2's performance in the forward
//              pass and 85% in the backward pass".
TPTUNE_COST_PARAM(double, attention_cudnn_fwd_ratio, 1.62, 1e-2, 10);
TPTUNE_COST_PARAM(double, attention_cudnn_bwd_ratio, 1.36, 1e-2, 10);
TPTUNE_COST_PARAM(double, attention_efficient_fwd_ratio, 0.5, 1e-2, 10);
TPTUNE_COST_PARAM(double, attention_efficient_bwd_ratio, 0.5, 1e-2, 10);
TPTUNE_COST_PARAM(double, attention_flex_fwd_ratio, 0.90, 1e-2, 10);
TPTUNE_COST_PARAM(double, attention_flex_bwd_ratio, 0.85, 1e-2, 10);

// ---- Compute: memory-bound ops (norms, rope, activations, residual adds, casts, embedding, loss) ---------------
// Fraction of datasheet HBM bandwidth. A device-to-device copy reached 4.3 of 4.8 TB/s on an H200 (0.9,
// measured); eager norm/activation kernels with reductions land lower.
TPTUNE_COST_PARAM(double, memory_bound_efficiency, 0.80, 1e-4, 4.0);
// Launch overhead per memory-bound kernel (3-5 us on Hopper with the CPU ahead of the GPU).
TPTUNE_COST_PARAM(double, memory_bound_overhead_us, 4.0, 0, 1e6);
// HBM traffic of torchtitan's eager modules over the fused-kernel bytes the Program counts (ElementwiseOp::bytes),
// forward and backward apart. tests/torch/count_eager_traffic.py records the ATen kernels that eager autograd runs for
// torchtitan 9dec370's modules (the tree of its December 2024 H100 benchmark, torch 1963fc8 of 2024-12-23, before
// PyTorch's fused CUDA rms_norm of pytorch/pytorch#153666, which reports "around 9x speedup vs unfused") and sums each
// kernel's input and output bytes:
//   RMSNorm (models/norms.py: x.float(), pow, mean, add, rsqrt, mul, type_as, mul by the weight): 8 kernels, 36.1
//     bytes per element against the fused 4 (bf16 read and write): 9.0; its backward 14 kernels, 88.1 against 6: 14.7.
//   Rotary embedding (apply_rotary_emb: complex views of x.float(), multiply, view_as_real, type_as): 5.1 forward, 5.4
//     backward.
//   SiLU(a) * b (FeedForward): silu and mul, 10 bytes per element against 6: 1.67; backward 3 kernels, 18 against
//     10: 1.8. The same factors price GELU (one kernel each way in eager: an overestimate for GPT-style models).
// With torch.compile all of these fuse (the compiled factors below).
TPTUNE_COST_PARAM(double, norm_traffic_factor, 9.0, 1e-2, 100);
TPTUNE_COST_PARAM(double, norm_bwd_traffic_factor, 14.7, 1e-2, 100);
TPTUNE_COST_PARAM(double, rope_traffic_factor, 5.1, 1e-2, 100);
TPTUNE_COST_PARAM(double, rope_bwd_traffic_factor, 5.4, 1e-2, 100);
TPTUNE_COST_PARAM(double, activation_traffic_factor, 1.67, 1e-2, 100);
TPTUNE_COST_PARAM(double, activation_bwd_traffic_factor, 1.8, 1e-2, 100);
// Cross-entropy stages that compute an exp per logit (sum of exp, backward) over their byte count: 1 where they
// are memory-bound (GPUs); a CPU is bound by the exps, and calibration finds the factor (sim/gpus/cpu.yaml).
TPTUNE_COST_PARAM(double, loss_traffic_factor, 1.0, 1e-2, 1000);
// Embedding backward (sort + segmented accumulate, atomics) reaches a fraction of the memory-bound rate.
TPTUNE_COST_PARAM(double, embedding_bwd_efficiency, 0.35, 1e-4, 10);
// Float8 cast stage (CastFp8Op::Stage::cast) over its bytes: 1 where the cast is a memory-bound kernel (GPUs); a
// device that emulates float8 in software rounds each element with scalar code (kernels/cpu/float8.cc: frexp,
// floor, ldexp per element) and is bound by that, not by bytes (sim/gpus/cpu.yaml).
TPTUNE_COST_PARAM(double, fp8_cast_traffic_factor, 1.0, 1e-2, 1000);
// Bytes one floating-point element occupies in device memory and on the wire, whatever its IR dtype; 0: the
// dtype's own size (GPUs). The CPU backend stores every float tensor as fp32 (runtime/backend.h), so a float8
// all-gather moves 4 bytes per element there, not 1; the cast writes 4 bytes. Applied to collectives, casts and
// GEMM operand traffic (the Program's elementwise byte counts already use the training dtype).
TPTUNE_COST_PARAM(int, float_storage_bytes, 0, 0, 8);
// With torch.compile (training.compile, torchtitan --compile.enable) inductor emits one kernel per norm, rope and
// activation that reads its inputs and writes its outputs once: exactly the fused bytes the Program counts. A compiled
// Program has those kernels as ops (plans/lower/rewrite/compile_fusion.h: the residual add inside the norm, add_rmsnorm
// and rmsnorm_bwd_add; q's and k's rope in one rope_qk), each priced by its own bytes at its module's factor. (The
// eager defaults above are what the same modules cost without it.)
TPTUNE_COST_PARAM(double, compiled_norm_traffic_factor, 1.0, 1e-2, 100);
TPTUNE_COST_PARAM(double, compiled_rope_traffic_factor, 1.0, 1e-2, 100);
TPTUNE_COST_PARAM(double, compiled_activation_traffic_factor, 1.0, 1e-2, 100);
// Whether the device's runtime applies torch.compile's fusion at all (1: the compiled factors above and the fused
// amax below apply when training.compile is on, or implied by async TP). 0 on the cpu device: tp-run's CPU kernels
// run a compiled Program's fused ops at the eager factors' rates (the fused ops' bytes are counted all the same).
TPTUNE_COST_PARAM(int, compile_fuses, 1, 0, 1);
// Compiled float8 casts: inductor fuses the tensorwise amax reduction into the kernel that produces the tensor when
// it generates that kernel (a norm, activation or rope, forward or backward: CastFp8Op::producer_elementwise), so the
// amax stage neither re-reads the tensor nor launches a kernel. A tensor from a cuBLAS GEMM, the attention kernel or
// a collective (the wo input, the gradients arriving by all-gather) gets its own amax reduction: inductor calls those
// kernels as they are (no max-autotune epilogues in torchtitan's compile). The cast itself (which needs the global
// scale first) stays one read + one 1-byte write. A compiled Program carries the fused amax in its producer op
// (ElementwiseOp::amax_of); with this false (or compile_fuses 0) that op pays the amax's read and launch too.
TPTUNE_COST_FIELD(bool, compiled_fuses_amax, true);
// torchtitan's loss upcasts the logits (cross_entropy(pred.float(), ...)): the loss kernels read and write fp32,
// after a cast pass, and fp32 tensors of the logits' size live through the head's backward (sim/memory.cc: three with
// aten's loss, four with loss_parallel's).
TPTUNE_COST_PARAM(bool, loss_in_fp32, true, 0, 1);
// AdamW runs as a multi-tensor (foreach/fused) kernel: one launch covers many parameters, so the launch cost per
// parameter tensor is small.
TPTUNE_COST_PARAM(double, optimizer_overhead_us, 0.5, 0, 1e6);
// AdamW's time over its bytes (param, grad, two moments read; param and moments written): 1 where the fused kernel
// is memory-bound (GPUs); a CPU loop pays a sqrt and a divide per element (kernels/cpu/adamw.cc) and is bound by
// them (sim/gpus/cpu.yaml).
TPTUNE_COST_PARAM(double, optimizer_traffic_factor, 1.0, 1e-2, 1000);

// ---- Communication (NCCL-style alpha-beta) ---------------------------------------------------------------------
// Achievable bus bandwidth as a fraction of the link's line rate (busbw of nccl-tests), for ring all-gather /
// reduce-scatter / all-reduce inside an NVSwitch node, by group size. 8 GPUs: ~370 GB/s of 450 on 8xH100
// (nccl-tests issues #212, #272); 2 and 4 GPUs: busbw of the autoparallel H100 fits (algbw 537 / 434 GB/s for
// 1 GB all-gathers -> busbw 268 / 325 of 450). 72 GPUs (one GB200 NVL72 domain): no ring measurement found, the
// 8-GPU value held.
TPTUNE_COST_FIELD(RankCurve, ring_busbw_efficiency, {2, 4, 8, 72}, {0.60, 0.72, 0.82, 0.82});
// NVLS (NVLink SHARP) all-reduce busbw over line rate: 8xH100 ~475 GB/s busbw of 450 (in-switch reduction beats
// the ring; nccl-tests issues #212, #290), 8xH200 475; 2 and 4 GPUs from the autoparallel all-reduce fits (algbw
// 324 / 236 GB/s -> busbw 324 / 354). 72 GPUs: a full GB200 NVL72 rack's all_reduce_perf, 839.16 GB/s busbw at 4 GiB
// out of place (coreweave/nccl-tests#43), of NVLink 5's 900 per direction: 0.932.
TPTUNE_COST_FIELD(RankCurve, nvls_busbw_efficiency, {2, 4, 8, 72}, {0.72, 0.79, 1.055, 0.932});
// Inter-node: NDR 400 Gb/s InfiniBand reaches 46-49 GB/s per NIC in nccl-tests (issue #267): 0.94 of 50.
TPTUNE_COST_PARAM(double, network_busbw_efficiency, 0.94, 1e-4, 1.5);
// Base latencies per collective call (NCCL src/graph/tuning.cc, Simple / LL protocols; ring and tree alike).
TPTUNE_COST_PARAM(double, simple_base_latency_us, 8.4, 0, 1e6);
TPTUNE_COST_PARAM(double, ll_base_latency_us, 6.6, 0, 1e6);
// LL's per-hop latency relative to Simple's (tuning.cc: NVLink 0.6 vs 3.4 us, network 2.7 vs 14 us: ~0.18).
TPTUNE_COST_PARAM(double, ll_hop_latency_ratio, 0.18, 0, 100);
// LL moves 8-byte lines carrying 4 data bytes and NCCL caps its per-channel rate: a fraction of Simple's busbw.
TPTUNE_COST_PARAM(double, ll_bandwidth_fraction, 0.3, 1e-3, 10);
// NVLS all-reduce latency (independent of group size: one pass through the switch). The autoparallel H100 fit
// gives ~31 us for an 8-GPU all-reduce.
TPTUNE_COST_PARAM(double, nvls_latency_us, 30.0, 0, 1e6);
// Async TP ring steps (symmetric-memory copy-engine pulls): fixed latency per step and fraction of the link's
// bandwidth reached by one peer-to-peer transfer.
TPTUNE_COST_PARAM(double, p2p_latency_us, 5.0, 0, 1e6);
TPTUNE_COST_PARAM(double, p2p_bandwidth_efficiency, 0.80, 1e-4, 10);
// Compute slowed while a collective runs beside it (sim/timeline/timeline.h): a compute op's progress runs at 1 / (1 +
// s) for the part of it that overlaps a collective issued before it (s summed over the collectives running), so one
// fully overlapped takes (1 + s) x its time. NCCL kernels run one CTA per channel on SMs a GEMM then cannot use (a GEMM
// CTA of Hopper's 128x256 kernels holds a whole SM) and move their bytes through HBM: on an H100 NVLink node NCCL
// launches 16-32 channels (NCCL_MIN_CTAS / NCCL_MAX_CTAS; an FSDP all-gather beside a 132-CTA GEMM ran 24 CTAs in
// an Nsight trace on NVIDIA's developer forum, 18% of the 132 SMs), and a kernel-level study of compute beside
// communication on H100 and A100 (arXiv 2507.03114, "Characterizing Compute-Communication Overlap in
// GPU-Accelerated Distributed Deep Learning") measured compute kernels 18.9% slower on average (40% at most).
TPTUNE_COST_PARAM(double, overlap_compute_slowdown, 0.18, 0, 4);
// The same for async TP's ring steps (CollectiveKind::p2p): torch's micro-pipelined TP moves shards with
// Tensor.copy_ between symmetric-memory buffers (torch/distributed/_symmetric_memory/__init__.py,
// _pipelined_multi_all_gather_and_consume and _pipelined_produce_and_all2all: "p2p copies from different streams
// cannot overlap"), contiguous same-dtype copies that PyTorch issues as cudaMemcpyAsync on the copy engine: no SMs
// taken, only HBM traffic (a pull at ~360 GB/s of NVLink writes ~11% of an H100's 3.35 TB/s), which compute-bound
// GEMMs barely feel. The DMA-engine study of concurrent computation and communication (arXiv 2412.14335, ConCCL)
// finds copy-engine collectives remove most of the interference of SM-based ones.
TPTUNE_COST_PARAM(double, overlap_p2p_compute_slowdown, 0.03, 0, 4);
// Calibrated curves (empty by default): where one matches a collective's kind and group size inside a node, it
// replaces the algorithm model above (sim/cost/comm_cost.h).
TPTUNE_COST_FIELD(std::vector<MeasuredCollective>, measured_collectives);

// FSDP2's copy kernels around its collectives (sim/timeline/fsdp_copies.h: all-gather copy-in and copy-out, the
// reduce-scatter's chunk_cat, as _fsdp_collectives.py runs them) over the bytes that file counts: 1 where each is
// one memory-bound kernel reading and writing its bytes once (GPUs); 0 prices none (the cpu device, whose MPI
// collectives work on the tensors in place).
TPTUNE_COST_PARAM(double, fsdp_copy_traffic_factor, 1.0, 0, 100);

// ---- Host dispatch ---------------------------------------------------------------------------------------------
// Host time to issue one kernel (sim/timeline/timeline.h: the host issues the step's ops in order, each after the
// previous one's dispatch, independent of the GPU, and no kernel starts before the host has issued it; a step of
// kernels shorter than this is host bound). Eager PyTorch goes through Python, the pybind11 boundary, autocast and
// autograd's VariableType layer, the ATen dispatcher and the backend's launch: ~1 + 1 + 1-3 + 1-2 + 1-5 + 1-3 us,
// 5-25 us of CPU per op (the layer costs of the PyTorch dispatch path; Horace He's "Making Deep Learning Go Brrrr
// From First Principles" for the overhead-bound regime). Eager composite modules launch several kernels per op of
// the Program (sim/cost/compute_cost.h: launched_kernels).
TPTUNE_COST_PARAM(double, eager_dispatch_us, 10.0, 0, 1e6);
// With torch.compile (training.compile) inductor's generated wrapper calls its Triton launchers and the extern
// kernels (cuBLAS, flash attention) directly, without Python ops or the dispatcher per kernel, and fuses the
// composite modules into one kernel each: what remains is the launch itself (cudaLaunchKernel ~2-3 us).
TPTUNE_COST_PARAM(double, compiled_dispatch_us, 3.0, 0, 1e6);
// A mixture of experts' device-to-host sync under expert parallelism (ElementwiseOp::Fn::host_sync: the dispatcher's
// .tolist() of the exchanged token counts, torchtitan 0.3.0 token_dispatcher.py _sync_token_count_exchange): the
// host waits for the GPU to reach the copy, then issues the dispatch and everything after it from an empty queue.
// Priced as this fixed stall on the compute stream: a small D2H cudaMemcpy's latency (~5-10 us) plus the first
// kernels' launch latency the queue no longer hides. An estimate, not fitted: no MoE profile is in profiles/ yet.
TPTUNE_COST_PARAM(double, moe_host_sync_us, 20.0, 0, 1e6);

// ---- Devices that share a machine (CPU ranks) -------------------------------------------------------------------
// Compute and memory rate of one rank while every core of its machine runs a rank, over its rate alone. 1 for GPUs
// (each has its own); CPU ranks share caches, memory bandwidth and (on a VM) physical cores: on the 2-vCPU VM of
// sim/gpus/cpu.yaml, GEMMs of a tp-2 run measured ~0.73x the per-FLOP rate of the same run at tp 1. Applied to
// measured runs of more than one rank (sim/calibrate/fit.h: measurement_cluster), with the cores/ranks share when
// ranks outnumber cores.
TPTUNE_COST_PARAM(double, concurrent_rank_rate, 1.0, 0.05, 1.0);
// When ranks outnumber cores (CPU ranks oversubscribed: tp 4 on 2 cores), each rank of an overlapped step runs at
// cores/ranks of that rate times this: the time lost to the turns themselves (context switches, caches refilled
// after another rank ran, a rank holding a core while it polls a collective). 1 for GPUs. Fitted from `tp-run
// bench gemm` run at more ranks than cores beside a run at no more (the "sweep" wall of both, fit.h).
TPTUNE_COST_PARAM(double, oversubscribed_efficiency, 1.0, 0.05, 1.0);
// Whether a collective runs while the rank computes (1: GPUs, where NCCL kernels run on their own streams). 0: the
// CPU backend, where MPI progresses a non-blocking collective only inside MPI calls and tp-run has no progress
// thread, so a collective takes its time on the rank's one thread: the timeline (sim/timeline/timeline.h) then runs
// collectives on the compute stream, and all their time is exposed.
TPTUNE_COST_PARAM(int, comm_overlaps_compute, 1, 0, 1);
// A collective inside a training step over the same collective in `tp-run bench collectives`, for the calibrated
// curves (measured_collectives) only. 1 for GPUs. CPU ranks: the benchmark reuses the same buffers, so that its
// data sits in the cores' caches, while a step's buffers were last touched by other ops or by the other rank:
// measured on the 2-core VM, a 64 KiB reduce-scatter in a step took 1.4-2.5x its benchmark time. Fitted by
// `tp-plan calibrate` from the collectives of the profiles against the benchmark's curves (fit.h).
TPTUNE_COST_PARAM(double, collective_step_factor, 1.0, 0.1, 10);

// ---- Memory ----------------------------------------------------------------------------------------------------
// Memory the training process holds besides tensors: CUDA context, cuBLAS workspaces and NCCL buffers (~1-2 GiB
// on Hopper).
TPTUNE_COST_PARAM(double, memory_runtime_overhead_GiB, 1.5, 0, 1e4);
// What PyTorch's caching allocator reserves beyond the tensors it hands out, as a fraction of the tensor peak
// (MemoryReport::allocator_reserved = tensors x (1 + this), the figure torchtitan logs). c10/cuda/
// CUDACachingAllocator.cpp rounds every block up to 512 B (kMinBlockSize), serves requests under 1 MiB from 2 MiB
// segments (kSmallBuffer), requests of 1-10 MiB from 20 MiB segments (kLargeBuffer) and larger ones rounded up to 2
// MiB (kRoundLarge); it keeps freed segments reserved, pools them per stream (FSDP2's all-gather and reduce-scatter
// buffers are allocated on their own streams), and splits cached blocks, so the reserved peak exceeds the
// allocated one. A stack term (sim/cost/cost_levels.h): the allocator is PyTorch's, whatever the GPU, so every GPU
// preset shares it (the cpu device's tp-run has none: sim/gpus/cpu.yaml). No public kernel-level measurement gives
// the ratio for a training step; 0.1826 is fitted to the 12 peak memories of torchtitan-h100-202412 (torchtitan logs
// the caching allocator's reserved peak), alone and without regularisation after the tokens/s terms (tp-plan
// calibrate --published profiles/published --gpu h100-sxm-hbm2e-500w --fit memory_fragmentation --lambda 0): it moves
// memory only, so it does not interact with them, and its former prior 0.05 (the rounding and per-stream pools above)
// had no measurement behind it to pull toward. It also carries what the memory model misses of eager PyTorch (its
// elementwise temporaries: the record's eager runs measure 5 GiB over the compiled ones, the model predicts them
// equal).
TPTUNE_COST_PARAM(double, memory_fragmentation, 0.1826, 0, 10);
// Unsharded compute copies of block parameters alive at once: the block being computed and the one FSDP
// prefetches (the schedule issues each block's all-gather one block ahead).
TPTUNE_COST_PARAM(int, blocks_in_flight, 2, 1, 1024);
