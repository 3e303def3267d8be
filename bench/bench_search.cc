// The default search for Llama3-405B on 1024 H100s (examples/llama3-405b-h100.yaml: 1080 candidates) and for the
// Llama3-8B example: wall time of one whole search, and candidates evaluated per second. The goal is the full
// default space in well under a second on one core. Search8BSeq is the 8B example's space at three sequence lengths
// (search.seq_lens [2048, 4096, 8192]: 3 x 864 candidates), whose candidates/s compare with Search8B's.
// Search405BAcLayers is the 11.7 M-candidate space of examples/llama3-405b-ac-layers.yaml (issue 13's "at least
// 10^7 candidates in under 10 s on one thread"); `decided_per_s` counts only the candidates a model decided.
// Search405BPP is examples/llama3-405b-pp.yaml: the 405B space with pipeline candidates (issue 23's "under 50 ms on
// one thread"); `pipeline_programs` counts the microbatch Programs its pipeline candidates shared.
// Search4D405B: the 4-D space of issue 41 (tp x FSDP/HSDP x cp x pp x schedule; see below). SearchMoE and
// SearchDeepSeekV3: mixtures of experts on 1,024 GPUs over the expert-parallel axis (issue 42; see below).
// SearchPruned/log2_candidates:20 and :24 are issue 37's memory check: spaces of 2^20 and 2^24 candidates with the
// same 1024 survivors, all others pruned by the first static rule (tp does not divide the world size), whose peak
// memory must not grow with the pruned candidates; counters candidates, pruned and peak_rss_mib (getrusage's
// ru_maxrss after the search: the whole process's high-water mark, reset before the search through
// /proc/self/clear_refs; where that is refused, the process's peak so far: run the case alone with
// --benchmark_filter). Before issue 37 the 2^20 space peaked at 1268 MiB (~1.2 KB per candidate) and the 2^24 one
// at ~20 GB; now 12.3 and 13.5 MiB (2-core VM, Release).
//
//   ninja -C build bench_search && build/bench/bench_search
//   build/bench/bench_search --benchmark_filter=405B/threads:1
//
// Arguments: threads (0 = all), bound (k > 0: branch-and-bound keeping the top k exact, SearchOptions::bound_top, as
// `tp-plan search --bound --top k`; 0: off, the default).
// Counters: candidates, feasible, pruned_bound (candidates the bound skipped), lowered (lower() or lower_unfinished()
// calls), finished (finish_lowering()), patched (Programs from a BatchProgram), and the per-phase breakdown of the last
// search in ms summed over threads (ms_constraints, ms_lower, ms_finish, ms_patch, ms_memory, ms_cost, ms_schedule,
// ms_report; sim/search/phase_times.h).
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <sys/resource.h>

#include <fstream>
#include <string>
#include <thread>

#include "bench/bench_environment.h"
#include "plans/language/config.h"
#include "sim/search/constraints.h"
#include "sim/search/search.h"

using namespace tptune;

