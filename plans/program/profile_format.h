#pragma once
// The Profile file ("tptune-profile", version 1): what `tp-run profile --out` writes and `tp-plan calibrate`,
// `accuracy` and `simulate --measured` read. The one schema of it: the runtime fills a Profile and writes it with
// profile_json(); the simulator reads it back with parse_profile() (sim/ never includes runtime/: this file is the
// interface between them).
//
//   {
//     "format": "tptune-profile", "version": 1,
//     "environment": {"backend": "cpu", "device": "<CPU model>", "threads_per_rank": 1, "ranks": 2, "cores": 16,
//                     "libraries": {"eigen": "3.4.0", "mpi": "Open MPI v4.1.4", "fmt": "9.1.0"},
//                     "git_hash": "1a2b3c4", "build_type": "Release", ...device facts},
//     "program": {program_identity()'s object (plans/program/program_identity.h), "config_yaml": "...", "plan_yaml":
//     "...", "hf_config_json": "..." (only when the model came from a transformers config.json; both as
//     plans/language/config_record.h records them)},
//     "timing": {"warmup": 2, "iters": 5, "unit": "us", "mode": "serialized", "reduce_over_ranks": "max",
//                "step_wall_mode": "overlapped"},
//     "final_loss": 5.61 (null when the run diverged to NaN/inf, or in the single-GPU mode),
//     "step_wall_us": {"median", "min", "p10", "p90", "max"}, "step_wall_samples_us": [...],
//     "ops": [ one record per op of expand(Program), in execution order:
//       {"index": 0, "name": "tok_embeddings.fwd", "module": "tok_embeddings", "segment": "embed.fwd", "layer": -1,
//        "template_op": 0, "phase": "forward", "kind": "embedding", "op": {op_descriptor()},
//        "chunk": {"pattern": "all_gather", "step": 1, "count": 2}            (async TP ops only)
//        "fused": ["layers.0.ffn_norm.fwd", "layers.0.attention.residual"]     (fused kernels of a compiled Program
//        only) "inputs": [{"name": "tokens", "shape": [2, 32], "global_shape": [2, 32], "dtype": "fp32",
//                    "placement": "R", "role": "input"}], "outputs": [...],
//        "time_us": {"median": 12.5, "min": 11.9, "p10": 12.0, "p90": 13.1, "max": 14.2}, "samples_us": [...]}
//     ]
//   }
// A pipeline-parallel plan's profile (runtime/pipeline/profile.h) also has
//     "pipeline": {"pp": 2, "schedule": "1F1B", "microbatches": 4, "microbatch_size": 1,
//                  "stages": [{"first_layer": 0, "layers": 2, "rank": 0}, ...],
//                  "ranks": [{"pp_rank": 0, "end_us": 812.0, "busy_us": 640.5,
//                             "actions": [{"stage": 0, "microbatch": 0, "kind": "F", "start_us": 0.0,
//                                          "wait_us": 0.0, "end_us": 80.1}, ...]}, ...],
//                  "p2p": [{"from": 0, "to": 1, "bytes": 8192, "time_us": {summary}, "samples_us": [...]}, ...],
//                  "not_timed": "..."}
// its ops being those of the microbatch Program (plan_yaml is the pipeline plan; a reader lowers it at
// local_batch_size = pp_microbatch_size, plans/language/pipeline_parallel.h), each timed on the pp rank that runs it.
// The single-GPU mode (one process runs rank 0's compute at the local shapes of tp N) writes "compute_wall_us" and
// "compute_wall_samples_us" instead of the step wall, "local_shapes_of_tp": N and "collectives" (why they are not
// timed), and its collective records say "measured": false with "time_us": null and no samples, and (tp-run after
// fa08a48) "seeded_from_local": true: their outputs were seeded from the rank's own data (runtime/executor.h),
// so the compute downstream ran on data shaped like a real run's; without it (older profiles) it ran on zeros.
//
// Reading. parse_profile() checks every member it finds (types, ranges: a time is 0 .. 1e9 us, a p2p's bytes
// 1 .. 2^50) and requires what every profile has: "format", "version", a non-empty "ops" list, each record's "name",
// and "time_us" unless "measured" is false. That the records are the ops of the Program the profile names, and its
// pipeline block that plan's, is checked by every reader against that Program (sim/profiled_program.h). The rest may be
// absent (hand-made and synthetic profiles carry only what their reader needs); a reader that needs a member demands it
// with require(). Errors are tptune::Error, one line naming the file and the key:
//   p.json: expected a tp-run profile ("format": "tptune-profile")
//   p.json: ops[3].time_us.median: expected a time of 0 .. 1e9 us (1000 s), got 1e+150
//   p.json: ops[0].segment: missing

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "plans/program/program.h"
#include "plans/util/json_text.h"

