#pragma once
// Micro-benchmarks of what the cost model needs (`tp-run bench gemm|collectives|memory`), on any Backend, written as
// bench JSON that `tp-plan calibrate` fits (sim/calibrate/measurements.h reads it):
//   {"format": "tptune-bench", "version": 1, "bench": "gemm" | "collectives" | "memory",
//    "environment": {...as in a Profile (plans/program/profile_format.h)...},
//    "timing": {"warmup": W, "iters": N, "unit": "us", "reduce_over_ranks": "max"},
//    "results": [
//      gemm:        {"m", "n", "k", "dtype": "fp32" (A's dtype), "b_dtype", "c_dtype", "trans_b", "source": "program" |
//                    "grid", "time_us": {median, min, p10, p90, max}, "gflops"}
//      collectives: {"collective": "all_reduce" | "all_gather" | "reduce_scatter" | "all_to_all" | "p2p", "ranks",
//                    "bytes", "count", "type": "float", "redop": "sum" | "none", "time_us": {...}, "algbw_GBps",
//                    "busbw_GBps"}
//      memory:      {"kernel": "copy" | "add", "bytes", "elements", "time_us": {...}, "GBps"}
//    ],
//    gemm only: "sweep": {"gemms": G, "time_us": {...}}: every result's shape once, in order, back to back,
//               "data": {"generator", "seed", "operands": [A, B]} (runtime/bench_data.h)}
// Method. Each timed iteration starts after a synchronizing 1-element all-reduce over the group, times one call
// (a collective: until it completed on this rank), and takes the slowest rank's time; the record holds the median and
// spread over `iters` iterations after `warmup` untimed ones. The gemm sweep is timed the same way, as one call: with
// more ranks than cores it measures what ranks taking turns on the cores lose (CostParams::oversubscribed_efficiency).
// The memory-bound bench (runtime/bench_kernels.h) times its kernels queued instead (time_queued_calls, below).
//
// Collective sizes follow nccl-tests: `bytes` is S, the full tensor (all-reduce: the buffer; all-gather: the
// gathered output; reduce-scatter: the input; all-to-all: each rank's send buffer; p2p: one rank's message);
// `count` is what nccl-tests prints (all-reduce S/4; all-gather and reduce-scatter S/4/n per rank; all-to-all
// S/4/n per peer; p2p S/4). algbw = S / time, busbw = algbw x bus_factor (plans/program/bus_bandwidth.h).

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "plans/program/program.h"
#include "runtime/backend.h"
#include "runtime/profiler.h"

namespace tptune {

struct BenchOptions {
  int warmup = 2;
  int iters = 10;
  int64_t min_bytes = 8;
  int64_t max_bytes = 32ll << 20;
  int64_t step_factor = 2;  // sizes min, min*f, min*f^2, ... up to max
  // gemm: operand dtype. fp32 (A (m, k) x B (k, n), fp32 out); bf16 and float8 time the linear-layer form
  // x W^T (B stored (n, k), trans_b), bf16 out; fp8_e4m3 is e4m3 x e4m3, fp8_e5m2 is e5m2 x e4m3 (a gradient GEMM's
  // types), each cast with its amax-derived scale. The backend stores them as storage_for(dtype) (the CPU: fp32
  // values, same times). Operand values: runtime/bench_data.h (an activation A, a weight B; "data" in the JSON).
  DType gemm_dtype = DType::fp32;
  std::vector<CollectiveKind> collectives = {CollectiveKind::all_reduce, CollectiveKind::all_gather,
                                             CollectiveKind::reduce_scatter, CollectiveKind::all_to_all,
                                             CollectiveKind::p2p};
  // Called as the timed items (GEMM shapes, collective sizes, memory-bound ops) go by, with the items done so far,
  // their total and what they are, for a progress line (tools/progress.h); empty: nothing reported.
  std::function<void(size_t done, size_t total, std::string_view unit)> progress;
  void report(size_t done, size_t total, std::string_view unit) const {
    if (progress) progress(done, total, unit);
  }
};

// GEMM shapes to time: the Program's distinct (m, n, k) (source "program") and a grid (source "grid").
struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  std::string source;
};
std::vector<GemmShape> program_gemm_shapes(const Program& p);
std::vector<GemmShape> grid_gemm_shapes();

nlohmann::json bench_gemm(Backend& backend, const std::vector<GemmShape>& shapes, const BenchOptions& options);
nlohmann::json bench_collectives(Backend& backend, const BenchOptions& options);
nlohmann::json bench_memory(Backend& backend, const BenchOptions& options);

// Shared by the benches (runtime/bench_kernels.h too): the JSON header above (format, bench, environment, timing;
// checks --warmup and --iters), the timing of `fn` as described under Method, and a timing's JSON.
nlohmann::json bench_header(Backend& backend, const char* what, const BenchOptions& options);
OpTiming time_bench_calls(Backend& backend, const BenchOptions& options, const std::function<void()>& fn);
nlohmann::json timing_json(const OpTiming& t);

// The timing of a kernel as a training step runs it, where the host runs ahead of the device (the memory-bound bench,
// runtime/bench_kernels.h): after `warmup` untimed calls, each of the `iters` samples is issued behind a copy of
// CacheFlush::kBytes (which evicts the caches, as Triton's do_bench clears 256 MB, and gives the host the time to
// enqueue the call's launches), with no synchronization between samples; the samples are read at the end and reduced
// (max) over the group in one all-reduce. Where time_bench_calls' synchronized call also times the host's launch
// latency (the first H200 run's 64 MiB copy took 20 us, 3.35 TB/s, where 1 GiB ran at 4.15 TB/s: ~4 us of fixed
// cost, a fifth of the op, and one more launch latency per extra launch), this times what the device does.
struct CacheFlush {
  static constexpr int64_t kBytes = int64_t(256) << 20;  // read half, write half; > any L2 (B200: 126 MB)
  Buffer from, to;
  int64_t elements = 0;
  explicit CacheFlush(Backend& backend);
};
OpTiming time_queued_calls(Backend& backend, const BenchOptions& options, const CacheFlush& flush,
                           const std::function<void()>& fn);

// The nccl-tests table of a collectives bench JSON: one block per collective, columns size, count, type, redop,
// root, time, algbw, busbw, #wrong (N/A: values are not checked), and the average bus bandwidth.
std::string nccl_tests_table(const nlohmann::json& bench);

}  // namespace tptune
