#include "sim/cost/compute_cost.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "plans/util/error.h"

namespace tptune {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Whether torch.compile's fusion applies to this Program on this device (training.compile, implied by async TP; and
// CostParams::compile_fuses: not on the cpu device, whose runtime executes the Program's kernels one by one).
bool compile_fuses(const Program& p, const CostParams& c) {
  return c.compile_fuses && p.training.compiled(p.plan.async_tp);
}

// The share of a tensor-core rate a training step sustains: the clock a power cap leaves
// (CostParams::tensor_clock_fraction) times the sustained rate under the power limit over the short-burst rate the
// kernel figures were measured at (CostParams::sustained_tensor_fraction); fp32 runs on CUDA cores.
double tensor_clock(DType dtype, const CostParams& c) {
  return dtype == DType::fp32 ? 1.0 : c.tensor_clock_fraction * c.sustained_tensor_fraction;
}

// Fraction of `sms` x waves slots doing useful work when `ctas` equal CTAs run in waves.
double wave_utilisation(int64_t ctas, int sms) {
  if (ctas <= 0) return 1.0;
  int64_t waves = ceil_div(ctas, sms);
  return static_cast<double>(ctas) / static_cast<double>(waves * sms);
}

// Shape efficiency of an m x n x k GEMM for one tile orientation: tile padding x wave utilisation x k overhead,
// splitting k when the tiles alone cannot fill the SMs.
// A grouped GEMM (`groups` > 1) launches every group's tiles at once: its waves count them all, its padding is each
// group's (small per-expert m pads its last tile row).
double gemm_shape_efficiency(int64_t m, int64_t n, int64_t k, int64_t tm, int64_t tn, int sms, double k0,
                             int64_t groups = 1) {
  int64_t tiles = ceil_div(m, tm) * ceil_div(n, tn) * groups;
  // Split-K: at most enough splits to fill one wave, and each split keeps >= 512 of k.
  int64_t split = 1;
  if (tiles < sms) split = std::max<int64_t>(1, std::min<int64_t>(sms / tiles, k / 512));
  int64_t ctas = tiles * split;
  double padding = static_cast<double>(m * n * groups) / static_cast<double>(tiles * tm * tn);
  double kk = static_cast<double>(k) / static_cast<double>(split);
  return padding * wave_utilisation(ctas, sms) * (kk / (kk + k0));
}

// How many times faster float8 operands stream k than bf16 ones: peak(fp8) / peak(bf16), at least 1 (the cpu
// device emulates float8 at its fp32 rate).
double float8_k_rate(const GpuSpec& gpu) {
  const double bf16 = gpu.peak_flops(DType::bf16), fp8 = gpu.peak_flops(DType::fp8_e4m3);
  return bf16 > 0 && fp8 > bf16 ? fp8 / bf16 : 1.0;
}

}  // namespace

