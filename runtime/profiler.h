#pragma once
// The profiler: times every op of a Program on a Backend and writes the Profile JSON that `tp-plan calibrate` fits.
//
// Method. After `warmup` untimed steps (the optimizer included: a profile measures the whole step), `iters` steps
// run in the executor's serialized mode: each op starts after the previous one finished and every collective is
// completed inside its own op, so an op's time is its own (no overlap). On several ranks, the time of an op in an
// iteration is the maximum over the TP group (a collective ends when its slowest rank ends). Each record carries the
// median over iterations and its spread (min, p10, p90, max) and the raw samples.
//
// The result is a Profile (plans/program/profile_format.h: the file's one schema, written with profile_json()): one
// record per op of expand(Program) in execution order, optimizer ops included ("phase": "optimizer"), and the whole
// step's wall time: `iters` further steps run with the overlap the Program allows (collectives in flight while compute
// runs), each the slowest rank's wall time, after a synchronizing all-reduce.

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "plans/program/profile_format.h"
#include "plans/program/program.h"
#include "runtime/backend.h"
#include "runtime/executor.h"

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

// Runs the Program on `backend` (collective over its TP group) and returns its Profile (the caller adds the config's
// and plan's YAML to `program`).
Profile profile_program(const Program& program, Backend& backend, const ProfileOptions& options);

// The file's summary of an OpTiming.
TimeSummary time_summary(const OpTiming& t);

// Op `flat_op`'s record: names, segment, template op, descriptor and tensors (`local_shapes_of_tp` > 0: the single-GPU
// mode's tp for the collectives' group size), and the summary of its `samples` (nullptr: "measured": false).
ProfileOp profile_op_record(const Executor& ex, size_t flat_op, Backend& backend, int local_shapes_of_tp,
                            const std::vector<double>* samples);
// The same of `program`'s flat ops (expand(program), whose ops point into `program`).
ProfileOp profile_op_record(const Program& program, const FlatProgram& flat, size_t flat_op, Backend& backend,
                            int local_shapes_of_tp, const std::vector<double>* samples);

// The "environment" block every Profile and bench JSON starts with (backend, device, threads_per_rank, ranks,
// cores (the machine's hardware threads: ranks beyond them share cores), libraries, git_hash, build_type).
nlohmann::json environment_json(Backend& backend);

}  // namespace tptune