namespace tptune {

// The largest time a measurement file may state: 1000 s per op or step (a calibration file's bound on a time too).
inline constexpr double kMaxMeasuredTimeUs = 1e9;

// A summary of samples, microseconds. The runtime writes all five; a hand-made profile may carry only some.
struct TimeSummary {
  std::optional<double> median, min, p10, p90, max;
  // The statistic `name` ("median" | "min" | "p10" | "p90" | "max"); nullptr for another name.
  const std::optional<double>* statistic(std::string_view name) const;
  std::optional<double>* statistic(std::string_view name);
};

struct ProfileTensor {
  std::string name;
  std::vector<int64_t> shape, global_shape;  // local (this rank's) and global
  std::string dtype, placement, role;
};

struct ProfileChunk {   // the step of an async-TP op's chunked collective
  std::string pattern;  // "all_gather" | "reduce_scatter"
  int64_t step = 0, count = 0;
};

// One op record. Strings a record may lack read as empty; the members a reader matches on are optional.
struct ProfileOp {
  int64_t index = 0;
  std::string name;  // expand()'s full FQN op name, "layers.3.attention.wq.fwd"
  std::string module, phase;
  std::optional<std::string> segment, kind;  // the Program segment's name; kind_name() of the op
  int64_t layer = -1;
  std::optional<int64_t> template_op;  // the op's index in its segment
  nlohmann::json op;                   // op_descriptor() (null when absent)
  std::optional<ProfileChunk> chunk;
  std::vector<ProfileTensor> inputs, outputs;
  bool measured = true;            // false: a collective the single-GPU mode did not run
  bool seeded_from_local = false;  // such a collective's outputs were seeded from the rank's own data
  // "fused" (profiles of compiled Programs, tp-run after issue 39): the record is one kernel that replaces several
  // eager ops (ElementwiseOp's "Fused ops", Op::fused): their full names, the record's own among them. The
  // record's time is the fused kernel's; no other record times those ops. Absent: the op is one eager kernel.
  std::vector<std::string> fused;
  std::optional<TimeSummary> time_us;  // present when measured
  std::vector<double> samples_us;      // per iteration (the slowest rank's)
};

struct ProfileTiming {
  int64_t warmup = 0, iters = 0;
  std::string unit = "us", mode = "serialized", reduce_over_ranks = "max", step_wall_mode = "overlapped";
};

struct WallTimes {
  TimeSummary time_us;
  std::vector<double> samples_us;
};

// The "pipeline" block: each pp rank's schedule as it ran (the median over the overlapped steps of each action's
// times, us from the step's start: `wait_us` is the time it waited for its neighbour's activation or gradient), and
// the point-to-point time between neighbouring pp ranks at a few sizes (one way: half a round trip).
struct ProfilePipelineAction {
  int64_t stage = 0, microbatch = 0;
  std::string kind;  // "F" | "B" | "I" | "W"
  double start_us = 0, wait_us = 0, end_us = 0;
};
struct ProfilePipelineRank {
  int64_t pp_rank = 0;
  double end_us = 0, busy_us = 0;  // its last action's end; the sum of its actions' compute (end - start - wait)
  std::vector<ProfilePipelineAction> actions;
};
struct ProfileP2P {
  int64_t from = 0, to = 0, bytes = 0;
  TimeSummary time_us;
  std::vector<double> samples_us;
};
struct ProfilePipelineStage {
  int64_t first_layer = 0, layers = 0, rank = 0;
};
struct ProfilePipeline {
  int64_t pp = 1, microbatches = 1, microbatch_size = 1;
  std::string schedule;
  std::vector<ProfilePipelineStage> stages;
  std::vector<ProfilePipelineRank> ranks;
  std::vector<ProfileP2P> p2p;
  std::string not_timed;  // what the profile leaves out, and why
};

struct Profile {
  // The environment block (environment_json() in runtime/profiler.h writes it, bench files share it): kept whole,
  // since calibration compares its libraries and device facts; `backend`, `device` and `ranks` are its typed members.
  nlohmann::json environment;  // null when absent
  std::optional<std::string> backend, device;
  std::optional<int64_t> ranks;
  // program_identity()'s object (null when absent), and its two YAML members and the transformers config.json text
  // (for a model read from one), which let tp-plan lower the very Program again.
  nlohmann::json program;
  std::optional<std::string> config_yaml, plan_yaml, hf_config_json;
  std::optional<ProfileTiming> timing;
  std::optional<double> final_loss;                  // null: diverged, or not meaningful (single-GPU mode)
  std::optional<WallTimes> step_wall, compute_wall;  // "step_wall_us" / "compute_wall_us" and their samples
  std::optional<int64_t> local_shapes_of_tp;         // the single-GPU mode
  std::string collectives;                           // the single-GPU mode: why the collectives are not timed
  std::optional<ProfilePipeline> pipeline;           // pipeline-parallel plans
  std::vector<ProfileOp> ops;
};

// The Profile JSON of `p`.
nlohmann::json profile_json(const Profile& p);

// The IR descriptor of one op kind (a record's "op"): gemm {m, n, k, a_dtype, b_dtype, c_dtype, trans_a, trans_b,
// accumulate, flops}, attention {batch, seq, n_heads, n_kv_heads, head_dim, causal, backward, flops}, elementwise
// {fn, bytes, flops, dim}, embedding {tokens, vocab_local, dim_local, vocab_sharded, backward}, cross_entropy {stage,
// tokens, vocab_local, vocab_sharded}, cast_fp8 {stage, to, elements, rowwise}, collective {collective, group,
// group_size, reduce, dtype, bytes, gather_dim, scatter_dim}.
nlohmann::json op_descriptor(const OpKind& kind, int group_size);
// A record's tensor: the flat tensor's full name and its template tensor's description.
ProfileTensor profile_tensor(const std::string& name, const TensorDesc& d);
// A record's "chunk"; nullopt for an op that is not a step of a chunked collective.
std::optional<ProfileChunk> profile_chunk(const ChunkRef& c);

// Reads a parsed Profile JSON; `path` names the file in errors.
Profile parse_profile(const nlohmann::json& j, const std::string& path);
// Parses `text` first ("NAME:LINE: invalid JSON (expected a tp-run profile): ...").
Profile parse_profile_text(const std::string& text, const std::string& name);
// Reads the file (plans/util/input_file.h: bounded to kMaxDataInputBytes).
Profile load_profile(const std::string& path);

// A time in us as measurement files state it: a number, 0 .. kMaxMeasuredTimeUs ("KEY: expected a time of ...").
double measured_time_us(const JsonDoc& doc, const nlohmann::json& v, const std::string& key);

// The member a reader needs: `*v`, or "FILE: KEY: missing".
template <class T>
const T& require(const std::optional<T>& v, const JsonDoc& doc, std::string_view key) {
  if (!v) doc.fail(key, "missing");
  return *v;
}

}  // namespace tptune