ComputeEstimate gemm_cost(const GemmOp& g, const GpuSpec& gpu, const CostParams& c) {
  ComputeEstimate e;
  DType op_type = is_float8(g.a_dtype) || is_float8(g.b_dtype) ? DType::fp8_e4m3 : g.a_dtype;
  double peak = gpu.peak_flops(op_type);  // throws for float8 on GPUs without it
  double base = is_float8(op_type)       ? c.gemm_fp8_efficiency
                : op_type == DType::fp32 ? c.gemm_fp32_efficiency
                                         : c.gemm_efficiency;
  if (g.groups > 1) base *= c.grouped_gemm_factor;  // the grouped kernel (CostParams::grouped_gemm_factor)
  // 2mnk FLOPs: one multiply and one add per (i, j, l).
  e.flops = static_cast<double>(g.flops());
  // Operands read once, output written (and read when accumulating): mk*|A| + kn*|B| + mn*|C|*(1 or 2).
  // (x groups for a grouped GEMM: each group's operands and output)
  e.bytes = static_cast<double>(g.groups) *
            static_cast<double>(g.m * g.k * stored_bytes_per_element(g.a_dtype, c) +
                                g.k * g.n * stored_bytes_per_element(g.b_dtype, c) +
                                g.m * g.n * stored_bytes_per_element(g.c_dtype, c) * (g.accumulate ? 2 : 1));
  if (g.m <= 0 || g.n <= 0 || g.k <= 0) {
    e.time_us = 0;
    return e;
  }
  // The per-tile fixed work (prologue, epilogue: the bf16 output tile is written at the same speed whatever the
  // operands) takes a fixed time, which gemm_k_overhead states in k at the bf16 rate. float8 operands stream k at
  // peak(fp8) / peak(bf16) times that rate (2 on Hopper), so the same time is that many times more k: a float8 GEMM's
  // gain shrinks as k does (k 512: bf16 512/640 = 0.80 of the large-k rate, float8 512/768 = 0.67).
  const double k0 = is_float8(op_type) ? c.gemm_k_overhead * float8_k_rate(gpu) : c.gemm_k_overhead;
  const int64_t gr = g.groups;
  double shape =
      std::max({gemm_shape_efficiency(g.m, g.n, g.k, c.gemm_tile_m, c.gemm_tile_n, gpu.sm_count, k0, gr),
                gemm_shape_efficiency(g.m, g.n, g.k, c.gemm_tile_n, c.gemm_tile_m, gpu.sm_count, k0, gr),
                c.gemm_small_tile_efficiency *
                    gemm_shape_efficiency(g.m, g.n, g.k, c.gemm_small_tile, c.gemm_small_tile, gpu.sm_count, k0, gr)});
  // Tensor-core GEMMs run at the sustained clock a power cap leaves (CostParams::tensor_clock_fraction), at the rate a
  // chip saturated at its power limit holds (CostParams::sustained_tensor_fraction).
  double eff = base * shape * tensor_clock(op_type, c);
  double t_flops = e.flops / (peak * eff) * 1e6;
  double t_bytes = e.bytes / (gpu.hbm_bandwidth_GBps * 1e9 * c.gemm_memory_efficiency) * 1e6;
  e.memory_bound = t_bytes > t_flops;
  e.efficiency = e.memory_bound ? c.gemm_memory_efficiency : eff;
  e.time_us = std::max(t_flops, t_bytes) + c.gemm_overhead_us;
  if (is_float8(op_type) && c.fp8_layout_copy_factor > 0) {
    // An operand that is not K-major is copied first (CostParams::fp8_layout_copy_factor): A stored k x m
    // (trans_a), B stored k x n (not trans_b). Read and write of each element, a memory-bound kernel per copy.
    double copy_bytes = 0;
    int copies = 0;
    if (g.trans_a) copy_bytes += 2.0 * g.groups * g.m * g.k * stored_bytes_per_element(g.a_dtype, c), ++copies;
    if (!g.trans_b) copy_bytes += 2.0 * g.groups * g.k * g.n * stored_bytes_per_element(g.b_dtype, c), ++copies;
    const ComputeEstimate copy = memory_bound_cost(copy_bytes * c.fp8_layout_copy_factor, c.memory_bound_efficiency,
                                                   copies * c.memory_bound_overhead_us, gpu);
    e.bytes += copy.bytes;
    e.time_us += copy.time_us;
  }
  return e;
}

double attention_backend_ratio(SdpaBackend backend, bool backward, const CostParams& c) {
  switch (backend) {
    case SdpaBackend::cudnn:
      return backward ? c.attention_cudnn_bwd_ratio : c.attention_cudnn_fwd_ratio;
    case SdpaBackend::efficient:
      return backward ? c.attention_efficient_bwd_ratio : c.attention_efficient_fwd_ratio;
    case SdpaBackend::flex:
      return backward ? c.attention_flex_bwd_ratio : c.attention_flex_fwd_ratio;
    case SdpaBackend::auto_:
    case SdpaBackend::flash:
      break;
  }
  return 1.0;
}

SdpaBackend sdpa_kernel(const Training& t, SdpaBackend framework_kernel, const GpuSpec& gpu) {
  return resolve_sdpa_backend(t.sdpa_backend, framework_kernel, t.torch_version, gpu.architecture, t.sdpa_backend_at);
}

