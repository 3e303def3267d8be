// tp-run profile CONFIG (--preset NAME | --plan FILE) [toggles] --out PROFILE.json [--warmup N] [--iters N] [--quiet]
// Rank 0 reports progress (steps, elapsed, ETA): a line redrawn on a terminal, a plain line every 10 s into a pipe or
// a file (tools/progress.h).
// Times every op of the sharded Program on the CPU or CUDA backend (--backend) and writes the Profile JSON
// (runtime/profiler.h). --local-shapes-of-tp N: one process runs rank 0's compute at the local shapes of tp N.
#include "runtime/pipeline/profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "plans/language/config_record.h"
#include "plans/language/module_names.h"
#include "plans/util/error.h"
#include "plans/util/json_text.h"
#include "plans/util/limits.h"
#include "plans/util/output_file.h"
#include "plans/util/version.h"
#include "runtime/profiler.h"
#include "tools/progress.h"
#include "tools/tp_run/backend.h"
#include "tools/tp_run/commands.h"
#include "tools/tp_run/memory.h"
#include "tools/tp_run/pipeline.h"

namespace tptune::tools {
namespace {

struct ProfileArgs {
  PlanOptions plan;
  std::string out;
  int warmup = 2, iters = 5;
  uint64_t seed = 1;
  bool quiet = false;
  double timeout = kDefaultTimeoutS;
  std::string backend = "auto";
  int local_shapes_of_tp = 0;
};

int run_profile(const World& w, ProfileArgs& a) {
  RunSetup s;
  RecordedConfig recorded;  // the config as this run uses it, read with its inputs (not after a long run)
  BackendChoice be;
  const int single = a.local_shapes_of_tp;
  double progress_interval = 0;
  if (!agreed(w, [&] {
        set_watchdog_timeout(a.timeout);
        progress_interval = progress_interval_s();
        if (a.iters < 1) throw Error(fmt::format("--iters: expected at least 1, got {}", a.iters));
        if (a.warmup < 0) throw Error(fmt::format("--warmup: expected 0 or more, got {}", a.warmup));
        be = choose_backend(a.backend);
        if (single < 0 || single > 1024)
          throw Error(fmt::format("--local-shapes-of-tp: expected 1 .. 1024, got {}", single));
        if (single > 0 && w.size != 1)
          throw Error(fmt::format("--local-shapes-of-tp {} runs on one process, but {} were started", single, w.size));
        // The Program is lowered for tp N (its local shapes) and rank 0's part runs here.
        World shapes = w;
        if (single > 0) shapes.size = single;
        s = make_setup(shapes, a.plan, false, "profile");
        recorded = record_config(a.plan.config, a.plan.hf_config, s.config);
        // After every input is read (a config's model.hf_config too), before the steps run.
        refuse_overwriting_inputs({{"--out", a.out}}, plan_inputs(a.plan));
        if (single > 0 && s.plan.pp_degree > 1)
          throw Error(fmt::format("--local-shapes-of-tp: {}: pp_degree {}: a pipeline's profile runs its pp x tp ranks",
                                  plan_key_origin(s.plan, "pp_degree"), s.plan.pp_degree));
        if (be.name == "cpu")
          check_fits_in_memory(w, {{&s.sharded, "the sharded step"}}, "profile",
                               single > 0 ? "profile at the local shapes of a larger tp (--local-shapes-of-tp)"
                                          : "start more ranks (mpirun -np N with --tp N), or profile one rank's local "
                                            "shapes with --local-shapes-of-tp N");
      }))
    return 2;
  if (!agreed(w, [&] {
        check_same_everywhere(
            w, a.plan.config, s.config.model, s.plan,
            fmt::format("profile seed={} warmup={} iters={} backend={}", a.seed, a.warmup, a.iters, be.name));
      }))
    return 2;
  if (w.rank == 0) {
    for (const auto& n : s.notes) std::fprintf(stderr, "%s\n", n.c_str());
    std::fprintf(stderr, "tp-run profile: backend %s (%s)\n", be.name.c_str(), be.why.c_str());
    if (single > 0)
      std::fprintf(stderr,
                   "tp-run profile: one process runs rank 0's compute ops at the local shapes of tp %d; its %s "
                   "collectives are not run (recorded as not measured)\n",
                   single, "TP");
  }
  Profile profile;
  const bool pipeline = s.plan.pp_degree > 1;
  or_abort(w, [&] {
    if (pipeline) {
      // Each pp rank runs its schedule (runtime/pipeline/profile.h); the mesh is [pp, tp].
      const MeshComms mesh(s.plan.tp_degree, 1, s.plan.pp_degree);
      auto backend = make_backend(be, mesh.tp(), w.local_rank, watchdog_timeout(), MPI_COMM_NULL, mesh.pp());
      maybe_inject_failure(w);
      Progress bar("tp-run profile", w.rank == 0 ? Progress::style(a.quiet) : Progress::Style::off, progress_interval);
      ProfileOptions po;
      po.warmup = a.warmup, po.iters = a.iters, po.seed = a.seed;
      po.on_step = [&bar](int done, int total) {
        bar.update(static_cast<size_t>(done), static_cast<size_t>(total), "steps");
      };
      profile =
          profile_pipeline(s.sharded, *backend, pipeline_run(s.config.model, s.plan, mesh.pp(), mesh.pp_rank()), po);
      profile.pipeline->schedule = std::string(to_string(s.plan.pp_schedule));
      profile.pipeline->microbatch_size = s.plan.pp_microbatch_size;
      return;
    }
    auto backend = make_backend(be, MPI_COMM_WORLD, w.local_rank, watchdog_timeout());
    maybe_inject_failure(w);
    // Rank 0 reports progress (without --quiet): a bar on a terminal, plain lines into mpirun's pipe or a log; the
    // others stay silent.
    Progress bar("tp-run profile", w.rank == 0 ? Progress::style(a.quiet) : Progress::Style::off, progress_interval);
    ProfileOptions po;
    po.warmup = a.warmup, po.iters = a.iters, po.seed = a.seed, po.local_shapes_of_tp = single;
    po.on_step = [&bar](int done, int total) {
      bar.update(static_cast<size_t>(done), static_cast<size_t>(total), "steps");
    };
    profile = profile_program(s.sharded, *backend, po);
  });
  // The loss is replicated, so every rank reaches the same verdict. (Not in the single-GPU mode: its values mean
  // nothing without the collectives.)
  if (!agreed(w, [&] {
        if (single == 0 && !profile.final_loss)
          throw Error(
              fmt::format("the loss is not finite after {} steps: the run diverged (NaN/inf), so its times "
                          "are not written",
                          a.warmup + a.iters));
      }))
    return 2;
  if (w.rank != 0) return 0;
  or_abort(w, [&] {
    // The config as the run used it and the resolved plan, so that tp-plan can lower this very Program again.
    profile.config_yaml = std::move(recorded.yaml);
    profile.hf_config_json = std::move(recorded.hf_config_json);
    // Only the model's modules: a preset carries torchtitan's feed_forward.w3 for every model, which a gelu MLP
    // lacks, and calibrate/accuracy load this plan as a user's (refusing entries that match no module).
    profile.plan_yaml = plan_to_yaml(without_unmatched_modules(s.plan, s.config.model));
    nlohmann::json out = profile_json(profile);
    stamp_version(out);
    write_output("--out", a.out, json_dump(out, 1) + "\n");
  });
  // A short summary: step time and the ops that dominate it.
  const auto& ops = profile.ops;
  double total = 0;
  std::vector<std::pair<double, std::string>> top;
  for (const auto& op : ops) {
    if (!op.time_us) continue;  // a collective the single-GPU mode did not run
    double t = op.time_us->median.value_or(0);
    total += t;
    top.emplace_back(t, op.name);
  }
  std::sort(top.rbegin(), top.rend());
  const bool whole = profile.step_wall.has_value();
  if (pipeline) {
    const ProfilePipeline& pl = *profile.pipeline;
    std::printf(
        "tp-run profile: pp %lld x tp %d, %s, %lld microbatches; %d warm-up + %d serialized + %d overlapped "
        "steps; step median %.1f us -> %s\n",
        static_cast<long long>(pl.pp), s.plan.tp_degree, pl.schedule.c_str(), static_cast<long long>(pl.microbatches),
        a.warmup, a.iters, a.iters, profile.step_wall->time_us.median.value_or(0), a.out.c_str());
    for (const ProfilePipelineRank& r : pl.ranks)
      std::printf("  pp rank %lld: busy %.1f us, ends at %.1f us (idle %.0f %%)\n", static_cast<long long>(r.pp_rank),
                  r.busy_us, r.end_us, r.end_us > 0 ? 100.0 * (1 - r.busy_us / r.end_us) : 0.0);
    for (const ProfileP2P& x : pl.p2p)
      std::printf("  p2p %lld -> %lld: %lld bytes in %.1f us\n", static_cast<long long>(x.from),
                  static_cast<long long>(x.to), static_cast<long long>(x.bytes), x.time_us.median.value_or(0));
    return 0;
  }
  std::printf(
      "tp-run profile: %zu ops, tp %d%s, %d warm-up + %d timed steps; sum of op medians %.1f us, %s median %.1f us "
      "-> %s\n",
      ops.size(), s.plan.tp_degree, whole ? "" : " (local shapes on one process, collectives not run)", a.warmup,
      a.iters, total, whole ? "overlapped step" : "compute-only step",
      (whole ? profile.step_wall : profile.compute_wall)->time_us.median.value_or(0), a.out.c_str());
  for (size_t i = 0; i < std::min<size_t>(5, top.size()); ++i)
    std::printf("  %10.1f us  %s\n", top[i].first, top[i].second.c_str());
  return 0;
}

}  // namespace

void add_profile_command(CLI::App& app, RunOnWorld& run) {
  auto args = std::make_shared<ProfileArgs>();
  CLI::App* cmd = app.add_subcommand("profile", "time every op of the sharded step and write a Profile JSON");
  add_plan_options(cmd, args->plan, true);
  cmd->add_option("--out", args->out, "the Profile JSON to write")->required();
  cmd->add_option("--warmup", args->warmup, "untimed steps first (default 2)")->check(integer_option(0, 1000000));
  cmd->add_option("--iters", args->iters, "timed steps (default 5)")->check(integer_option(1, 1000000));
  cmd->add_option("--seed", args->seed, "seed of the weights and the batch (default 1)")
      ->check(integer_option(0, INT64_MAX));
  cmd->add_flag("--quiet", args->quiet,
                "no progress (a line redrawn on a terminal, a plain line every 10 s into a pipe or a file)");
  add_timeout_option(cmd, args->timeout);
  add_backend_option(cmd, args->backend);
  cmd->add_option("--local-shapes-of-tp", args->local_shapes_of_tp,
                  "one process (one GPU) runs rank 0's compute ops of the Program lowered for tp N; collectives are "
                  "not run and are recorded as not measured")
      ->check(integer_option(0, limits::degree.hi));
  cmd->callback([args, &run] { run = [args](const World& w) { return run_profile(w, *args); }; });
}

}  // namespace tptune::tools
