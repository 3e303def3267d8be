#pragma once
// What `tp-run verify` and `tp-run profile` share: the MPI world, failing cleanly on every rank, and turning the
// command line into the Programs to run.
//
// Failure policy (one clear message, a non-zero exit on every rank, nothing hangs):
//  * Errors before any collective work (arguments, config, plan, lowering, a config that differs between ranks)
//    are agreed on: every rank reports whether it failed (one MPI_Allreduce), the lowest failing rank prints
//    `tp-run: error: <message>` (prefixed with its rank when not every rank failed), and every rank exits with 2.
//  * Errors during execution can strike one rank while its peers wait in a collective: that rank prints
//    `tp-run: error (rank r): <message>` and calls MPI_Abort, which ends every rank.
//  * Consistency: rank 0 broadcasts a hash of the config file's bytes, the resolved plan and the run options; a rank
//    whose hash differs fails in the agreed phase, naming what differs.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <string_view>

#include "plans/language/config.h"
#include "plans/language/plan.h"
#include "plans/program/program.h"
#include "tools/plan_options.h"
#include "tools/tp_run/launcher.h"

namespace tptune::tools {

struct World {
  int rank = 0, size = 1;
  int local_rank = 0;  // among the ranks of this node (MPI_COMM_TYPE_SHARED), whatever the launcher
  int local_size = 1;  // the ranks on this node
  Launch launch;       // what the environment says about the launcher (tools/tp_run/launcher.h)
};
// Collective (MPI_Comm_split_type, under the process watchdog of tools/tp_run/watchdog.h): call it once, in main().
World mpi_world();

// Runs `fn` on every rank; if it throws on any rank, prints once and returns false on every rank.
bool agreed(const World& w, const std::function<void()>& fn);
// Prints the message once (from the lowest rank that has one) and returns false on every rank when any rank has
// one; true when none has.
bool agree_on_error(const World& w, const std::string& error);
// Runs `fn`; an exception prints `tp-run: error (rank r): ...` and aborts every rank.
void or_abort(const World& w, const std::function<void()>& fn);

// Watchdog (--timeout SECONDS, default 300 like PyTorch's NCCL watchdog; 0 waits forever): every wait of tp-run,
// the collectives of the step (CpuBackend::set_timeout), the agreement calls here and, from process start, the MPI
// calls that block on their own (MPI_Init, MPI_Comm_split_type, MPI_Finalize: tools/tp_run/watchdog.h), gives up
// after the timeout; the rank prints `tp-run: error (rank r of n): <op or step>: ... did not complete within N s` and
// every rank ends.
inline constexpr double kDefaultTimeoutS = 300;
void add_timeout_option(CLI::App* cmd, double& seconds);
// Checks the range (0..1e6) and sets the timeout of this file's own MPI waits. Throws tptune::Error.
void set_watchdog_timeout(double seconds);
double watchdog_timeout();

// Testing the failure path: when the environment variable TPTUNE_TP_RUN_FAIL_RANK equals this rank, throws as if
// this rank had failed at the start of execution (its peers then wait in the step's first collective).
void maybe_inject_failure(const World& w);

// Rank 0 prints.
void print0(const World& w, const std::string& text);

// The one check of an output that may be standard output ("-"): refused when stdout passes through the launcher
// (tools/tp_run/launcher.h: mpirun drops what it cannot write and exits 0), where a lost JSON would go unnoticed:
//   "--json -: standard output passes through Open MPI mpirun, which loses what it cannot write without an error
//    (exit 0); write the JSON to a file: --json FILE"
// Call it in the agreed phase, on every rank.
void refuse_stdout_through_launcher(const World& w, std::string_view option, const std::string& path);

struct RunSetup {
  Config config;
  Plan plan;                       // tp = world size, dp_shard 1, dp_replicate 1
  Program sharded;                 // lower(plan)
  Program reference;               // lower(plan at tp 1); built only when asked
  std::vector<std::string> notes;  // things the user should know (printed by rank 0)
};

// Loads the config, resolves the plan (a preset's tp defaults to the world size), forces dp_shard and dp_replicate
// to 1 (one replica; a note says so), checks tp == world size, refuses what the CPU runtime cannot run, lowers. Throws
// tptune::Error. `shrink`: run a scaled-down model of the same architecture instead (plans/language/resolve/shrink.h);
// a note lists what shrank.
RunSetup make_setup(const World& w, PlanOptions options, bool with_reference, const std::string& command,
                    bool shrink = false);

// The agreed check that every rank runs the same thing: throws on a rank whose fingerprint differs from rank 0's.
// The config's fingerprint covers the file's bytes and the model it resolved to (a --hf-config or model.hf_config
// file that differs between ranks changes the model).
void check_same_everywhere(const World& w, const std::string& config_path, const Model& model, const Plan& plan,
                           const std::string& options);

}  // namespace tptune::tools
