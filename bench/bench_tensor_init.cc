// Weight initialisation on the host (runtime/tensor_init.h): every tp-run verify and profile builds the full
// unsharded model's parameters, so its cost per element is paid for every parameter of the model: 3.8 G elements
// for Llama3-70B with 2 layers (bench/gpu-check.sh's profiles). Two variants over the same 16 M-element tensor:
//   BM_InitParameter                    init_parameter: the tensor's name hashed once, one SplitMix64 step an element
//   BM_InitParameterPerElementHash      the former implementation: seeded_uniform() per element, which hashes the
//                                       whole name ("layers.0.feed_forward.w1.weight") for every element
// Read the counter ns_per_element of each; the values are the same bit for bit (tests/runtime/tensor_init_test.cc).
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

}  // namespace

int main(int argc, char** argv) {
  bench::print_environment("bench_tensor_init");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