ComputeEstimate attention_cost(const AttentionOp& a, DType dtype, const GpuSpec& gpu, const CostParams& c,
                               SdpaBackend backend) {
  ComputeEstimate e;
  e.flops = static_cast<double>(a.flops());
  // q, o (and their gradients in backward) at n_heads; k, v at n_kv_heads: b*s*d per head each (v and o at
  // v_dim(): latent attention's v_head_dim). A ring-attention block (kv_seq set) reads keys() keys and values.
  const int64_t qo = a.batch * a.seq * a.n_heads * (a.head_dim + a.v_dim()),
                kv = a.batch * a.keys() * a.n_kv_heads * (a.head_dim + a.v_dim());
  e.bytes = static_cast<double>((qo + kv) * (a.backward ? 2 : 1) * bytes_per_element(dtype));
  if (e.flops <= 0) return e;
  int64_t ctas = a.batch * a.n_heads * ceil_div(a.seq, c.attention_block_q);
  double eff = (a.backward ? c.attention_bwd_efficiency : c.attention_fwd_efficiency) *
               attention_backend_ratio(backend, a.backward, c) * wave_utilisation(ctas, gpu.sm_count) *
               tensor_clock(dtype, c);
  double t_flops = e.flops / (gpu.peak_flops(dtype) * eff) * 1e6;
  double t_bytes = e.bytes / (gpu.hbm_bandwidth_GBps * 1e9 * c.memory_bound_efficiency) * 1e6;
  e.memory_bound = t_bytes > t_flops;
  e.efficiency = e.memory_bound ? c.memory_bound_efficiency : eff;
  // Per-score cost (CostParams::attention_{fwd,bwd}_score_ns; 0 on GPUs): b x heads x s(s+1)/2 causal pairs.
  const double score_ns = a.backward ? c.attention_bwd_score_ns : c.attention_fwd_score_ns;
  const double scores = static_cast<double>(a.batch) * static_cast<double>(a.n_heads) * static_cast<double>(a.seq) *
                        static_cast<double>(a.causal ? a.seq + 1 : 2 * a.keys()) / 2;
  e.time_us = std::max(t_flops, t_bytes) + scores * score_ns * 1e-3 + c.attention_overhead_us;
  return e;
}

ComputeEstimate memory_bound_cost(double bytes, double efficiency, double overhead_us, const GpuSpec& gpu) {
  ComputeEstimate e;
  e.bytes = bytes;
  e.memory_bound = true;
  e.efficiency = efficiency;
  e.time_us = bytes / (gpu.hbm_bandwidth_GBps * 1e9 * efficiency) * 1e6 + overhead_us;
  return e;
}

EagerModule eager_module(ElementwiseOp::Fn f) {
  using F = ElementwiseOp::Fn;
  // The fused ops of a compiled Program (ElementwiseOp's "Fused ops") are their module's. A switch, not a search: the
  // simulator asks once per elementwise op it prices.
  switch (f) {
    case F::rmsnorm:
    case F::layernorm:
    case F::add_rmsnorm:
      return {EagerModule::norm, false};
    case F::rmsnorm_bwd:
    case F::layernorm_bwd:
    case F::rmsnorm_bwd_add:
      return {EagerModule::norm, true};
    case F::rope:
    case F::rope_qk:
      return {EagerModule::rope, false};
    case F::rope_bwd:
    case F::rope_qk_bwd:
      return {EagerModule::rope, true};
    case F::swiglu:
    case F::gelu:
      return {EagerModule::activation, false};
    case F::swiglu_bwd:
    case F::gelu_bwd:
      return {EagerModule::activation, true};
    default:
      return {};
  }
}

namespace {

// Eager-module traffic over the fused bytes the Program counts (CostParams), forward and backward apart.
double traffic_factor(ElementwiseOp::Fn f, const CostParams& c, bool compiled) {
  const EagerModule m = eager_module(f);
  switch (m.kind) {
    case EagerModule::norm:
      return compiled ? c.compiled_norm_traffic_factor : m.backward ? c.norm_bwd_traffic_factor : c.norm_traffic_factor;
    case EagerModule::rope:
      return compiled ? c.compiled_rope_traffic_factor : m.backward ? c.rope_bwd_traffic_factor : c.rope_traffic_factor;
    case EagerModule::activation:
      return compiled     ? c.compiled_activation_traffic_factor
             : m.backward ? c.activation_bwd_traffic_factor
                          : c.activation_traffic_factor;
    case EagerModule::none:
      break;
  }
  return f == ElementwiseOp::Fn::adamw ? c.optimizer_traffic_factor : 1.0;
}

int elt(const Program& p, const std::vector<TensorId>& ts, size_t i, DType fallback) {
  return i < ts.size() ? bytes_per_element(p.tensor(ts[i]).dtype) : bytes_per_element(fallback);
}

}  // namespace

