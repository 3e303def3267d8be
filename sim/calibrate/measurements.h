#pragma once
// Measurements the calibration fit and the accuracy report read: Profile JSON (`tp-run profile`, read by
// plans/program/profile_format.h) and bench JSON (`tp-run bench`, runtime/bench.h). sim/ never includes runtime/: these
// files are the interface.
//
//   Measurements m = load_measurements(path);   // either kind, told apart by "format"
//
// A profile becomes its Program again: the profile carries the config's text and the resolved plan
// ("program.config_yaml", "program.plan_yaml"), which are loaded and lowered again and checked against the profile
// (sim/profiled_program.h: its "program" object, its records expand()'s ops one to one, its pipeline block the
// plan's); record i is then op i of expand(). Bench files carry plain samples (one op each).
//
// Environment. Every file has an "environment" block (backend, device, libraries); environment_key() is the part
// that must agree between files fitted together: backend, device, threads per rank, and the library versions.
// Errors are tptune::Error "<file>: <what>" (one line).

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "plans/language/config.h"
#include "plans/language/plan.h"
#include "plans/model/model.h"
#include "plans/program/program.h"

namespace tptune {

// One measured op: a template op of `program` (profiles), or a stand-alone bench sample.
struct MeasuredOp {
  enum class Source { program, gemm, collective, memory };
  Source source = Source::program;
  std::string name;
  int segment = -1, op = -1;                               // program: the template op (segment index, op index)
  GemmOp gemm;                                             // gemm samples
  CollectiveKind collective = CollectiveKind::all_reduce;  // collective samples
  int64_t bytes = 0;   // collective (nccl-tests size) and memory samples (bytes moved)
  int group_size = 1;  // collectives: the group's size
  double time_us = 0;  // the chosen statistic of its samples (median by default)
};

// A pipeline-parallel plan's profile (plans/program/profile_format.h, "pipeline"): what its step is predicted from
// (simulate_pipeline(), sim/pipeline/step.h) and each pp rank's measured schedule. Its point-to-point times are
// collective samples (p2p, group size 2) among the ops.
struct MeasuredPipeline {
  Model model;
  Training training;
  Plan plan;
  std::vector<double> rank_end_us, rank_busy_us;  // [pp rank]: the last action's end; the sum of action compute
};

struct Measurements {
  std::string path;
  std::string format;  // "tptune-profile" | "tptune-bench"
  nlohmann::json environment;
  int ranks = 1;
  std::optional<Program> program;  // profiles (a pipeline's: one microbatch's Program)
  std::optional<MeasuredPipeline> pipeline;
  std::vector<MeasuredOp> ops;
  double step_wall_us = 0;  // profiles: the overlapped step's statistic (0 when absent)
  // A single-GPU profile (plans/program/profile_format.h): the tp N whose local shapes one process ran (0: not one),
  // its compute-only step's statistic, and how many of its skipped collectives were not seeded from local data
  // (profiles before seeding: the compute downstream of them ran on zeros).
  int local_shapes_of_tp = 0;
  double compute_wall_us = 0;
  int unseeded_collectives = 0;
  // gemm benches: the sweep's statistic, every op's shape once, back to back (runtime/bench.h; 0 when absent)
  double sweep_us = 0;
};

// The environment says the ranks outnumbered the machine's cores ("cores" < "ranks": CPU ranks taking turns).
bool oversubscribed(const Measurements& m);

// `statistic` picks which summary of each record's samples is the measured time: "median" (the default) or "min"
// (the least-disturbed run, for a machine shared with other work); the step wall time likewise.
Measurements load_measurements(const std::string& path, const std::string& statistic = "median");
Measurements parse_measurements(const nlohmann::json& j, const std::string& path,
                                const std::string& statistic = "median");

// "cpu | Intel Xeon | threads 1 | eigen 3.4.0, mpi Open MPI v4.1.4" — what must match between fitted files.
std::string environment_key(const nlohmann::json& environment);
// The device preset that describes the environment's ranks: "cpu" for the CPU backend, else the device's preset
// name as the GPU backend writes it. Throws when the backend is unknown.
std::string environment_device(const nlohmann::json& environment, const std::string& path);

}  // namespace tptune
