// Typed storage in the Backend (runtime/backend.h) and the single-GPU profiling mode, on the CPU backend.
#include <catch2/catch.hpp>
#include <cmath>

#include "plans/config.h"
#include "plans/error.h"
#include "plans/lower.h"
#include "plans/plan.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/executor.h"
#include "runtime/profiler.h"
#include "tests/fixtures.h"

using namespace tptune;

TEST_CASE("storages: element sizes, names, typed pointer offsets", "[runtime][storage]") {
  CHECK(storage_bytes(Storage::f32) == 4);
  CHECK(storage_bytes(Storage::bf16) == 2);
  CHECK(storage_bytes(Storage::fp8_e4m3) == 1);
  CHECK(storage_bytes(Storage::fp8_e5m2) == 1);
  CHECK(storage_bytes(Storage::i32) == 4);
  CHECK(to_string(Storage::fp8_e5m2) == "fp8_e5m2");
  char base[64];
  // 3 bf16 elements on are 6 bytes; 5 float8 elements 5 bytes; the storage travels with the pointer.
  DevPtr p(base, Storage::bf16);
  CHECK(static_cast<char*>(p.at(3).ptr) - base == 6);
  CHECK(p.at(3).storage == Storage::bf16);
  CHECK(static_cast<char*>(DevPtr(base, Storage::fp8_e4m3).at(5).ptr) - base == 5);
  float f[4];
  DevPtr q(f);  // a float* is an f32 pointer
  CHECK(q.storage == Storage::f32);
  CHECK(q.at(2).f32("test") == f + 2);
}

TEST_CASE("the CPU backend stores every float as fp32 and refuses other storages in one line", "[runtime][storage]") {
  CpuBackend be;
  for (DType t : {DType::bf16, DType::fp32, DType::fp8_e4m3, DType::fp8_e5m2}) CHECK(be.storage_for(t) == Storage::f32);
  Buffer b = be.alloc(4, Storage::bf16);
  std::vector<float> host(4, 1.0f);
  CHECK_THROWS_WITH(be.upload(b.ptr(), host.data(), 4),
                    "cpu backend: upload: expected an f32 tensor, got bf16 storage");
  Buffer x = be.alloc(4, Storage::f32), y = be.alloc(4, Storage::fp8_e4m3);
  CHECK_THROWS_WITH(be.add(4, x.ptr(), x.ptr(), y.ptr()),
                    "cpu backend: add: expected an f32 tensor, got fp8_e4m3 storage");
}

TEST_CASE("local shapes of tp 2 on one process: rank 0's compute runs, collectives are recorded as not measured",
          "[runtime][profile]") {
  CpuBackend be;  // a TP group of one
  const Program p = test::lower_example("tiny-llama.yaml", "sequence_parallel", {.tp_degree = 2});
  ProfileOptions o;
  o.warmup = 0, o.iters = 1, o.local_shapes_of_tp = 2;
  auto j = profile_json(profile_program(p, be, o));
  CHECK(j["local_shapes_of_tp"] == 2);
  CHECK(j["collectives"].get<std::string>().find("not run") != std::string::npos);
  CHECK_FALSE(j.contains("step_wall_us"));  // no whole step ran
  CHECK(j["compute_wall_us"]["median"].get<double>() > 0);
  CHECK(j["final_loss"].is_null());
  size_t collectives = 0, gemms = 0;
  for (const auto& op : j["ops"]) {
    if (op["kind"] == "collective") {
      ++collectives;
      CHECK(op["measured"] == false);
      CHECK(op["time_us"].is_null());
      if (op["op"]["group"] == "tp") CHECK(op["op"]["group_size"] == 2);
    } else {
      CHECK(op["time_us"].is_object());
    }
    // tiny-llama: dim 64 (8 heads of 8); wq at tp 2 is colwise, so its local output is 64 / 2 = 32 features.
    if (op["name"] == "layers.0.attention.wq.fwd") {
      ++gemms;
      CHECK(op["op"]["n"] == 32);
    }
  }
  CHECK(collectives > 0);
  CHECK(gemms == 1);
  CHECK(j["ops"].size() == expand(p).ops.size());
}

TEST_CASE("local shapes mode needs a TP group of one process", "[runtime][profile]") {
  CpuBackend be;
  ExecutorOptions o;
  o.local_shapes_of_tp = 2;
  CHECK_THROWS_WITH(Executor(test::lower_example("tiny-llama.yaml", "sequence_parallel", {.tp_degree = 4}), be, o),
                    Catch::Contains("lowered for tp 4"));
}
