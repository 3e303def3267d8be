#pragma once
// Kernel-level public measurements: one YAML file per source in profiles/kernels/ (profiles/kernels/README.md states
// the schema). `tp-plan calibrate --kernels DIR` fits the architecture-level cost terms to them
// (sim/calibrate/kernel_fit.h); the end-to-end fit to the public record (sim/calibrate/published_fit.h) then moves
// only the software stack's terms and what no kernel source covers.
//
//   std::vector<KernelSource> k = load_kernel_record("profiles/kernels");
//
// A file:
//   source:       {id, citation, repository + path + commit | paper, section, measurement}
//   measurements: - {id, gpu (a preset; absent: a part without one, recorded and not fitted), gpu_as_printed, kernel,
//                    backend, dtype, shape, figure, burst (gemm_sustained only), unit, quote, architecture (a part
//                    without a preset: its die's kernel generation, as gpu_architectures() names them; with one, it
//                    is the preset's), power_limit_W and power_source (gemm_sustained only, together: the board
//                    power limit the sustained figure was held at, in W (0, 5000], and where that limit is stated
//                    when the quote does not print it)}
// kernel: gemm (shape {m, n, k}: A (m, k) @ B (k, n); dtype bf16 | fp16 | fp8), gemm_sustained (a GEMM rate the part
// holds once saturated at its power limit, `figure`, printed beside the short-burst rate of the same part and dtype,
// `burst`, in the same unit; the shape is the sustained figure's; a part-level figure: their ratio is the part's
// CostParams::sustained_tensor_fraction, it fits no architecture term), attention_fwd | attention_bwd |
// attention_fwd_bwd (backend flash2 | flash3 | cudnn | ...; optional shape {batch, seq, heads, head_dim, causal}),
// memory_bound (a streaming kernel; fraction of HBM bandwidth), all_reduce | all_gather | reduce_scatter (shape
// {ranks, bytes}; busbw), grouped_gemm_fwd_bwd (a mixture of experts' grouped GEMM forward and backward, y = A W^T
// over `groups` groups of m / groups rows: the output, grad-input and grad-weight GEMMs, 6 m n k FLOPs; shape {m, n,
// k, groups} required; unit us, the time as printed; fits CostParams::grouped_gemm_factor). unit: TFLOPS | PFLOPS |
// fraction_of_peak | GBps | us (the figure as printed, in its unit; GBps for collectives only, us for grouped GEMMs
// only, fraction_of_peak of the datasheet's dense peak or HBM bandwidth).
// Checks (tptune::Error, one line "<file>:<line>: <key>: ..."): every key known, the required ones present; source.id
// unique over the folder; measurement ids unique in a file; a commit of 40 hex digits; `gpu` a known preset; a figure
// > 0 (a fraction in (0, 1.5]); the unit one the kernel can have; a gemm shape's m, n, k and a collective's ranks and
// bytes present and in range.
#include <optional>
#include <string>
#include <vector>

#include "plans/model/dtype.h"
#include "sim/calibrate/source_citation.h"

namespace tptune {

enum class KernelKind {
  gemm,
  gemm_sustained,
  attention_fwd,
  attention_bwd,
  attention_fwd_bwd,
  memory_bound,
  all_reduce,
  all_gather,
  reduce_scatter,
  grouped_gemm_fwd_bwd
};
enum class KernelUnit { tflops, pflops, fraction_of_peak, gbps, us };
const char* to_string(KernelKind k);
const char* to_string(KernelUnit u);
bool is_attention(KernelKind k);
bool is_gemm(KernelKind k);  // gemm or gemm_sustained
bool is_collective(KernelKind k);

struct KernelMeasurement {
  std::string id;
  std::string at;              // "<file>:<line>" of the measurement, for reports and errors
  std::string gpu;             // the preset; empty: a part tptune has no preset for (not fitted)
  std::string gpu_as_printed;  // as the source names the part
  KernelKind kind = KernelKind::gemm;
  std::string backend;  // as the source names it: "flash2", "cudnn", "nccl ring", "torch.mm (cuBLAS)"
  DType dtype = DType::bf16;
  // gemm: m, n, k (0: not stated: large, priced at the asymptote). attention: batch, seq, heads, head_dim (0: not
  // stated), causal. collectives: ranks, bytes.
  int64_t m = 0, n = 0, k = 0;
  int64_t groups = 0;  // grouped_gemm_fwd_bwd: the groups m is split into
  int64_t batch = 0, seq = 0, heads = 0, head_dim = 0;
  bool causal = true;
  int ranks = 0;
  int64_t bytes = 0;
  double figure = 0;
  double burst = 0;  // gemm_sustained: the short-burst figure printed beside it, in the same unit
  // The die's kernel generation ("hopper"): the preset's, or the `architecture` key of a part without one; empty:
  // not stated.
  std::string architecture;
  double power_limit_W = 0;  // gemm_sustained: the power limit `figure` was held at; 0: not stated
  std::string power_source;  // where power_limit_W is stated
  KernelUnit unit = KernelUnit::tflops;
  std::string quote;
  bool has_shape() const;
  // The figure as FLOP/s (TFLOPS, PFLOPS), a fraction of the peak (fraction_of_peak), bytes/s (GBps) or FLOP/s of
  // a grouped GEMM's forward and backward (us: 6 m n k over the time).
  double value() const;
};

struct KernelSource : SourceCitation {
  std::string section;
  std::vector<KernelMeasurement> measurements;  // in file order
};

// Every *.yaml of `dir`, sorted by file name. Throws tptune::Error for a folder that does not exist or holds no
// *.yaml, and for any error of a file (above).
std::vector<KernelSource> load_kernel_record(const std::string& dir);
// One file's text; `name` stands in for the file in errors.
KernelSource parse_kernel_source(const std::string& text, const std::string& name);

}  // namespace tptune
