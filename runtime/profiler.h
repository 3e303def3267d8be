#pragma once
// The profiler: times every op of a Program on a Backend and writes the Profile JSON that `tp-plan calibrate` fits.
//
// Method. After `warmup` untimed steps (the optimizer included: a profile measures the whole step), `iters` steps
// run in the executor's serialized mode: each op starts after the previous one finished and every collective is
// completed inside its own op, so an op's time is its own (no overlap). On several ranks, the time of an op in an
// iteration is the maximum over the TP group (a collective ends when its slowest rank ends). Each record carries the
// median over iterations and its spread (min, p10, p90, max) and the raw samples.
//
// Profile JSON (format "tptune-profile", version 1):
//   {
//     "format": "tptune-profile", "version": 1,
//     "environment": {"backend": "cpu", "device": "<CPU model>", "threads_per_rank": 1, "ranks": 2,
//                     "libraries": {"eigen": "3.4.0", "mpi": "Open MPI v4.1.4", "fmt": "9.1.0"},
//                     "git_hash": "1a2b3c4", "build_type": "Release"},
//     "program": {"model": {...}, "training": {...}, "plan": {...}, "tp": 2, "dp": 1},
//     "timing": {"warmup": 2, "iters": 5, "unit": "us", "mode": "serialized", "reduce_over_ranks": "max",
//                "step_wall_mode": "overlapped"},
//     "final_loss": 5.61 (null when the run diverged to NaN/inf),
//     "step_wall_us": {"median", "min", "p10", "p90", "max"}: `iters` further whole steps run with the overlap the
//                     Program allows (collectives in flight while compute runs), each the slowest rank's wall
//                     time, after a synchronizing all-reduce; "step_wall_samples_us": [...] the raw samples.
//     "program" also carries "config_yaml" and "plan_yaml" when the tool adds them (tp-run profile does), so that
//     `tp-plan accuracy` and `calibrate` can lower the very Program again.
//     "ops": [ one record per op of expand(Program), in execution order:
//       {"index": 0, "name": "tok_embeddings.fwd", "module": "tok_embeddings", "segment": "embed.fwd", "layer": -1,
//        "template_op": 0, "phase": "forward", "kind": "embedding",
//        "op": {kind fields: gemm {m, n, k, a_dtype, b_dtype, c_dtype, trans_a, trans_b, accumulate, flops},
//               attention {batch, seq, n_heads, n_kv_heads, head_dim, causal, backward, flops},
//               elementwise {fn, bytes, flops, dim}, embedding {tokens, vocab_local, dim_local, vocab_sharded,
//               backward}, cross_entropy {stage, tokens, vocab_local, vocab_sharded},
//               cast_fp8 {stage, to, elements, rowwise},
//               collective {collective, group, group_size, reduce, dtype, bytes, gather_dim, scatter_dim}},
//        "chunk": {"pattern": "all_gather", "step": 1, "count": 2}            (async TP ops only)
//        "inputs": [{"name": "tokens", "shape": [2, 32], "global_shape": [2, 32], "dtype": "fp32",
//                    "placement": "R", "role": "input"}], "outputs": [...],
//        "time_us": {"median": 12.5, "min": 11.9, "p10": 12.0, "p90": 13.1, "max": 14.2}, "samples_us": [...]}
//     ]
//   }
// Optimizer ops are included ("phase": "optimizer").

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "plans/program.h"
#include "runtime/backend.h"

namespace tptune {

struct ProfileOptions {
  int warmup = 2;
  int iters = 5;
  uint64_t seed = 1;
  // Single-GPU mode (ExecutorOptions::local_shapes_of_tp): the Program is lowered for tp N and one process runs
  // rank 0's compute. Collective records then say "measured": false with "time_us": null, "step_wall_us" is
  // replaced by "compute_wall_us", "final_loss" is null, and "local_shapes_of_tp" / "collectives" say why.
  int local_shapes_of_tp = 0;
  // Called on every rank after each step (warm-up steps included): done, total = warmup + iters. For a progress line.
  std::function<void(int done, int total)> on_step;
};

struct OpTiming {
  double median = 0, min = 0, p10 = 0, p90 = 0, max = 0;
  std::vector<double> samples;  // per iteration, microseconds (max over ranks)
};

// Median and spread of samples (nearest-rank percentiles; the median of an even count is the mean of the middle
// two).
OpTiming summarize(std::vector<double> samples);

// Runs the Program on `backend` (collective over its TP group) and returns the Profile JSON.
nlohmann::json profile_program(const Program& program, Backend& backend, const ProfileOptions& options);

// The "environment" block every Profile and bench JSON starts with (backend, device, threads_per_rank, ranks,
// cores (the machine's hardware threads: ranks beyond them share cores), libraries, git_hash, build_type).
nlohmann::json environment_json(Backend& backend);

// The IR descriptor of one op kind (the "op" object above).
nlohmann::json describe_kind(const OpKind& kind, int group_size);

}  // namespace tptune
