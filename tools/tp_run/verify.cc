// tp-run verify CONFIG (--preset NAME | --plan FILE) [toggles] [--seed S] [--json FILE|-] [--shrink]
// [--backend auto|cpu|cuda]
// --shrink verifies the plan on a scaled-down model of the same architecture (plans/language/resolve/shrink.h), so that
// a searched 70B plan at tp 8 is proven in seconds on CPU ranks. Runs one step of the sharded Program (tp = number of
// MPI processes) and of the unsharded model in every process, and compares the loss and every parameter gradient
// (runtime/verifier.h). Exit 0 when all match, 1 when any differs, 2 on an error.
#include "runtime/pipeline/verify.h"

#include <fmt/format.h>

#include <cstdio>

#include "plans/util/error.h"
#include "plans/util/json_text.h"
#include "plans/util/output_file.h"
#include "plans/util/version.h"
#include "runtime/verifier.h"
#include "tools/progress.h"
#include "tools/tp_run/backend.h"
#include "tools/tp_run/commands.h"
#include "tools/tp_run/memory.h"
#include "tools/tp_run/pipeline.h"

namespace tptune::tools {
namespace {

struct VerifyArgs {
  PlanOptions plan;
  uint64_t seed = 1;
  double timeout = kDefaultTimeoutS;
  std::string json;
  bool shrink = false;
  bool quiet = false;
  std::string backend = "auto";
};

std::string describe_plan(const Plan& p) {
  return fmt::format("plan {} ({}), tp {}{}, float8 {}, async_tp {}, loss_parallel {}, ac {}, local batch {}", p.family,
                     p.source, p.tp_degree,
                     (p.cp_degree > 1 ? fmt::format(", cp {} (rotate {}, load balance {})", p.cp_degree,
                                                    to_string(p.cp_rotate), p.cp_load_balance ? "on" : "off")
                                      : "") +
                         (p.pp_degree > 1 ? fmt::format(", pp {} ({}, microbatch size {})", p.pp_degree,
                                                        to_string(p.pp_schedule), p.pp_microbatch_size)
                                          : ""),
                     to_string(p.float8), p.async_tp ? "on" : "off", p.loss_parallel ? "on" : "off",
                     ac_text(p.activation_checkpointing, p.ac_layers), p.local_batch_size);
}

int run_verify(const World& w, VerifyArgs& a) {
  RunSetup s;
  BackendChoice be;
  double progress_interval = 0;
  if (!agreed(w, [&] {
        set_watchdog_timeout(a.timeout);
        progress_interval = progress_interval_s();
        be = choose_backend(a.backend);
        s = make_setup(w, a.plan, true, "verify", a.shrink);
        // After every input is read (a config's model.hf_config too), before the step runs.
        refuse_overwriting_inputs({{"--json", a.json}}, plan_inputs(a.plan));
        refuse_stdout_through_launcher(w, "--json", a.json);
        if (s.plan.cp_degree > 1 && be.name == "cuda") {
          if (a.backend == "cuda")
            throw Error(
                "--backend cuda: context parallelism runs on the CPU backend only (ring attention has no "
                "CUDA kernels)");
          be = {"cpu", "context parallelism runs on the CPU backend (ring attention has no CUDA kernels)"};
        }
        if (s.config.model.moe.experts > 0 && be.name == "cuda") {
          if (a.backend == "cuda")
            throw Error("--backend cuda: a mixture of experts runs on the CPU backend only (no CUDA MoE kernels)");
          be = {"cpu", "a mixture of experts runs on the CPU backend (no CUDA MoE kernels)"};
        }
        if (be.name == "cpu")
          check_fits_in_memory(w, {{&s.sharded, "the sharded step"}, {&s.reference, "the unsharded reference"}},
                               "verify",
                               a.shrink ? "start fewer ranks on this host"
                                        : "verify the plan on a scaled-down model of the same architecture with "
                                          "--shrink");
      }))
    return 2;
  if (!agreed(w, [&] {
        check_same_everywhere(w, a.plan.config, s.config.model, s.plan,
                              fmt::format("verify seed={} shrink={} backend={}", a.seed, a.shrink, be.name));
      }))
    return 2;
  const bool json_stdout = a.json == "-";
  std::FILE* text = json_stdout ? stderr : stdout;
  if (w.rank == 0) {
    for (const auto& n : s.notes) std::fprintf(stderr, "%s\n", n.c_str());
    std::fprintf(text, "tp-run verify: %s\n  %s, seed %llu\n  %d ranks%s%s\n  backend: %s (%s)\n",
                 a.plan.config.c_str(), describe_plan(s.plan).c_str(), static_cast<unsigned long long>(a.seed), w.size,
                 w.launch.launcher.empty() ? "" : ", started by ", w.launch.launcher.c_str(), be.name.c_str(),
                 be.why.c_str());
    std::fflush(text);
  }
  VerifyReport report;
  or_abort(w, [&] {
    const MeshComms mesh(s.plan.tp_degree, s.plan.cp_degree, s.plan.pp_degree, s.plan.ep_degree);
    auto backend =
        make_backend(be, mesh.tp(), w.local_rank, watchdog_timeout(), mesh.cp(), mesh.pp(), mesh.ep(), mesh.efsdp());
    maybe_inject_failure(w);
    auto reference = make_backend(be, MPI_COMM_NULL, w.local_rank, 0);  // this process alone: the unsharded model
    if (s.plan.pp_degree > 1) {
      report = verify_pipeline(s.sharded, s.reference, *backend, *reference,
                               pipeline_run(s.config.model, s.plan, mesh.pp(), mesh.pp_rank()), a.seed);
      return;
    }
    // Rank 0 reports progress: a bar on a terminal, plain lines into mpirun's pipe or a log (tools/progress.h).
    Progress bar("tp-run verify", w.rank == 0 ? Progress::style(a.quiet) : Progress::Style::off, progress_interval);
    report = verify_step(s.sharded, s.reference, *backend, *reference, a.seed, nullptr,
                         [&bar](size_t done, size_t total) { bar.update(done, total, "ops"); });
  });
  if (w.rank == 0) {
    std::fputs(format_report(report).c_str(), text);
    std::fflush(text);
  }
  if (!a.json.empty() && w.rank == 0) {
    auto j = to_json(report);
    j["config"] = a.plan.config;
    j["plan"] = describe_plan(s.plan);
    stamp_version(j);
    if (json_stdout) {
      std::fputs((json_dump(j, 2) + "\n").c_str(), stdout);
      std::fflush(stdout);
    } else {
      or_abort(w, [&] { write_output("--json", a.json, json_dump(j, 2) + "\n"); });
    }
  }
  return report.pass() ? 0 : 1;
}

}  // namespace

void add_verify_command(CLI::App& app, RunOnWorld& run) {
  auto args = std::make_shared<VerifyArgs>();
  CLI::App* cmd = app.add_subcommand(
      "verify", "check that the sharded step computes the unsharded model's loss and gradients (mpirun -np TP)");
  add_plan_options(cmd, args->plan, true);
  cmd->add_option("--seed", args->seed, "seed of the weights and the batch (default 1)");
  add_timeout_option(cmd, args->timeout);
  add_backend_option(cmd, args->backend);
  cmd->add_option("--json", args->json, "also write the report as JSON to FILE ('-': stdout, the table to stderr)");
  cmd->add_flag("--quiet", args->quiet,
                "no progress (a line redrawn on a terminal, a plain line every 10 s into a pipe or a file)");
  cmd->add_flag("--shrink", args->shrink,
                "verify the plan on a scaled-down model of the same architecture (2 layers, small dims; the "
                "output lists them)");
  cmd->callback([args, &run] { run = [args](const World& w) { return run_verify(w, *args); }; });
}

}  // namespace tptune::tools
