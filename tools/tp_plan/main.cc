// tp-plan: simulate, search and explain tensor-parallel plans. Each subcommand lives in its own tools/tp_plan/*.cc
// and registers itself here.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <system_error>

#include "plans/util/error.h"
#include "plans/util/output_file.h"
#include "plans/util/version.h"
#include "plans/util/yaml_util.h"
#include "tools/tp_plan/commands.h"

using tptune::flush_stdout;

int main(int argc, char** argv) {
  CLI::App app{"tp-plan: which tensor-parallel plan to run, how fast it will be, and why"};
  app.require_subcommand(1);
  app.set_version_flag("--version", tptune::version_line("tp-plan"), "print the version and git commit, then exit");
  std::function<int()> run;
  tptune::tools::register_tp_plan_commands(app, run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // One line, like every other error: CLI11's own report adds a second line and exits with its codes (105, ...).
    fmt::print(stderr, "tp-plan: error: {} (see tp-plan --help)\n", tptune::yaml::shown(e.what(), 500));
    return 2;
  }
  try {
    const int code = run ? run() : 0;
    flush_stdout();  // output lost on a full disk or a closed pipe is an error, not exit 0 (plans/util/output_file.h)
    return code;
  } catch (const tptune::Error& e) {
    fmt::print(stderr, "tp-plan: error: {}\n", tptune::yaml::shown(e.what(), 2000));
    return 2;
  } catch (const std::system_error& e) {
    // fmt::print throws this when standard output fails (a full disk, a closed pipe): a user's error, not ours.
    if (std::ferror(stdout)) {
      fmt::print(stderr, "tp-plan: error: cannot write to standard output: {}\n", e.code().message());
      return 2;
    }
    fmt::print(stderr, "tp-plan: internal error: {}\n", tptune::yaml::shown(e.what(), 2000));
    return 3;
  } catch (const std::exception& e) {
    fmt::print(stderr, "tp-plan: internal error: {}\n", tptune::yaml::shown(e.what(), 2000));
    return 3;
  }
}