namespace {

Config example_config(const char* example) {
  return load_config(std::string(TPTUNE_SOURCE_DIR) + "/examples/" + example);
}

// The last search run() made (its caller may read more counters from it).
SearchResult& last_search() {
  static SearchResult r;
  return r;
}
const SearchResult* last_result() { return &last_search(); }

void run(benchmark::State& state, const Config& cfg) {
  SearchOptions o;
  o.threads = static_cast<int>(state.range(0));
  o.bound_top = static_cast<size_t>(state.range(1));
  SearchResult& r = last_search();
  for (auto _ : state) {
    r = search(cfg, o);
    benchmark::DoNotOptimize(r.feasible);
  }
  state.counters["candidates"] = static_cast<double>(r.evaluated);
  state.counters["feasible"] = static_cast<double>(r.feasible);
  const auto n = [&](PruneReason reason) { return r.pruned.count(reason) ? r.pruned.at(reason) : size_t{0}; };
  state.counters["pruned_bound"] = static_cast<double>(n(PruneReason::bound));
  state.counters["lowered"] = static_cast<double>(r.lowered);
  state.counters["finished"] = static_cast<double>(r.finished);
  state.counters["patched"] = static_cast<double>(r.patched);
  state.counters["pipeline_programs"] = static_cast<double>(r.pipeline_programs);
  for (int p = 0; p < kSearchPhases; ++p)
    state.counters[fmt::format("ms_{}", to_string(static_cast<SearchPhase>(p)))] =
        r.phases.ns[static_cast<size_t>(p)] / 1e6;
  state.counters["threads_used"] = r.threads;
  state.counters["candidates_per_s"] = benchmark::Counter(
      static_cast<double>(r.evaluated) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  // The candidates the simulator decided (feasible, or proved out of memory, below the bound or below the minimum
  // throughput), leaving out those a static rule refused before any model ran (divisibility, async TP without
  // sequence parallel, redundant at tp 1, ...).
  const size_t decided = r.feasible + n(PruneReason::memory) + n(PruneReason::bound) + n(PruneReason::min_throughput);
  state.counters["decided"] = static_cast<double>(decided);
  state.counters["decided_per_s"] = benchmark::Counter(
      static_cast<double>(decided) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_Search405B(benchmark::State& state) { run(state, example_config("llama3-405b-h100.yaml")); }
void BM_Search405BPP(benchmark::State& state) { run(state, example_config("llama3-405b-pp.yaml")); }
void BM_Search8B(benchmark::State& state) { run(state, example_config("llama3-8b-h100.yaml")); }
void BM_Search8BSeq(benchmark::State& state) {
  Config cfg = example_config("llama3-8b-h100.yaml");
  cfg.search.seq_lens = {2048, 4096, 8192};
  run(state, cfg);
}

// threads (0 = all), bound: the default search on 1 and 2 threads and every core, then branch-and-bound for the top 10
// (tp-plan search's default --top) on 1 and 2 threads.
void search_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"threads", "bound"})
      ->Args({1, 0})
      ->Args({2, 0})
      ->Args({0, 0})
      ->Args({1, 10})
      ->Args({2, 10})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->MinTime(2.0);
}
BENCHMARK(BM_Search405B)->Apply(search_args);
BENCHMARK(BM_Search405BPP)->Apply(search_args);
BENCHMARK(BM_Search8B)->Apply(search_args);
BENCHMARK(BM_Search8BSeq)->Apply(search_args);
// examples/llama3-405b-ac-layers.yaml: 11.7 M candidates (search.ac_layers: all, four sequence lengths, dp_replicate
// 1-8, local batch 1-24), with branch-and-bound for the top 10 as the example says to run it, on 1 and 2 threads.
void BM_Search405BAcLayers(benchmark::State& state) { run(state, example_config("llama3-405b-ac-layers.yaml")); }
BENCHMARK(BM_Search405BAcLayers)
    ->ArgNames({"threads", "bound"})
    ->Args({1, 10})
    ->Args({2, 10})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);

// SearchMoE (issue 42 item 5): Mixtral 8x7B (examples/hf/mixtral-8x7b/config.json) on 1,024 H100s (128 nodes of 8) over
// the expert-parallel axis: ep {1, 2, 4, 8} (the default: the divisors of the world that divide its 8 experts) x tp {1,
// 2, 4, 8, 16} (the default) x dp_shard (world / tp) x both presets x float8 none, tensorwise, rowwise x async TP off
// and on x loss parallel x the three AC policies x local batch {1, 2, 4}: 4,320 candidates, of which float8 tensorwise
// and async TP are pruned statically (not lowered for MoE). Counters as above. Measured 2026-12-04 (2-core VM shared
// with four builds, Release): 4,320 candidates, 896 feasible, 98 ms on one thread (44 k candidates/s; 84 ms of it the
// schedule); bound 10: 38 ms (113 k candidates/s, 785 pruned by the bound).
void BM_SearchMoE(benchmark::State& state) {
  Config cfg = load_config(std::string(TPTUNE_SOURCE_DIR) + "/examples/qwen3-30b-a3b-h100.yaml",
                           std::string(TPTUNE_SOURCE_DIR) + "/examples/hf/mixtral-8x7b/config.json");
  cfg.cluster.nodes = 128;
  run(state, cfg);
}
BENCHMARK(BM_SearchMoE)->Apply(search_args);

