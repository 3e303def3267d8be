// tp-run bench gemm|collectives|memory|memory-bound [--json FILE|-] [--warmup N] [--iters N] [--quiet] [sizes] ...
//   mpirun -np 2 tp-run bench collectives --max-bytes 32M --json coll-np2.json   (prints the nccl-tests table)
//   mpirun -np 1 tp-run bench gemm --config examples/tiny-llama.yaml --preset vanilla --json gemm.json
//   mpirun -np 1 tp-run bench memory --json memory.json
//   tp-run bench memory-bound --backend cuda --json kernels.json       (Llama 3 8B's shapes at seq 8192)
// Micro-benchmarks of runtime/bench.h on the CPU backend; the JSON is input to `tp-plan calibrate`. Rank 0 reports
// progress on stderr without --quiet (tools/progress.h: a bar on a terminal, a plain line every 10 s elsewhere).
#include "runtime/bench.h"

#include <fmt/format.h>

#include <cstdio>

#include "plans/language/config.h"
#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "runtime/bench_kernels.h"
#include "tools/progress.h"
#include "tools/tp_run/backend.h"
#include "tools/tp_run/commands.h"

namespace tptune::tools {
namespace {

struct BenchArgs {
  std::string what;  // gemm | collectives | memory | memory-bound
  BenchOptions options;
  MemoryBoundShape shape;  // memory-bound
  std::string shape_dtype = "bf16";
  std::string json;
  std::vector<std::string> ops;
  // gemm: the Program's shapes
  PlanOptions plan;
  bool no_grid = false;
  std::string backend = "auto";
  std::string dtype = "fp32";
  bool quiet = false;
};

CollectiveKind parse_op(const std::string& s) {
  for (CollectiveKind k : {CollectiveKind::all_reduce, CollectiveKind::all_gather, CollectiveKind::reduce_scatter,
                           CollectiveKind::all_to_all, CollectiveKind::p2p})
    if (to_string(k) == s) return k;
  if (s == "send_recv") return CollectiveKind::p2p;
  throw Error(fmt::format("--ops: expected all_reduce, all_gather, reduce_scatter, all_to_all or p2p, got '{}'", s));
}

int run_bench(const World& w, BenchArgs& a) {
  std::vector<GemmShape> shapes;
  if (!agreed(w, [&] {
        refuse_stdout_through_launcher(w, "--json", a.json);
        if (!a.ops.empty()) {
          a.options.collectives.clear();
          for (const auto& s : a.ops) a.options.collectives.push_back(parse_op(s));
        }
        if (a.what == "collectives" && w.size < 2)
          throw Error("bench collectives: run it with 2 or more MPI processes (mpirun -np N)");
        if (a.what == "gemm") {
          if (!a.plan.config.empty()) {
            Config cfg = load_config(a.plan.config);
            if (!a.plan.tp) a.plan.tp = w.size;
            a.plan.dp_shard = 1;
            a.plan.dp_replicate = 1;  // GEMM shapes of one replica (HSDP adds no GEMMs)
            shapes = program_gemm_shapes(lower(cfg.model, cfg.training, resolve_plan(cfg, a.plan)));
          }
          if (!a.no_grid)
            for (const auto& s : grid_gemm_shapes()) shapes.push_back(s);
          if (shapes.empty()) throw Error("bench gemm: no shapes (give --config or drop --no-grid)");
        }
        // After every input is read (a config's model.hf_config too), before the bench runs.
        refuse_overwriting_inputs({{"--json", a.json}}, plan_inputs(a.plan));
      }))
    return 2;
  BackendChoice be;
  double progress_interval = 0;
  if (!agreed(w, [&] {
        progress_interval = progress_interval_s();
        be = choose_backend(a.backend);
        a.options.gemm_dtype = parse_dtype(a.dtype, "--dtype");
        if (a.options.gemm_dtype == DType::fp16) throw Error("--dtype: expected fp32, bf16, fp8_e4m3 or fp8_e5m2");
        a.shape.dtype = parse_dtype(a.shape_dtype, "--dtype");
        if (a.shape.dtype != DType::bf16 && a.shape.dtype != DType::fp32)
          throw Error("--dtype: expected bf16 or fp32, got '" + a.shape_dtype + "'");
      }))
    return 2;
  nlohmann::json j;
  or_abort(w, [&] {
    Progress bar("tp-run bench " + a.what, w.rank == 0 ? Progress::style(a.quiet) : Progress::Style::off,
                 progress_interval);
    BenchOptions o = a.options;  // with a reporter that lives as long as the bar
    o.progress = [&bar](size_t done, size_t total, std::string_view unit) { bar.update(done, total, unit); };
    auto backend = make_backend(be, MPI_COMM_WORLD, w.local_rank, 0);
    if (a.what == "gemm")
      j = bench_gemm(*backend, shapes, o);
    else if (a.what == "collectives")
      j = bench_collectives(*backend, o);
    else if (a.what == "memory-bound")
      j = bench_memory_bound(*backend, a.shape, o);
    else
      j = bench_memory(*backend, o);
  });
  if (w.rank != 0) return 0;
  or_abort(w, [&] {
    if (a.json != "-") {
      const auto& env = j["environment"];
      std::printf("# tp-run bench %s: %s, %s, %d ranks, %s build, git %s\n", a.what.c_str(),
                  env["backend"].get<std::string>().c_str(), env["device"].get<std::string>().c_str(),
                  env["ranks"].get<int>(), env["build_type"].get<std::string>().c_str(),
                  env["git_hash"].get<std::string>().c_str());
      if (env["build_type"].get<std::string>() != "Release") std::printf("# WARNING: not a Release build\n");
      if (a.what == "collectives") {
        std::printf("%s", nccl_tests_table(j).c_str());
      } else if (a.what == "memory-bound") {
        const auto& c = j["copy"];
        std::printf("  %-14s %14s %12s %10s %12s %10s\n", "op", "bytes", "median us", "GB/s", "copy GB/s", "% of copy");
        std::printf("  %-14s %14lld %12.2f %10.1f %12.1f %10s\n", "copy", c["bytes"].get<long long>(),
                    c["time_us"]["median"].get<double>(), c["GBps"].get<double>(), c["GBps"].get<double>(), "100.0");
        for (const auto& r : j["results"])
          std::printf("  %-14s %14lld %12.2f %10.1f %12.1f %10.1f\n", r["op"].get<std::string>().c_str(),
                      r["bytes"].get<long long>(), r["time_us"]["median"].get<double>(), r["GBps"].get<double>(),
                      r["copy_GBps"].get<double>(), r["percent_of_copy"].get<double>());
      } else {
        for (const auto& r : j["results"]) {
          if (a.what == "gemm")
            std::printf("  gemm %6lld x %6lld x %6lld %-8s  %10.2f us  %10.2f GFLOP/s  (%s)\n", r["m"].get<long long>(),
                        r["n"].get<long long>(), r["k"].get<long long>(), r["dtype"].get<std::string>().c_str(),
                        r["time_us"]["median"].get<double>(), r["gflops"].get<double>(),
                        r["source"].get<std::string>().c_str());
          else
            std::printf("  %-5s %12lld B  %10.2f us  %8.2f GB/s\n", r["kernel"].get<std::string>().c_str(),
                        r["bytes"].get<long long>(), r["time_us"]["median"].get<double>(), r["GBps"].get<double>());
        }
      }
    }
    if (!a.json.empty()) write_json(j, a.json);
  });
  return 0;
}

void add_common(CLI::App* cmd, BenchArgs& a) {
  cmd->add_option("--json", a.json, "write the bench JSON to FILE (- for stdout instead of the table)");
  cmd->add_option("--warmup", a.options.warmup, "untimed iterations first (default 2)")
      ->check(integer_option(0, 1000000));
  cmd->add_option("--iters", a.options.iters, "timed iterations (default 10)")->check(integer_option(1, 1000000));
  add_backend_option(cmd, a.backend);
  cmd->add_flag("--quiet", a.quiet,
                "no progress (a line redrawn on a terminal, a plain line every 10 s into a pipe or a file)");
}

void add_sizes(CLI::App* cmd, BenchArgs& a) {
  cmd->add_option("--min-bytes", a.options.min_bytes, "smallest size (default 8; 1K, 4M accepted)")
      ->transform(CLI::AsSizeValue(false));
  cmd->add_option("--max-bytes", a.options.max_bytes, "largest size (default 32M)")->transform(CLI::AsSizeValue(false));
  cmd->add_option("--step-factor", a.options.step_factor, "multiply the size by this between rows (default 2)")
      ->check(integer_option(2, 1 << 20));
}

}  // namespace

void add_bench_command(CLI::App& app, RunOnWorld& run) {
  CLI::App* bench =
      app.add_subcommand("bench", "micro-benchmarks for calibration: gemm, collectives, memory, memory-bound");
  bench->require_subcommand(1);
  for (const char* what : {"gemm", "collectives", "memory", "memory-bound"}) {
    auto args = std::make_shared<BenchArgs>();
    args->what = what;
    CLI::App* cmd = nullptr;
    if (args->what == "gemm") {
      cmd = bench->add_subcommand("gemm", "GEMMs (--dtype): the Program's shapes (with --config) and a grid");
      cmd->add_option("--config", args->plan.config, "config YAML whose Program's GEMM shapes to time")
          ->check(CLI::ExistingFile);
      cmd->add_option("--preset", args->plan.preset, "plan preset (with --config; default vanilla)");
      cmd->add_option("--plan", args->plan.plan_file, "plan YAML (with --config)")->check(CLI::ExistingFile);
      cmd->add_option("--tp", args->plan.tp, "TP degree of the Program (default: the number of MPI processes)")
          ->check(integer_option(1, 1 << 20));
      cmd->add_flag("--no-grid", args->no_grid, "only the Program's shapes");
      cmd->add_option("--dtype", args->dtype,
                      "fp32 (default) | bf16 | fp8_e4m3 | fp8_e5m2 (e5m2 x e4m3); bf16 and float8 time x W^T");
    } else if (args->what == "collectives") {
      cmd = bench->add_subcommand("collectives", "MPI collectives over sizes, printed as nccl-tests prints them");
      add_sizes(cmd, *args);
      cmd->add_option("--ops", args->ops, "all_reduce all_gather reduce_scatter all_to_all p2p (default: all)");
    } else if (args->what == "memory-bound") {
      cmd = bench->add_subcommand("memory-bound",
                                  "every memory-bound kernel of a step at one layer's shapes: GB/s and % of a copy");
      MemoryBoundShape& s = args->shape;
      cmd->add_option("--rows", s.rows, "tokens: batch x seq (default 8192)")->check(integer_option(1, 1 << 30));
      cmd->add_option("--dim", s.dim, "model dim (default 4096)")->check(integer_option(1, 1 << 24));
      cmd->add_option("--ffn-dim", s.ffn_dim, "feed-forward dim (default 14336)")->check(integer_option(1, 1 << 24));
      cmd->add_option("--vocab", s.vocab, "vocabulary (default 128256)")->check(integer_option(1, 1 << 26));
      cmd->add_option("--heads", s.heads, "query heads rope rotates (default 32)")->check(integer_option(1, 1 << 16));
      cmd->add_option("--head-dim", s.head_dim, "head dim, even (default 128)")->check(integer_option(2, 1 << 16));
      cmd->add_option("--dtype", args->shape_dtype, "activation dtype: bf16 (default) | fp32");
      cmd->add_option("--seed", s.seed, "seed of the data generator (runtime/bench_data.h; default 20261204)");
      cmd->add_option("--ops", s.ops, "the ops to time (default: all)");
    } else {
      cmd = bench->add_subcommand("memory", "memory-bound kernels (copy, add) over sizes");
      add_sizes(cmd, *args);
      args->options.min_bytes = 4096;
    }
    add_common(cmd, *args);
    cmd->callback([args, &run] {
      if (args->what == "gemm" && !args->plan.config.empty() && args->plan.preset.empty() &&
          args->plan.plan_file.empty())
        args->plan.preset = "vanilla";
      run = [args](const World& w) { return run_bench(w, *args); };
    });
  }
}

}  // namespace tptune::tools
