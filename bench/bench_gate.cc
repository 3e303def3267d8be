// The workloads of the callgrind regression gate (bench/callgrind-gate.sh), in three modes:
//
//   bench_gate --run ITEM          runs ITEM's fixed workload once between CALLGRIND_START_INSTRUMENTATION and
//                                  CALLGRIND_STOP_INSTRUMENTATION (run it under valgrind --tool=callgrind
//                                  --instr-atstart=no: only the measured region is counted; setup is not)
//   bench_gate --compare BASELINE COUNTS [--budget FILE] [--tolerance PCT] [--update]
//                                  compares instruction counts (JSON {"ITEM": count}) with the baseline, prints a
//                                  table, exits 1 when an item grew (or shrank) by more than the tolerance, or
//                                  counts more than its budget; --update writes COUNTS into BASELINE instead, and
//                                  refuses (exit 1) when an item is over its budget. The budget file (default:
//                                  callgrind-budget.json beside BASELINE) holds a fixed ceiling per item that
//                                  --update never writes: a baseline updated in the same change as a rise past it
//                                  still fails. Raising a budget is a commit of its own with the measured reason.
//   bench_gate --wall-report FILE  prints the medians of a Google Benchmark JSON file (--benchmark_repetitions) and
//                                  their ratios to BM_Reference of the same run (information, not a gate)
//   bench_gate [benchmark flags]   Google Benchmark: the same workloads, timed, and BM_Reference
//
// Items (each a fixed amount of work, so that the same binary and input give the same count):
//   lower_405b      10 x lower(Llama3-405B, seq 8192, tp 8, sequence_parallel, loss parallel, FSDP 128)
//   simulate_405b   10 x simulate() of that Program on 128 x 8 H100s
//   search_405b     the default search of examples/llama3-405b-h100.yaml (1080 candidates), 1 thread
// (The fourth gated item, tp-run verify of the tiny Llama, runs the tp-run binary: see callgrind-gate.sh.)
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <valgrind/callgrind.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/bench_cases.h"
#include "bench/bench_environment.h"
#include "plans/language/config.h"
#include "plans/lower/lower.h"
#include "plans/util/input_file.h"
#include "plans/util/json_text.h"
#include "plans/util/output_file.h"
#include "plans/util/version.h"
#include "sim/search/search.h"
#include "sim/simulate.h"

using namespace tptune;
using nlohmann::json;

