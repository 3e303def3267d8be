#include "sim/cost_param_fields.h"

#include <fmt/format.h>

#include <cmath>

#include "plans/error.h"
#include "plans/yaml_util.h"

namespace tptune {

namespace {

// One table row per scalar field: name, range, and accessors generated from the member pointer.
#define TPTUNE_D(field, lo, hi)                                                                                \
  CostParamField {                                                                                             \
#field, lo, hi,                                                                                            \
        [](const CostParams& c) { return static_cast<double>(c.field); }, [](CostParams & c,                   \
                                                                             double v) { c.field = v; }, false \
  }
#define TPTUNE_I(field, lo, hi)                                                                                   \
  CostParamField {                                                                                                \
#field, lo, hi,                                                                                               \
        [](const CostParams&                                                                                      \
               c) { return static_cast<double>(c.field); }, [](CostParams & c,                                    \
                                                               double v) { c.field = static_cast<int>(v); }, true \
  }

}  // namespace

const std::vector<CostParamField>& cost_param_fields() {
  // Efficiencies are fractions of a peak: (0, 4] leaves room for a spec whose peak is low, as a CPU preset's is on a
  // faster host (sim/gpus/cpu.yaml's 32 GFLOP/s fp32 was measured on a ~2 GHz host; a 3.1 GHz EPYC runs the same
  // Eigen build at 50: a fitted GEMM efficiency of 1.55). Overheads and
  // latencies in microseconds up to 1 s. Traffic factors are ratios of bytes moved to fused bytes.
  static const std::vector<CostParamField> fields = {
      TPTUNE_D(gemm_efficiency, 1e-4, 4.0),
      TPTUNE_D(gemm_fp8_efficiency, 1e-4, 4.0),
      TPTUNE_D(gemm_fp8_rowwise_factor, 1e-3, 2.0),
      TPTUNE_D(gemm_fp32_efficiency, 1e-4, 4.0),
      TPTUNE_I(gemm_tile_m, 1, 4096),
      TPTUNE_I(gemm_tile_n, 1, 4096),
      TPTUNE_I(gemm_small_tile, 1, 4096),
      TPTUNE_D(gemm_small_tile_efficiency, 1e-3, 1.5),
      TPTUNE_D(gemm_k_overhead, 0, 1e6),
      TPTUNE_D(gemm_memory_efficiency, 1e-4, 1.5),
      TPTUNE_D(gemm_overhead_us, 0, 1e6),
      TPTUNE_D(attention_fwd_efficiency, 1e-5, 4.0),
      TPTUNE_D(attention_bwd_efficiency, 1e-5, 4.0),
      TPTUNE_I(attention_block_q, 1, 4096),
      TPTUNE_D(attention_overhead_us, 0, 1e6),
      TPTUNE_D(attention_fwd_score_ns, 0, 1e6),
      TPTUNE_D(attention_bwd_score_ns, 0, 1e6),
      TPTUNE_D(memory_bound_efficiency, 1e-4, 4.0),
      TPTUNE_D(memory_bound_overhead_us, 0, 1e6),
      TPTUNE_D(norm_traffic_factor, 1e-2, 100),
      TPTUNE_D(rope_traffic_factor, 1e-2, 100),
      TPTUNE_D(activation_traffic_factor, 1e-2, 100),
      TPTUNE_D(loss_traffic_factor, 1e-2, 1000),
      TPTUNE_D(embedding_bwd_efficiency, 1e-4, 10),
      TPTUNE_D(fp8_cast_traffic_factor, 1e-2, 1000),
      TPTUNE_I(float_storage_bytes, 0, 8),
      TPTUNE_I(compile_fuses, 0, 1),
      TPTUNE_I(loss_in_fp32, 0, 1),
      TPTUNE_D(optimizer_overhead_us, 0, 1e6),
      TPTUNE_D(optimizer_traffic_factor, 1e-2, 1000),
      TPTUNE_D(network_busbw_efficiency, 1e-4, 1.5),
      TPTUNE_D(simple_base_latency_us, 0, 1e6),
      TPTUNE_D(ll_base_latency_us, 0, 1e6),
      TPTUNE_D(ll_hop_latency_ratio, 0, 100),
      TPTUNE_D(ll_bandwidth_fraction, 1e-3, 10),
      TPTUNE_D(nvls_latency_us, 0, 1e6),
      TPTUNE_D(p2p_latency_us, 0, 1e6),
      TPTUNE_D(p2p_bandwidth_efficiency, 1e-4, 10),
      TPTUNE_D(concurrent_rank_rate, 0.05, 1.0),
      TPTUNE_D(oversubscribed_efficiency, 0.05, 1.0),
      TPTUNE_I(comm_overlaps_compute, 0, 1),
      TPTUNE_D(collective_step_factor, 0.1, 10),
      TPTUNE_D(memory_runtime_overhead_GiB, 0, 1e4),
      TPTUNE_D(memory_fragmentation, 0, 10),
      TPTUNE_I(blocks_in_flight, 1, 1024),
  };
  return fields;
}

#undef TPTUNE_D
#undef TPTUNE_I

const CostParamField* find_cost_param(std::string_view name) {
  for (const auto& f : cost_param_fields())
    if (f.name == name) return &f;
  return nullptr;
}

void set_cost_param(CostParams& c, std::string_view name, double value, const std::string& where) {
  const CostParamField* f = find_cost_param(name);
  if (!f) {
    std::vector<std::string_view> names;
    for (const auto& g : cost_param_fields()) names.push_back(g.name);
    throw Error(
        fmt::format("{}: {}: unknown cost parameter (known: {})", where, yaml::shown(name), fmt::join(names, ", ")));
  }
  if (!std::isfinite(value) || value < f->lo || value > f->hi || (f->integral && value != std::floor(value)))
    throw Error(fmt::format("{}: {}: expected {} in [{}, {}], got {}", where, name,
                            f->integral ? "an integer" : "a number", f->lo, f->hi, value));
  f->set(c, value);
}

CostParams device_cost_params(const GpuSpec& gpu) {
  CostParams c = default_cost_params();
  for (const auto& [name, value] : gpu.cost_params) set_cost_param(c, name, value, gpu.origin);
  return c;
}

}  // namespace tptune
