#include "sim/cost/cost_levels.h"

#include <fmt/format.h>

#include <iterator>
#include <utility>

#include "plans/util/enum_names.h"
#include "plans/util/error.h"

namespace tptune {

namespace {

constexpr std::pair<std::string_view, CostLevel> kLevels[] = {
    // The part: the clock its power limit leaves, and its sustained rate there against a short burst's.
    {"tensor_clock_fraction", CostLevel::part},
    {"sustained_tensor_fraction", CostLevel::part},
    // The architecture's kernels (cuBLAS/CUTLASS GEMMs, flash attention, streaming kernels, NCCL).
    {"gemm_efficiency", CostLevel::architecture},
    {"grouped_gemm_factor", CostLevel::architecture},
    {"gemm_fp8_efficiency", CostLevel::architecture},
    {"gemm_fp32_efficiency", CostLevel::architecture},
    {"gemm_tile_m", CostLevel::architecture},
    {"gemm_tile_n", CostLevel::architecture},
    {"gemm_small_tile", CostLevel::architecture},
    {"gemm_small_tile_efficiency", CostLevel::architecture},
    {"gemm_k_overhead", CostLevel::architecture},
    {"gemm_memory_efficiency", CostLevel::architecture},
    {"gemm_overhead_us", CostLevel::architecture},
    {"attention_fwd_efficiency", CostLevel::architecture},
    {"attention_bwd_efficiency", CostLevel::architecture},
    {"attention_block_q", CostLevel::architecture},
    {"attention_overhead_us", CostLevel::architecture},
    {"attention_fwd_score_ns", CostLevel::architecture},
    {"attention_bwd_score_ns", CostLevel::architecture},
    {"attention_cudnn_fwd_ratio", CostLevel::architecture},
    {"attention_cudnn_bwd_ratio", CostLevel::architecture},
    {"attention_efficient_fwd_ratio", CostLevel::architecture},
    {"attention_efficient_bwd_ratio", CostLevel::architecture},
    {"attention_flex_fwd_ratio", CostLevel::architecture},
    {"attention_flex_bwd_ratio", CostLevel::architecture},
    {"memory_bound_efficiency", CostLevel::architecture},
    {"memory_bound_overhead_us", CostLevel::architecture},
    {"embedding_bwd_efficiency", CostLevel::architecture},
    {"loss_traffic_factor", CostLevel::architecture},
    {"fp8_cast_traffic_factor", CostLevel::architecture},
    {"float_storage_bytes", CostLevel::architecture},
    {"network_busbw_efficiency", CostLevel::architecture},
    {"simple_base_latency_us", CostLevel::architecture},
    {"ll_base_latency_us", CostLevel::architecture},
    {"ll_hop_latency_ratio", CostLevel::architecture},
    {"ll_bandwidth_fraction", CostLevel::architecture},
    {"nvls_latency_us", CostLevel::architecture},
    {"p2p_latency_us", CostLevel::architecture},
    {"p2p_bandwidth_efficiency", CostLevel::architecture},
    {"overlap_compute_slowdown", CostLevel::architecture},
    {"overlap_p2p_compute_slowdown", CostLevel::architecture},
    // The software stack: what eager PyTorch, torch.compile, torchao and FSDP2 launch and move.
    {"gemm_fp8_rowwise_factor", CostLevel::stack},
    {"fp8_layout_copy_factor", CostLevel::stack},
    {"norm_traffic_factor", CostLevel::stack},
    {"norm_bwd_traffic_factor", CostLevel::stack},
    {"rope_traffic_factor", CostLevel::stack},
    {"rope_bwd_traffic_factor", CostLevel::stack},
    {"activation_traffic_factor", CostLevel::stack},
    {"activation_bwd_traffic_factor", CostLevel::stack},
    {"compile_fuses", CostLevel::stack},
    {"loss_in_fp32", CostLevel::stack},
    {"optimizer_overhead_us", CostLevel::stack},
    {"optimizer_traffic_factor", CostLevel::stack},
    {"fsdp_copy_traffic_factor", CostLevel::stack},
    {"eager_dispatch_us", CostLevel::stack},
    {"compiled_dispatch_us", CostLevel::stack},
    {"compiled_norm_traffic_factor", CostLevel::stack},
    {"compiled_rope_traffic_factor", CostLevel::stack},
    {"compiled_activation_traffic_factor", CostLevel::stack},
    // torchtitan's token dispatcher's device-to-host sync (a PyTorch-stack choice: DeepEP-style dispatchers avoid it).
    {"moe_host_sync_us", CostLevel::stack},
    {"memory_runtime_overhead_GiB", CostLevel::stack},
    {"memory_fragmentation", CostLevel::stack},
    {"blocks_in_flight", CostLevel::stack},
    // Ranks sharing a machine (the cpu device).
    {"concurrent_rank_rate", CostLevel::host},
    {"oversubscribed_efficiency", CostLevel::host},
    {"comm_overlaps_compute", CostLevel::host},
    {"collective_step_factor", CostLevel::host},
};

}  // namespace

// CostLevel's enumerators, in declaration order.
constexpr std::string_view kCostLevelNames[] = {"part", "architecture", "stack", "host"};
static_assert(std::size(kCostLevelNames) == enum_count(CostLevel::host));

std::string_view to_string(CostLevel l) { return name_of(kCostLevelNames, l); }

CostLevel cost_param_level(std::string_view name) {
  for (const auto& [n, level] : kLevels)
    if (n == name) return level;
  throw Error(fmt::format(
      "{}: no level (part, architecture, stack) for this cost parameter: add it to sim/cost/cost_levels.cc", name));
}

}  // namespace tptune