namespace {

constexpr int kRepeat = 10;  // lower and simulate: 10 calls per measured region

Config search_config() { return load_config(std::string(TPTUNE_SOURCE_DIR) + "/examples/llama3-405b-h100.yaml"); }

SearchOptions search_options() {
  SearchOptions o;
  o.threads = 1;
  return o;
}

// The reference workload of the wall-time report: fixed integer and memory work that no tptune change touches, so
// that ratios to it cancel much of a shared machine's speed changes.
uint64_t reference_work() {
  std::vector<uint32_t> v(1 << 16);
  uint64_t x = 88172645463325252ull;
  for (auto& e : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    e = static_cast<uint32_t>(x);
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// ---- --run ITEM -----------------------------------------------------------------------------------------------
int run_item(const std::string& item) {
  if (item == "lower_405b") {
    int64_t sink = 0;
    CALLGRIND_START_INSTRUMENTATION;
    for (int i = 0; i < kRepeat; ++i) sink += bench::lower_llama405b().tp;
    CALLGRIND_STOP_INSTRUMENTATION;
    fmt::print("lower_405b: {} lowerings (tp sum {})\n", kRepeat, sink);
  } else if (item == "simulate_405b") {
    const Program p = bench::lower_llama405b();
    const ClusterSpec c = bench::h100_cluster_1024();
    double sink = 0;
    CALLGRIND_START_INSTRUMENTATION;
    for (int i = 0; i < kRepeat; ++i) sink += simulate(p, c, default_cost_params()).step_time_ms;
    CALLGRIND_STOP_INSTRUMENTATION;
    fmt::print("simulate_405b: {} simulations, step {:.3f} ms\n", kRepeat, sink / kRepeat);
  } else if (item == "search_405b") {
    const Config cfg = search_config();
    CALLGRIND_START_INSTRUMENTATION;
    SearchResult r = search(cfg, search_options());
    CALLGRIND_STOP_INSTRUMENTATION;
    fmt::print("search_405b: {} candidates, {} feasible\n", r.evaluated, r.feasible);
  } else {
    fmt::print(stderr, "bench_gate: unknown item '{}' (lower_405b | simulate_405b | search_405b)\n", item);
    return 2;
  }
  return 0;
}

// ---- --compare BASELINE COUNTS --------------------------------------------------------------------------------
json read_json(const std::string& path) {
  return parse_json_text(read_input_file(path, "JSON", kMaxDataInputBytes), path);
}

// The budget file's ceilings, by item.
std::map<std::string, double> read_budget(const std::string& path) {
  const json b = read_json(path);
  if (b.value("format", "") != "tptune-callgrind-budget")
    throw std::runtime_error(path + ": expected a tptune-callgrind-budget file");
  std::map<std::string, double> out;
  for (const auto& [item, v] : b.at("budget").items()) {
    if (!v.is_number() || v.get<double>() <= 0)
      throw std::runtime_error(path + ": budget." + item + ": expected a positive instruction count");
    out[item] = v.get<double>();
  }
  return out;
}

// Prints the items over their budget (or without one); true when there is none.
bool within_budget(const json& counts, const std::map<std::string, double>& budget, const std::string& budget_path) {
  bool ok = true;
  for (const auto& [item, now_v] : counts.items()) {
    const double now = now_v.get<double>();
    auto it = budget.find(item);
    if (it == budget.end()) {
      fmt::print("  {:<16} {:>16.0f}  FAIL: no budget for it in {}\n", item, now, budget_path);
      ok = false;
    } else if (now > it->second) {
      fmt::print("  {:<16} {:>16.0f}  FAIL: over its budget of {:.0f} ({:+.2f}%) in {}\n", item, now, it->second,
                 100 * (now / it->second - 1), budget_path);
      ok = false;
    }
  }
  return ok;
}

int compare(const std::string& baseline_path, const std::string& counts_path, const std::string& budget_path,
            double tolerance_pct, bool update) {
  const json counts = read_json(counts_path);
  const std::map<std::string, double> budget = read_budget(budget_path);
  if (update) {
    if (!within_budget(counts.at("counts"), budget, budget_path)) {
      fmt::print(
          "callgrind gate: not updating {}: a count over its budget fails the gate whatever the baseline says (make "
          "it faster, or raise the budget in a commit of its own that says why)\n",
          baseline_path);
      return 1;
    }
    json b;
    b["format"] = "tptune-callgrind-baseline";
    b["tolerance_pct"] = tolerance_pct;
    b["counts"] = counts.at("counts");
    b["environment"] = counts.at("environment");
    b["note"] =
        "instructions (Ir) of each item's measured region under valgrind --tool=callgrind; written by "
        "bench/update-baseline.sh; counts depend on the compiler and libraries of the CI image";
    stamp_version(b);
    write_output("", baseline_path, json_dump(b, 2) + "\n");
    fmt::print("callgrind gate: wrote {} ({} items)\n", baseline_path, counts.at("counts").size());
    return 0;
  }
  const json base = read_json(baseline_path);
  if (base.value("format", "") != "tptune-callgrind-baseline")
    throw std::runtime_error(baseline_path + ": expected a tptune-callgrind-baseline file");
  if (tolerance_pct < 0) tolerance_pct = base.value("tolerance_pct", 3.0);
  bool pass = true;
  fmt::print("callgrind gate: instructions of the measured regions, tolerance {:.1f}% (baseline {})\n", tolerance_pct,
             baseline_path);
  fmt::print("  {:<16} {:>16} {:>16} {:>9}\n", "item", "baseline", "now", "change");
  for (const auto& [item, now_v] : counts.at("counts").items()) {
    const double now = now_v.get<double>();
    if (!base.at("counts").contains(item)) {
      fmt::print("  {:<16} {:>16} {:>16.0f} {:>9}  NEW (not in the baseline: run bench/update-baseline.sh)\n", item,
                 "-", now, "");
      pass = false;
      continue;
    }
    const double old = base.at("counts").at(item).get<double>();
    const double change = old > 0 ? 100 * (now / old - 1) : 0;
    const bool fail = std::abs(change) > tolerance_pct;
    pass = pass && !fail;
    fmt::print("  {:<16} {:>16.0f} {:>16.0f} {:>+8.2f}%  {}\n", item, old, now, change,
               fail ? (change > 0 ? "FAIL (slower)" : "FAIL (faster: update the baseline)") : "ok");
  }
  for (const auto& [item, v] : base.at("counts").items())
    if (!counts.at("counts").contains(item)) {
      fmt::print("  {:<16} {:>16.0f} {:>16} {:>9}  MISSING from this run\n", item, v.get<double>(), "-", "");
      pass = false;
    }
  // The fixed ceilings (the baseline may move with a change; the budget does not).
  pass = within_budget(counts.at("counts"), budget, budget_path) && pass;
  const json& env = base.value("environment", json::object());
  const json& now_env = counts.value("environment", json::object());
  for (const auto& [k, v] : env.items())
    if (now_env.contains(k) && now_env[k] != v)
      fmt::print("  note: {} differs from the baseline's ({} -> {}): counts may move for that reason alone\n", k,
                 v.dump(), now_env[k].dump());
  fmt::print("callgrind gate: {}\n", pass ? "PASS"
                                          : "FAIL (if intended, run bench/update-baseline.sh and say why in the "
                                            "commit; a count over its budget needs the budget raised first, in a "
                                            "commit of its own with the measured reason)");
  return pass ? 0 : 1;
}

// ---- --wall-report FILE ---------------------------------------------------------------------------------------
int wall_report(const std::string& path) {
  const json j = read_json(path);
  std::map<std::string, double> median;  // run_name -> real_time (ns)
  std::map<std::string, std::string> unit;
  for (const json& b : j.at("benchmarks"))
    if (b.value("aggregate_name", "") == "median") {
      median[b.at("run_name").get<std::string>()] = b.at("real_time").get<double>();
      unit[b.at("run_name").get<std::string>()] = b.value("time_unit", "ns");
    }
  auto ref = median.find("BM_Reference");
  fmt::print("wall time (information only; medians of {} repetitions; ratio = median / BM_Reference's median)\n",
             j.at("benchmarks").empty() ? 0 : j.at("benchmarks")[0].value("repetitions", 0));
  for (const auto& [name, t] : median)
    fmt::print("  {:<28} {:>12.3f} {:<3} {:>10}\n", name, t, unit[name],
               ref != median.end() && unit[name] == unit["BM_Reference"] && ref->second > 0
                   ? fmt::format("x{:.4g}", t / ref->second)
                   : "");
  return 0;
}

// ---- Google Benchmark ---------------------------------------------------------------------------------------
void BM_Reference(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(reference_work());
}
BENCHMARK(BM_Reference)->Unit(benchmark::kMillisecond);

void BM_GateLower405B(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(bench::lower_llama405b().tp);
}
BENCHMARK(BM_GateLower405B)->Unit(benchmark::kMillisecond);

void BM_GateSimulate405B(benchmark::State& state) {
  const Program p = bench::lower_llama405b();
  const ClusterSpec c = bench::h100_cluster_1024();
  for (auto _ : state) benchmark::DoNotOptimize(simulate(p, c, default_cost_params()).step_time_ms);
}
BENCHMARK(BM_GateSimulate405B)->Unit(benchmark::kMillisecond);

void BM_GateSearch405B(benchmark::State& state) {
  const Config cfg = search_config();
  for (auto _ : state) benchmark::DoNotOptimize(search(cfg, search_options()).feasible);
}
BENCHMARK(BM_GateSearch405B)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc == 3 && std::strcmp(argv[1], "--run") == 0) return run_item(argv[2]);
    if (argc == 3 && std::strcmp(argv[1], "--wall-report") == 0) return wall_report(argv[2]);
    if (argc >= 4 && std::strcmp(argv[1], "--compare") == 0) {
      double tolerance = -1;  // the baseline's
      bool update = false;
      const std::string baseline = argv[2];
      const size_t slash = baseline.find_last_of('/');
      std::string budget = (slash == std::string::npos ? "" : baseline.substr(0, slash + 1)) + "callgrind-budget.json";
      for (int i = 4; i < argc; ++i) {
        if (std::strcmp(argv[i], "--update") == 0)
          update = true;
        else if (std::strcmp(argv[i], "--tolerance") == 0 && i + 1 < argc)
          tolerance = std::strtod(argv[++i], nullptr);
        else if (std::strcmp(argv[i], "--budget") == 0 && i + 1 < argc)
          budget = argv[++i];
        else
          throw std::runtime_error(std::string("unknown argument ") + argv[i]);
      }
      if (update && tolerance < 0) tolerance = 3.0;
      return compare(baseline, argv[3], budget, tolerance, update);
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_gate: error: {}\n", e.what());
    return 2;
  }
  bench::print_environment("bench_gate");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
