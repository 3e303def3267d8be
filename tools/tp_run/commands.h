#pragma once
// Registration of tp-run's subcommands (one tp_run/<name>.cc each), as tp_plan/commands.h does for tp-plan. `run`
// is set to the chosen subcommand; it runs on every MPI rank and returns the exit code (0 ok, 1 verification
// failed, 2 error).
#include <CLI/CLI.hpp>
#include <functional>

#include "tools/tp_run/session.h"

namespace tptune::tools {

using RunOnWorld = std::function<int(const World&)>;

void add_verify_command(CLI::App& app, RunOnWorld& run);
void add_profile_command(CLI::App& app, RunOnWorld& run);
void add_bench_command(CLI::App& app, RunOnWorld& run);

}  // namespace tptune::tools