// SearchDeepSeekV3 (issue 42): DeepSeek-V3 671B (examples/hf/deepseek-v3/config.json: 61 blocks, the first 3 dense:
// two block templates in one Program, plans/program/program.h "Structure") on 1,024 H100s (examples/deepseek-v3-16b-
// h100.yaml at 128 nodes), the exact search over ep (the default: 1, 2, 4, ..., 256, the divisors of the world that
// divide its 256 experts) x tp {1, 2, 4, 8, 16} (the default) x dp_shard (world / (pp x tp)) x pp {1, 2, 4, 8} (1F1B;
// a stage holds dense blocks, MoE blocks or both, plans/lower/rewrite/pipeline_stage.h) x the three AC policies x local
// batch {1, 2, 4, 8}, the sequence-parallel preset with loss parallelism in bf16 without async TP (float8 tensorwise
// and async TP of a MoE model are refused, float8 rowwise of latent attention too): 9 x 5 x 4 x 3 x 4 = 2,160
// candidates. Issue 42: under 1 s on one core. Counters as above. Measured 2026-12-05 (2-core VM shared with another
// build, Release): 2,160 candidates, 478 feasible, 390 pipeline microbatch Programs, 247 ms on one thread (8.8 k
// candidates/s); bound 10: 205 ms (916 pruned by the bound).
void BM_SearchDeepSeekV3(benchmark::State& state) {
  Config cfg = load_config(std::string(TPTUNE_SOURCE_DIR) + "/examples/deepseek-v3-16b-h100.yaml",
                           std::string(TPTUNE_SOURCE_DIR) + "/examples/hf/deepseek-v3/config.json");
  cfg.cluster.nodes = 128;
  SearchSpace& s = cfg.search;
  s.pp_degrees = {1, 2, 4, 8};
  s.presets = {"sequence_parallel"};
  s.float8 = {Float8Recipe::none};
  s.async_tp = {false};
  s.loss_parallel = {true};
  s.activation_checkpointing = {ActivationCheckpointing::none, ActivationCheckpointing::selective,
                                ActivationCheckpointing::full};
  s.local_batch_sizes = {1, 2, 4, 8};
  run(state, cfg);
}
BENCHMARK(BM_SearchDeepSeekV3)->Apply(search_args);

// Search4D405B (issue 41): Llama 3.1 405B on 1,024 H100s over the 4-D space: tp {1, 2, 4, 8} x FSDP with HSDP
// dp_replicate {1, 2, 8} x cp {1, 2, 4, 8} x pp {1, 2, 4, 8, 16} x every pipeline schedule, both presets, the three
// float8 recipes, async TP off and on, the three AC policies and local batch {1, 2, 4, 8}: 200,448 candidates. One
// thread, each search timed once (2-core VM: exhaustive 9.2 s before issue 41's pipeline work, 3.7 s after; bound 10
// 9.6 s -> 2.0 s, 84,057 candidates pruned by the pp 1 and pipeline bounds). Counters as above, plus
// s_per_1e9_candidates (the time 10^9 candidates would take at this rate, issue 41's "under 10 s for 10^9") and,
// with bound > 0, winner_equals_exhaustive: 1 when the bounded search's winner is the exhaustive search's (same
// candidate, same tokens/s), from one exhaustive search outside the timed region.
Config space_4d() {
  Config cfg = example_config("llama3-405b-h100.yaml");
  SearchSpace& s = cfg.search;
  s.tp_degrees = {1, 2, 4, 8};
  s.dp_replicate = {1, 2, 8};
  s.cp_degrees = {1, 2, 4, 8};
  s.pp_degrees = {1, 2, 4, 8, 16};
  s.pp_schedules = {PipelineScheduleKind::gpipe,
                    PipelineScheduleKind::one_f_one_b,
                    PipelineScheduleKind::interleaved_1f1b,
                    PipelineScheduleKind::looped_bfs,
                    PipelineScheduleKind::interleaved_zero_bubble,
                    PipelineScheduleKind::zbv_zero_bubble,
                    PipelineScheduleKind::dual_pipe_v};
  s.pp_stages_per_rank = {0};
  s.pp_microbatch_sizes = {1};
  s.loss_parallel = {true};
  s.local_batch_sizes = {1, 2, 4, 8};
  return cfg;
}

