#pragma once
// Registration of tp-plan's subcommands. Each add_* function (one per tools/tp_plan/<name>.cc) adds its subcommand to
// `app` and, when that subcommand is chosen, sets `run` to the function that executes it and returns the exit code.
#include <CLI/CLI.hpp>
#include <functional>

namespace tptune::tools {

using RunFn = std::function<int()>;

void add_explain_command(CLI::App& app, RunFn& run);
void add_simulate_command(CLI::App& app, RunFn& run);
void add_search_command(CLI::App& app, RunFn& run);
void add_export_command(CLI::App& app, RunFn& run);
void add_check_command(CLI::App& app, RunFn& run);
void add_calibrate_command(CLI::App& app, RunFn& run);
void add_accuracy_command(CLI::App& app, RunFn& run);

inline void register_tp_plan_commands(CLI::App& app, RunFn& run) {
  add_explain_command(app, run);
  add_simulate_command(app, run);
  add_search_command(app, run);
  add_export_command(app, run);
  add_check_command(app, run);
  add_calibrate_command(app, run);
  add_accuracy_command(app, run);
}

}  // namespace tptune::tools
