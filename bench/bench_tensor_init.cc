// Weight initialisation on the host (runtime/tensor_init.h): every tp-run verify and profile draws its parameters
// on the host, 3.8 G elements for Llama3-70B with 2 layers at tp 1 (bench/gpu-check.sh's profiles). Variants over the
// same 16 M-element tensor:
//   BM_InitParameter                    init_parameter: the tensor's name hashed once, one SplitMix64 step an element
//   BM_InitParameterPerElementHash      the former implementation: seeded_uniform() per element, which hashes the
//                                       whole name ("layers.0.feed_forward.w1.weight") for every element
//   BM_InitShardOfFull/8                a rank of tp 8 as the executor did before: the full tensor, then its slice
//   BM_InitParameterShard/8             init_parameter_shard: the rank's slice drawn alone
// Read the counter ns_per_element of each (per element of the tensor the rank keeps, for the two tp 8 variants); the
// values are the same bit for bit (tests/runtime/tensor_init_test.cc).
//
//   ninja -C build bench_tensor_init && build/bench/bench_tensor_init
#include <benchmark/benchmark.h>

#include <cmath>
#include <string>
#include <vector>

#include "bench/bench_environment.h"
#include "runtime/tensor_init.h"

using namespace tptune;

namespace {

const std::string kName = "layers.0.feed_forward.w1.weight";  // a name as long as the model's usual ones
const Shape kShape{4096, 4096};                               // 16.8 M elements

// ns per element: (n x 1e-9) elements per iteration as a rate (G elements / s), inverted.
void per_element(benchmark::State& state, int64_t n) {
  state.counters["ns_per_element"] = benchmark::Counter(
      static_cast<double>(n) * 1e-9, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_InitParameter(benchmark::State& state) {
  for (auto _ : state) {
    std::vector<float> v = init_parameter(1, kName, kShape);
    benchmark::DoNotOptimize(v.data());
  }
  per_element(state, numel(kShape));
}
BENCHMARK(BM_InitParameter)->Unit(benchmark::kMillisecond);

void BM_InitParameterPerElementHash(benchmark::State& state) {
  const int64_t n = numel(kShape);
  const float scale = static_cast<float>(std::sqrt(3.0 / static_cast<double>(kShape.back())));
  for (auto _ : state) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = scale * seeded_uniform(1, kName, i);
    benchmark::DoNotOptimize(v.data());
  }
  per_element(state, n);
}
BENCHMARK(BM_InitParameterPerElementHash)->Unit(benchmark::kMillisecond);

// Rank 0 of tp N's column shard (dim 1: strided runs, the harder case for the direct draw).
void BM_InitShardOfFull(benchmark::State& state) {
  const int parts = static_cast<int>(state.range(0));
  for (auto _ : state) {
    std::vector<float> v = shard_of(init_parameter(1, kName, kShape), kShape, 1, parts, 0);
    benchmark::DoNotOptimize(v.data());
  }
  per_element(state, numel(kShape) / parts);
}
BENCHMARK(BM_InitShardOfFull)->Arg(8)->Unit(benchmark::kMillisecond);

void BM_InitParameterShard(benchmark::State& state) {
  const int parts = static_cast<int>(state.range(0));
  for (auto _ : state) {
    std::vector<float> v = init_parameter_shard(1, kName, kShape, 1, parts, 0);
    benchmark::DoNotOptimize(v.data());
  }
  per_element(state, numel(kShape) / parts);
}
BENCHMARK(BM_InitParameterShard)->Arg(8)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  bench::print_environment("bench_tensor_init");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