void BM_Search4D405B(benchmark::State& state) {
  const Config cfg = space_4d();
  run(state, cfg);
  const SearchResult* r = last_result();
  state.counters["s_per_1e9_candidates"] = r && state.iterations() > 0 && r->evaluated > 0
                                               ? 1e9 * r->elapsed_ms / 1e3 / static_cast<double>(r->evaluated)
                                               : 0.0;
  if (state.range(1) > 0 && r && !r->ranking.empty()) {
    SearchOptions o;
    o.threads = static_cast<int>(state.range(0));
    const SearchResult exhaustive = search(cfg, o);
    const CandidateResult& a = r->results[static_cast<size_t>(r->ranking[0])];
    const CandidateResult& b = exhaustive.results[static_cast<size_t>(exhaustive.ranking[0])];
    state.counters["winner_equals_exhaustive"] =
        !exhaustive.ranking.empty() && a.candidate.index == b.candidate.index &&
                a.report.tokens_per_second_per_gpu == b.report.tokens_per_second_per_gpu
            ? 1.0
            : 0.0;
  }
}
BENCHMARK(BM_Search4D405B)
    ->ArgNames({"threads", "bound"})
    ->Args({1, 0})
    ->Args({1, 10})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(1);

// issue 37's space: tiny-llama (examples/tiny-llama.yaml) on one node of 8 H100s, one family and one value of every
// toggle, local_batch_sizes 1..256 and tp_degrees 1..2^(log2_candidates - 8): 2^20 or 2^24 candidates. Only tp 1, 2, 4
// and 8 divide the world, so all but 4 x 256 = 1024 candidates are pruned by the first rule ("tp does not divide the
// world size"; 99.9 % at 2^20, 99.99 % at 2^24); tp 8 is pruned as kv_heads (4 kv heads), and tp 1, 2 and 4 are
// evaluated at every batch (768 feasible: the tiny model fits them all). Both spaces have the same survivors, so a
// peak that does not grow from one to the other does not grow with the pruned candidates.
Config pruned_space(int log2_candidates) {
  Config cfg = example_config("tiny-llama.yaml");
  cfg.cluster.nodes = 1;
  cfg.cluster.gpus_per_node = 8;
  SearchSpace& s = cfg.search;
  s.tp_degrees.clear();
  for (int tp = 1; tp <= 1 << (log2_candidates - 8); ++tp) s.tp_degrees.push_back(tp);
  s.local_batch_sizes.clear();
  for (int64_t b = 1; b <= 256; ++b) s.local_batch_sizes.push_back(b);
  s.presets = {"sequence_parallel"};
  s.float8 = {Float8Recipe::none};
  s.async_tp = {false};
  s.loss_parallel = {true};
  s.activation_checkpointing = {ActivationCheckpointing::none};
  return cfg;
}

// The process's peak resident set in MiB (ru_maxrss is in KiB on Linux).
double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

void BM_SearchPruned(benchmark::State& state) {
  const Config cfg = pruned_space(static_cast<int>(state.range(0)));
  SearchOptions o;
  o.threads = 1;
  SearchResult r;
  double peak = 0;
  for (auto _ : state) {
    state.PauseTiming();
    r = SearchResult{};                                 // the last iteration's result is not part of this one's peak
    { std::ofstream("/proc/self/clear_refs") << "5"; }  // resets the high-water mark (Linux 4.0+)
    state.ResumeTiming();
    r = search(cfg, o);
    peak = std::max(peak, peak_rss_mib());
    benchmark::DoNotOptimize(r.feasible);
  }
  size_t pruned = 0;
  for (const auto& [cause, n] : r.pruned) pruned += n;
  state.counters["candidates"] = static_cast<double>(r.evaluated);
  state.counters["pruned"] = static_cast<double>(pruned);
  state.counters["feasible"] = static_cast<double>(r.feasible);
  state.counters["peak_rss_mib"] = peak;
}
BENCHMARK(BM_SearchPruned)
    ->ArgNames({"log2_candidates"})
    ->Arg(20)
    ->Arg(24)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(1);

}  // namespace

int main(int argc, char** argv) {
  bench::print_environment("bench_search");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