ComputeEstimate compute_cost(const Op& op, const Program& p, const GpuSpec& gpu, const CostParams& c) {
  const double eff = c.memory_bound_efficiency, ovh = c.memory_bound_overhead_us;
  if (auto* g = std::get_if<GemmOp>(&op.kind)) {
    if (is_rowwise(p.plan.float8) && (is_float8(g->a_dtype) || is_float8(g->b_dtype))) {
      CostParams rowwise = c;
      rowwise.gemm_fp8_efficiency *= c.gemm_fp8_rowwise_factor;
      return gemm_cost(*g, gpu, rowwise);
    }
    return gemm_cost(*g, gpu, c);
  }
  if (auto* a = std::get_if<AttentionOp>(&op.kind)) {
    DType t = op.inputs.empty() ? p.training.dtype : p.tensor(op.inputs[0]).dtype;
    return attention_cost(*a, t, gpu, c, sdpa_kernel(p.training, p.plan.attention_kernel, gpu));
  }
  if (auto* ew = std::get_if<ElementwiseOp>(&op.kind)) {
    if (ew->fn == ElementwiseOp::Fn::host_sync) {  // (CostParams::moe_host_sync_us)
      ComputeEstimate e;
      e.bytes = static_cast<double>(ew->bytes);
      e.time_us = c.moe_host_sync_us;
      return e;
    }
    bool adam = ew->fn == ElementwiseOp::Fn::adamw;
    const bool compiled = compile_fuses(p, c);
    ComputeEstimate e = memory_bound_cost(static_cast<double>(ew->bytes) * traffic_factor(ew->fn, c, compiled), eff,
                                          adam ? c.optimizer_overhead_us : ovh, gpu);
    if (ew->amax_of >= 0 && !(compiled && c.compiled_fuses_amax) &&
        static_cast<size_t>(ew->amax_of) < op.outputs.size()) {
      // The float8 amax folded into this op (ElementwiseOp::amax_of) where the device does not fuse it: one more read
      // of that output, in a kernel of its own (what the CastFp8Op amax stage costs).
      const TensorDesc& x = p.tensor(op.outputs[static_cast<size_t>(ew->amax_of)]);
      const ComputeEstimate amax = memory_bound_cost(
          static_cast<double>(numel(x.local_shape)) * stored_bytes_per_element(x.dtype, c), eff, ovh, gpu);
      e.bytes += amax.bytes;
      e.time_us += amax.time_us;
    }
    e.flops = 0;
    return e;
  }
  if (auto* em = std::get_if<EmbeddingOp>(&op.kind)) {
    double rows = static_cast<double>(em->tokens * em->dim_local);
    if (!em->backward) {
      // ids (4 B each) + rows read from the table and written out: tokens*dim*(2 x elt).
      int w = elt(p, op.outputs, 0, p.training.dtype);
      return memory_bound_cost(static_cast<double>(em->tokens) * 4 + 2 * rows * w, eff, ovh, gpu);
    }
    // Table zeroed and written (2 x vocab*dim), gradient rows read and accumulated (3 x tokens*dim).
    int w = elt(p, op.outputs, 0, p.training.dtype);
    double table = static_cast<double>(em->vocab_local * em->dim_local) * w;
    return memory_bound_cost(2 * table + 3 * rows * w + static_cast<double>(em->tokens) * 4,
                             eff * c.embedding_bwd_efficiency, ovh, gpu);
  }
  if (auto* ce = std::get_if<CrossEntropyOp>(&op.kind)) {
    const int in = elt(p, op.inputs, 0, p.training.dtype);  // the logits as the Program stores them
    const int w = c.loss_in_fp32 ? 4 : in;                  // as the loss kernels read them
    const double n = static_cast<double>(ce->tokens * ce->vocab_local);
    const double rows = static_cast<double>(ce->tokens);
    // The fp32 upcast is one more pass over the logits (read in, write fp32), paid by the first stage.
    const double upcast = c.loss_in_fp32 && in != 4 ? n * (in + 4) : 0;
    using S = CrossEntropyOp::Stage;
    const double f = c.loss_traffic_factor;
    switch (ce->stage) {
      case S::row_max:
        return memory_bound_cost(upcast + n * w + 4 * rows, eff, ovh, gpu);  // a max: no exp
      case S::sum_exp:
        return memory_bound_cost((n * w + 8 * rows) * f, eff, ovh, gpu);
      case S::target_logit:
        return memory_bound_cost(12 * rows, eff, ovh, gpu);
      case S::loss:
        return memory_bound_cost(12 * rows, eff, ovh, gpu);
      // Reads the logits, writes d_logits (fp32 with the upcast, then cast back: + n * (4 + in)).
      case S::backward:
        return memory_bound_cost((2 * n * w + (c.loss_in_fp32 && in != 4 ? n * (4 + in) : 0) + 16 * rows) * f, eff, ovh,
                                 gpu);
    }
  }
  if (auto* cf = std::get_if<CastFp8Op>(&op.kind)) {
    if (!gpu.has_float8()) gpu.peak_flops(cf->to);  // the same error as a float8 GEMM
    const DType src_t = op.inputs.empty() ? p.training.dtype : p.tensor(op.inputs[0]).dtype;
    double src = stored_bytes_per_element(src_t, c), dst = stored_bytes_per_element(cf->to, c);
    double n = static_cast<double>(cf->elements);
    // amax: read x; cast: read x, write 1 byte per element. Rowwise reduces each row, then casts (x read twice), and
    // writes the operand for both of its GEMM axes (rows for one GEMM, columns for the other): 2 reads + 2 bytes.
    // (dst: 1 byte, or the device's float storage; the cast stage x fp8_cast_traffic_factor, 1 on GPUs.)
    double bytes = cf->stage == CastFp8Op::Stage::amax ? n * src
                   : cf->rowwise                       ? n * (2 * src + 2 * dst) * c.fp8_cast_traffic_factor
                                                       : n * (src + dst) * c.fp8_cast_traffic_factor;
    const bool fused = c.compiled_fuses_amax && compile_fuses(p, c);
    if (cf->stage == CastFp8Op::Stage::amax && fused && cf->producer_elementwise)
      return ComputeEstimate{};  // fused into the producer's kernel (see CostParams::compiled_fuses_amax)
    if (cf->rowwise && fused) bytes = n * (src + 2 * dst) * c.fp8_cast_traffic_factor;  // row max + cast: x read once
    return memory_bound_cost(bytes, eff, ovh, gpu);
  }
  throw Error(std::string("compute_cost: ") + op.name + " is a collective");
}

