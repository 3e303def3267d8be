// tp-run: execute a plan's sharded Program on real kernels, one MPI process per TP rank.
//   mpirun -np 2 tp-run verify examples/tiny-llama.yaml --preset sequence_parallel
//   mpirun -np 2 tp-run profile examples/tiny-llama.yaml --preset vanilla --out profile.json
//   mpirun -np 2 tp-run bench collectives --json coll.json     (nccl-tests table; also gemm, memory)
// Every rank parses the same command line; rank 0 prints. See tools/tp_run/session.h for how failures end every
// rank with one message.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "plans/util/error.h"
#include "plans/util/output_file.h"
#include "plans/util/version.h"
#include "plans/util/yaml_util.h"
#include "tools/tp_run/commands.h"
#include "tools/tp_run/watchdog.h"

namespace {

int run_main(int argc, char** argv, const tptune::tools::World& w) {
  CLI::App app{
      "tp-run: run a tensor-parallel plan on real kernels (one MPI process per TP rank), check that it "
      "computes the unsharded model, and profile its ops"};
  app.require_subcommand(1);
  app.set_version_flag("--version", tptune::version_line("tp-run"), "print the version and git commit, then exit");
  tptune::tools::RunOnWorld run;
  tptune::tools::add_verify_command(app, run);
  tptune::tools::add_profile_command(app, run);
  tptune::tools::add_bench_command(app, run);
  std::string parse_error;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help, --version: the same on every rank, no agreement needed
      if (w.rank == 0) app.exit(e);
      return 0;
    }
    parse_error = tptune::yaml::shown(e.what(), 500) + " (see tp-run --help)";
  }
  if (!tptune::tools::agree_on_error(w, parse_error)) return 2;
  return run(w);
}

}  // namespace

int main(int argc, char** argv) {
  namespace tt = tptune::tools;
  // The --timeout deadline holds from process start (tools/tp_run/watchdog.h): a rank that never starts keeps its
  // peers in MPI_Init, which has no timeout of its own.
  tt::set_process_timeout(tt::timeout_from_argv(argc, argv));
  const tt::Launch launch = tt::detect_launch();
  tt::set_process_rank(launch.rank, launch.size);
  tt::maybe_stop_at("init");
  {
    const tt::WatchdogScope watch("MPI_Init (waiting for every rank to start)");
    MPI_Init(&argc, &argv);
  }
  const tt::World w = tt::mpi_world();
  int code = run_main(argc, argv, w);
  // Rank 0 prints: output lost on a full disk or a closed pipe is an error, not success (plans/util/output_file.h).
  if (w.rank == 0) {
    try {
      tptune::flush_stdout();
    } catch (const tptune::Error& e) {
      std::fprintf(stderr, "tp-run: error: %s\n", e.what());
      code = 2;
    }
  }
  tt::maybe_stop_at("finalize");
  {
    const tt::WatchdogScope watch("MPI_Finalize (waiting for every rank to finish)");
    MPI_Finalize();
  }
  return code;
}
