// tp-plan: simulate, search and explain tensor-parallel plans. Each subcommand lives in its own tp_plan_*.cc
// and registers itself here.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "plans/error.h"
#include "tools/tp_plan_commands.h"

int main(int argc, char** argv) {
  CLI::App app{"tp-plan: which tensor-parallel plan to run, how fast it will be, and why"};
  app.require_subcommand(1);
  std::function<int()> run;
  tptune::tools::register_tp_plan_commands(app, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return run ? run() : 0;
  } catch (const tptune::Error& e) {
    fmt::print(stderr, "tp-plan: error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "tp-plan: internal error: {}\n", e.what());
    return 3;
  }
}
