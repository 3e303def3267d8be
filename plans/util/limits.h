#pragma once
// The ranges of every quantity a user gives (config, plan, GPU spec, command-line options), checked where it is read
// so that an error names the file:line or the option. Generous but physical: each range is far above any model or
// cluster built so far (Llama 3 405B: dim 16384, 126 layers, 128 heads, ffn 53248, vocab 128256) and low enough that
// the products the lowering and simulator form fit 64-bit integers or fail with a clear error
// (plans/util/checked_math.h). docs/file-formats.md ("Config YAML") lists the same ranges.

#include <cstdint>

namespace tptune::limits {

struct IntRange {
  int64_t lo, hi;
};
struct RealRange {
  double lo, hi;
  bool lo_open;  // true: lo itself is not allowed (positive quantities)
};

// model
inline constexpr IntRange dim{1, 1 << 20};          // 1,048,576
inline constexpr IntRange n_layers{1, 10000};       // real models: up to ~200
inline constexpr IntRange n_heads{1, 1 << 16};      // 65,536 (also n_kv_heads)
inline constexpr IntRange head_dim{2, 1 << 16};     // 65,536; even (rope rotates pairs), checked with it
inline constexpr IntRange ffn_dim{1, 1 << 22};      // 4,194,304
inline constexpr IntRange vocab_size{1, 1 << 24};   // 16,777,216
inline constexpr IntRange multiple_of{1, 1 << 20};  // 1,048,576
// mixture of experts: routed experts per block (DeepSeek-V3 256, Qwen3-Next 512) and the low-rank widths of latent
// attention (DeepSeek-V3: q 1536, kv 512), the latter in dim's range
inline constexpr IntRange experts{1, 1 << 14};  // 16,384
inline constexpr RealRange route_scale{0, 1e6, true};
// training.moe_imbalance: the busiest ep rank's routed rows over the balanced share (1: balanced)
inline constexpr RealRange moe_imbalance{1, 1024, false};
inline constexpr RealRange ffn_dim_multiplier{0, 64, true};
inline constexpr RealRange norm_eps{0, 1, true};
// hardware: a board's power limit in W (the largest today: ~1,400)
inline constexpr RealRange power_limit_W{0, 5000, true};
inline constexpr RealRange rope_theta{0, 1e12, true};
// training (and search.local_batch_sizes, search.max_local_batch_size, plan local_batch_size, --local-batch-size)
inline constexpr IntRange seq_len{1, 1 << 24};           // 16,777,216 tokens
inline constexpr IntRange local_batch_size{1, 1 << 16};  // 65,536 sequences per data-parallel rank
// cluster
inline constexpr IntRange nodes{1, 1 << 16};  // 65,536
inline constexpr IntRange gpus_per_node{1, 1024};
inline constexpr IntRange nvlink_domain_gpus{1, 1024};    // GPUs in one NVLink domain (GB200: 72; NVLink 5 allows 576)
inline constexpr IntRange world_size{1, 1 << 20};         // nodes x gpus_per_node: 1,048,576 GPUs
inline constexpr RealRange bandwidth_GBps{0, 1e6, true};  // links (cluster.*_node and GPU spec)
inline constexpr RealRange latency_us{0, 1e6, false};
// parallel degrees (plan tp_degree/dp_shard/dp_replicate, search.tp_degrees/dp_replicate, --tp, --dp-shard,
// --dp-replicate)
inline constexpr IntRange degree{1, 1 << 20};
inline constexpr RealRange memory_headroom_gib{0, 1e6, false};
// search constraints and prices
// (also training.global_batch_size, --global-batch-size)
inline constexpr IntRange global_batch_size{1, int64_t{1} << 36};  // local batch (2^16) x dp (2^20)
// plan gradient_accumulation_steps: microbatches per optimizer step, at most a whole global batch of one sequence each
inline constexpr IntRange gradient_accumulation_steps{1, int64_t{1} << 36};
inline constexpr RealRange tokens_per_second{0, 1e12, false};  // search.min_tokens_per_second_per_gpu
inline constexpr RealRange gpu_hour_price{0, 1e6, true};       // USD per GPU-hour
// candidates of one search (the product of the search lists' lengths): each holds a result of a few hundred bytes,
// so 2^24 is some GiB of memory and minutes of search; far above the examples' spaces (a few thousand)
inline constexpr int64_t max_search_candidates = int64_t{1} << 24;
// candidates with search.ac_layers swept (not enumerated: a few bytes each unless kept): ~1 hour at 1 M/s
inline constexpr int64_t max_swept_candidates = int64_t{1} << 32;
// GPU spec figures: TFLOPS, GB/s, GiB (finite, positive; fp8_tflops may be 0: no float8)
inline constexpr RealRange gpu_figure{0, 1e6, true};
inline constexpr IntRange sm_count{1, 100000};

// The largest tensor the lowering builds (elements, per rank or global): 2^48, so that a byte count (elements x a
// small constant x at most 4 bytes) and sums of a few of them stay far inside int64.
inline constexpr int64_t max_tensor_elements = int64_t{1} << 48;

}  // namespace tptune::limits
