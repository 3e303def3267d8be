// tp-run bench memory-bound (runtime/bench_kernels.h) and its data (runtime/bench_data.h) on the CPU backend.
#include "runtime/bench_kernels.h"

#include <catch2/catch.hpp>

#include "plans/util/error.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/tensor_init.h"

using namespace tptune;

TEST_CASE("the bench data generator: keyed draws equal seeded_uniform, and its first values are pinned",
          "[runtime][bench]") {
  const uint64_t key = seeded_key(kBenchSeed, "x");
  for (int64_t i : {0, 1, 2, 3, 1000003}) CHECK(seeded_uniform_keyed(key, i) == seeded_uniform(kBenchSeed, "x", i));
  // bench/bench_data.py --self-test pins the same four values for its Python port (uniform(20261204, "x", i)).
  CHECK(seeded_uniform(kBenchSeed, "x", 0) == 0.848635793f);
  CHECK(seeded_uniform(kBenchSeed, "x", 1) == -0.972029448f);
  CHECK(seeded_uniform(kBenchSeed, "x", 2) == 0.466910243f);
  CHECK(seeded_uniform(kBenchSeed, "x", 3) == -0.397878408f);
  // An operand is std x sqrt(3) x u: activations std 1, weights std 0.02.
  CpuBackend be;
  Buffer b = be.alloc(4, Storage::f32);
  const auto rec = fill_bench_operand(be, b.ptr(), 4, kBenchSeed, "x", BenchValues::weight);
  float v[4];
  be.download(v, b.ptr(), 4);
  CHECK(v[0] == Approx(0.02 * std::sqrt(3.0) * 0.848635793).epsilon(1e-6));
  CHECK(rec["std"] == Approx(0.02));
  CHECK(rec["name"] == "x");
}

TEST_CASE("bench memory-bound: every op timed, its bytes by the table, % of the copy of the same run",
          "[runtime][bench]") {
  CpuBackend be;  // stores bf16 as fp32: e = 4 bytes
  MemoryBoundShape s;
  s.rows = 16, s.dim = 32, s.ffn_dim = 64, s.vocab = 128, s.heads = 2, s.head_dim = 16;
  BenchOptions o;
  o.warmup = 0, o.iters = 1;
  const auto j = bench_memory_bound(be, s, o);
  CHECK(j["bench"] == "memory-bound");
  CHECK(j["data"]["seed"] == kBenchSeed);
  CHECK(j["shape"]["storage"] == "f32");
  CHECK(j["timing"]["method"].get<std::string>().rfind("queued: each sample issued behind a 256 MiB copy", 0) == 0);
  // The copy: max(16 x 32, 64 MiB / 4) = 16 Mi fp32 elements, read and written: 128 MiB.
  CHECK(j["copy"]["bytes"] == 134217728);
  REQUIRE(j["results"].size() == memory_bound_ops().size());
  for (const auto& r : j["results"]) {
    INFO(r["op"]);
    CHECK(r["time_us"]["median"].get<double>() > 0);
    // against a copy moving as many bytes (half of them read, half written) in the same run
    CHECK(r["copy_GBps"].get<double>() > 0);
    CHECK(r["percent_of_copy"].get<double>() == Approx(100.0 * r["GBps"].get<double>() / r["copy_GBps"].get<double>()));
    const std::string op = r["op"];
    // R 16, D 32, F 64, V 128, H x d = 32, e 4, float8 stored as fp32 on the CPU (e8 4):
    if (op == "rmsnorm_fwd") CHECK(r["bytes"] == 2 * 16 * 32 * 4 + 32 * 4 + 4 * 16);      // 4288
    if (op == "rope_fwd") CHECK(r["bytes"] == 2 * 16 * 32 * 4);                           // 4096
    if (op == "swiglu_bwd") CHECK(r["bytes"] == 5 * 16 * 64 * 4);                         // 20480
    if (op == "ce_backward") CHECK(r["bytes"] == 2 * 16 * 128 * 4 + 12 * 16);             // 16576
    if (op == "fp8_cast") CHECK(r["bytes"] == 16 * 32 * (4 + 4) + 8);                     // 4104
    if (op == "adamw") CHECK(r["bytes"] == 64 * 32 * (24 + 4));                           // 57344
    if (op == "embedding_bwd") CHECK(r["bytes"] == 4 * 16 + 16 * 32 * 4 + 128 * 32 * 4);  // 18496
    CHECK_FALSE(r["operands"].empty());
  }
  s.ops = {"rmsnorm_fwd", "softmax"};
  CHECK_THROWS_WITH(bench_memory_bound(be, s, o), Catch::Contains("--ops: unknown op 'softmax'"));
}

// time_queued_calls (runtime/bench.h): warm-up calls first, then every timed call right after its flush copy (the
// flush's destination holds the source's values when the call runs), and one sample per timed call.
TEST_CASE("queued bench timing: each timed call follows its cache flush", "[runtime][bench]") {
  CpuBackend be;
  const CacheFlush flush(be);
  CHECK(flush.elements * 4 * 2 == CacheFlush::kBytes);  // fp32, read half and write half
  std::vector<float> ones(size_t(flush.elements), 1.0f);
  be.upload(flush.from.f32(), ones.data(), flush.elements);
  float* to = flush.to.f32();  // the CPU backend's buffers are host memory
  BenchOptions o;
  o.warmup = 2, o.iters = 5;
  int calls = 0, flushed_before = 0;
  const OpTiming t = time_queued_calls(be, o, flush, [&] {
    ++calls;
    if (to[0] == 1.0f && to[flush.elements - 1] == 1.0f) ++flushed_before;
    to[0] = to[flush.elements - 1] = 0.0f;  // the next flush must write them again
  });
  CHECK(calls == 7);
  CHECK(flushed_before == 5);  // the warm-up calls ran before any flush
  CHECK(t.median >= 0);
  CHECK(t.max >= t.min);
}