namespace {
// launched_kernels() with compile_fuses() given.
int kernels(const Op& op, bool compiled, const CostParams& c) {
  if (auto* ew = std::get_if<ElementwiseOp>(&op.kind)) {
    const int amax = ew->amax_of >= 0 && !(compiled && c.compiled_fuses_amax) ? 1 : 0;  // its own reduction kernel
    if (compiled || ew->fn == ElementwiseOp::Fn::adamw) return 1 + amax;
    return std::max(1, static_cast<int>(std::lround(traffic_factor(ew->fn, c, false)))) + amax;
  }
  if (auto* cf = std::get_if<CastFp8Op>(&op.kind))
    if (cf->stage == CastFp8Op::Stage::amax && compiled && c.compiled_fuses_amax && cf->producer_elementwise) return 0;
  return 1;
}
}  // namespace

int launched_kernels(const Op& op, const Program& p, const CostParams& c) {
  return kernels(op, compile_fuses(p, c), c);
}

double dispatch_us(const Op& op, const Program& p, const CostParams& c, bool graph_replayed) {
  if (graph_replayed && op.phase != Phase::optimizer) return 0;
  const bool compiled = compile_fuses(p, c);
  return kernels(op, compiled, c) * (compiled ? c.compiled_dispatch_us : c.eager_dispatch_us);
}

void append_dispatch_us(const Program& p, const CostParams& c, bool graph_replayed, std::vector<double>& out) {
  const bool compiled = compile_fuses(p, c);
  const double rate = compiled ? c.compiled_dispatch_us : c.eager_dispatch_us;
  for (const Segment& s : p.segments)
    for (const Op& op : s.ops)
      out.push_back(graph_replayed && op.phase != Phase::optimizer ? 0.0 : kernels(op, compiled, c) * rate);
}

bool replays_cuda_graph(const Program& p, const GpuSpec& gpu) {
  return p.plan.framework == Framework::torchtitan_0_3 && p.plan.pp_degree <= 1 && p.ep <= 1 &&
         gpu.architecture != "cpu";
}

}  // namespace tptune
