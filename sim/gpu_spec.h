#pragma once
// One GPU's figures, as data: the presets in sim/gpus/<name>.yaml (embedded into the library at build time) or an
// inline `cluster.gpu` map of a config, read by the same loader.
//
// File format (every key required except name/description; a figure is {value: V, source: "..."} or, in inline
// specs, a plain value):
//   name: h100-sxm
//   description: NVIDIA H100 SXM5 80 GB
//   bf16_tflops, fp16_tflops, fp8_tflops, fp32_tflops   dense peaks (fp8 0: no float8 tensor cores)
//   hbm_bandwidth_GBps, memory_GiB                      HBM bandwidth (1e9 B/s) and capacity (2^30 B)
//   sm_count                                            streaming multiprocessors (wave quantization)
//   nvlink_bandwidth_GBps, nvlink_latency_us            per GPU per direction; per-hop latency of a ring step
//   nvswitch, nvls                                      all-to-all NVSwitch in the node; NVLink SHARP (NCCL NVLS)
//   network_bandwidth_GBps, network_latency_us          per GPU (one NIC each), per direction; per-hop latency
//   architecture (optional)                             the kernel generation: ampere, hopper, blackwell, cpu (the
//                                                       architecture-level terms it shares, sim/calibrate/kernel_fit.h)
//   cost_params (optional)                              map of CostParams fields this device changes
//                                                       (sim/cost/cost_param_fields.h names them): {value, source} each
//   calibration (optional)                              what the preset's figures were fitted to (absent:
//                                                       uncalibrated), the line every prediction prints (sim/trust.h):
//     runs: N                                           measured runs the fit used (an integer >= 1)
//     sources: [id, ...]                                their sources (profiles/published ids), one or more
//     mean_error: F                                     mean |error| of tokens/s over those runs, a fraction
//     loso_mean_error: F (optional)                     the same, each source predicted by a fit without it
//     loao_mean_error: F (optional)                     the record's runs on other architectures, predicted with
//                                                       this fit's stack terms (leave-one-architecture-out)
//   kernel_sources (optional)                           ids of the kernel-level sources (profiles/kernels) its
//                                                       architecture's terms are compared with
//   power_limit_W (optional)                            the board power limit it runs at, in W (0, 5000]: with the
//                                                       sustained GEMM rates its die holds at other limits
//                                                       (profiles/kernels), the clock a power cap leaves
//                                                       (sim/calibrate/kernel_fit.h)
// Errors are tptune::Error "<file>:<line>: <key>: expected ..., got ...".

#include <yaml-cpp/yaml.h>

#include <map>
#include <string>
#include <vector>

#include "plans/model/dtype.h"

namespace tptune {

// The `calibration` block of a spec: what its figures were fitted to. `runs` 0: absent (uncalibrated).
struct PresetCalibration {
  int runs = 0;
  std::vector<std::string> sources;
  double mean_error = 0;        // fraction (0.05 = 5 %)
  double loso_mean_error = -1;  // fraction; < 0: not given
  double loao_mean_error = -1;  // fraction; < 0: not given
  bool present() const { return runs > 0; }
};

struct GpuSpec {
  std::string name;
  std::string description;
  double bf16_tflops = 0, fp16_tflops = 0, fp8_tflops = 0, fp32_tflops = 0;
  double hbm_bandwidth_GBps = 0;
  double memory_GiB = 0;
  int sm_count = 0;
  double nvlink_bandwidth_GBps = 0, nvlink_latency_us = 0;
  bool nvswitch = false, nvls = false;
  std::string architecture;                 // "hopper", ...; empty: not stated (an inline spec)
  std::vector<std::string> kernel_sources;  // profiles/kernels ids its architecture's terms rest on
  double power_limit_W = 0;                 // the board power limit it runs at; 0: not stated
  double network_bandwidth_GBps = 0, network_latency_us = 0;
  // CostParams fields this device sets (the `cost_params` map, in file order; see sim/cost/cost_param_fields.h).
  std::vector<std::pair<std::string, double>> cost_params;
  PresetCalibration calibration;
  std::map<std::string, std::string> sources;  // key -> source line (empty for plain inline values)
  std::string origin;                          // "sim/gpus/h100-sxm.yaml" or "config.yaml:12" for inline specs

  bool has_float8() const { return fp8_tflops > 0; }
  // Dense tensor-core peak for GEMM operands of `t`, in FLOP/s: float8 formats at the fp8 rate, fp32 at the fp32
  // rate. Throws tptune::Error naming the GPU when `t` is a float8 format and the GPU has no float8 tensor cores.
  double peak_flops(DType t) const;
  double memory_bytes() const { return memory_GiB * 1073741824.0; }
};

// Parses a spec from a YAML map; `file` names it in errors (lines come from the node's marks, 1-based).
GpuSpec parse_gpu_spec(const YAML::Node& node, const std::string& file);
// A named preset; throws tptune::Error "<where>: unknown GPU preset 'x' (known: a100-sxm-80gb, ...)".
GpuSpec gpu_preset(const std::string& name, const std::string& where = "cluster.gpu");
std::vector<std::string> gpu_preset_names();
// The architectures a spec's `architecture` names: ampere, hopper, blackwell, cpu.
const std::vector<std::string>& gpu_architectures();

}  // namespace tptune
