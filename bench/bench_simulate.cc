// Simulating one plan of Llama3-405B (126 layers) on 1024 H100s (128 nodes x 8, tp 8, sequence parallel, FSDP over
// the other 128): the search simulates ~1000 candidates per second, so one simulation must stay well under 1 ms.
//
//   ninja -C build bench_simulate && build/bench/bench_simulate
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "bench/bench_cases.h"
#include "bench/bench_environment.h"
#include "plans/lower/lower.h"
#include "sim/simulate.h"

using namespace tptune;

namespace {

struct Case {
  Program program;
  ClusterSpec cluster;
};

Case llama405b(bool async_tp, ActivationCheckpointing ac) {
  return {bench::lower_llama405b(async_tp, ac), bench::h100_cluster_1024()};
}

void report_once(const Case& c, benchmark::State& state) {
  StepReport r = simulate(c.program, c.cluster, default_cost_params());
  state.counters["step_ms"] = r.step_time_ms;
  state.counters["mfu_pct"] = 100 * r.mfu;
  state.counters["peak_GiB"] = r.memory.peak / 1073741824.0;
  size_t ops = 0;
  for (const Segment& s : c.program.segments) ops += s.ops.size();
  state.counters["template_ops"] = static_cast<double>(ops);
}

void BM_Simulate405B(benchmark::State& state) {
  Case c = llama405b(state.range(0) != 0, static_cast<ActivationCheckpointing>(state.range(1)));
  for (auto _ : state) {
    StepReport r = simulate(c.program, c.cluster, default_cost_params());
    benchmark::DoNotOptimize(r.step_time_ms);
  }
  report_once(c, state);
}
BENCHMARK(BM_Simulate405B)
    ->ArgNames({"async_tp", "ac"})
    ->Args({0, 0})
    ->Args({1, 0})
    ->Args({0, 2})
    ->Unit(benchmark::kMicrosecond)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true);

// The parts: per-op costs, the schedule alone (a caller keeping OpCosts), and the lowering (not the simulator's,
// but what a search pays per candidate too).
void BM_CostOps405B(benchmark::State& state) {
  Case c = llama405b(false, ActivationCheckpointing::none);
  for (auto _ : state) benchmark::DoNotOptimize(cost_ops(c.program, c.cluster, default_cost_params()));
}
BENCHMARK(BM_CostOps405B)->Unit(benchmark::kMicrosecond);

void BM_Schedule405B(benchmark::State& state) {
  Case c = llama405b(false, ActivationCheckpointing::none);
  OpCosts costs = cost_ops(c.program, c.cluster, default_cost_params());
  for (auto _ : state) benchmark::DoNotOptimize(schedule(c.program, costs, default_cost_params()).step_time_us);
}
BENCHMARK(BM_Schedule405B)->Unit(benchmark::kMicrosecond);

void BM_Lower405B(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(llama405b(false, ActivationCheckpointing::none).program.tp);
}
BENCHMARK(BM_Lower405B)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  bench::print_environment("bench_simulate");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
