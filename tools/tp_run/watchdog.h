#pragma once
// The process watchdog of tp-run: the --timeout deadline on the MPI calls that block without a timeout of their own.
//
// Every wait of tp-run on its peers is bounded by --timeout from the moment the process starts:
//  * the non-blocking waits poll their own deadline (the agreement calls of tools/tp_run/session.cc, the step's
//    collectives through CpuBackend::set_timeout);
//  * the calls that block inside the MPI library run in a WatchdogScope: MPI_Init (a rank that never starts keeps
//    its peers in MPI_Init's exchange), MPI_Comm_split_type (collective), a backend's set-up (the CUDA backend
//    broadcasts its NCCL id) and MPI_Finalize (a fence in Open MPI). The scope arms a POSIX interval timer; when it
//    expires, its SIGALRM handler write(2)s one prepared line and _exit(2)s, which is async-signal-safe whatever
//    the blocked call holds. The launcher then ends the other ranks (mpirun does when a rank exits without
//    MPI_Finalize).
//
// The timeout is known before MPI_Init because main() reads --timeout from the raw command line
// (timeout_from_argv); CLI11 parses and range-checks it later, and set_watchdog_timeout() then sets it for the
// rest of the run.
//
//   tp-run: error (rank 0 of 2): MPI_Init (waiting for every rank to start) did not complete within 3 s (tp-run
//   --timeout): a peer rank is stopped, hung or slower than the timeout

namespace tptune::tools {

// The value of the last `--timeout S` / `--timeout=S` in argv; the default (300 s) when there is none, and when the
// value is not seconds in [0, 1e6] (CLI11 or set_watchdog_timeout refuses it later, once MPI is up).
double timeout_from_argv(int argc, char** argv);

// The process-wide timeout of WatchdogScope (0: waits forever). Values outside [0, 1e6] are the caller's to refuse.
void set_process_timeout(double seconds);
double process_timeout();

// Which rank this process is, for the watchdog's message (-1: not known yet, before MPI_Init the launcher's
// environment may say; tools/tp_run/launcher.h).
void set_process_rank(int rank, int size);

// Arms the watchdog for `what` (a string literal: it is kept, not copied) for process_timeout() seconds; the
// destructor disarms it. Scopes do not nest.
class WatchdogScope {
 public:
  explicit WatchdogScope(const char* what);
  ~WatchdogScope();
  WatchdogScope(const WatchdogScope&) = delete;
  WatchdogScope& operator=(const WatchdogScope&) = delete;
};

// Testing the watchdog: when the environment variable TPTUNE_TP_RUN_STOP_AT equals `stage` ("init": before MPI_Init,
// "consistency": before the cross-rank consistency check, "finalize": before MPI_Finalize), this process stops itself
// with SIGSTOP there, as a rank stopped by a debugger or the OS would. A test sets it for one rank only.
void maybe_stop_at(const char* stage);

}  // namespace tptune::tools
