#include "runtime/bench_data.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "plans/util/error.h"
#include "runtime/tensor_init.h"

namespace tptune {
namespace {

constexpr int64_t kChunk = int64_t(1) << 22;  // host elements generated and uploaded at a time (16 MiB of fp32)

float std_of(BenchValues kind) { return kind == BenchValues::weight ? 0.02f : 1.0f; }

nlohmann::json record(const std::string& name, int64_t n, Storage s, BenchValues kind) {
  return {{"name", name},
          {"elements", n},
          {"storage", std::string(to_string(s))},
          {"distribution", "uniform"},
          {"std", std_of(kind)}};
}

}  // namespace

nlohmann::json fill_bench_operand(Backend& be, DevPtr dst, int64_t n, uint64_t seed, const std::string& name,
                                  BenchValues kind) {
  if (dst.storage == Storage::fp8_e4m3 || dst.storage == Storage::fp8_e5m2 || dst.storage == Storage::i32)
    throw Error("bench data: " + name + ": fill_bench_operand takes a bf16 or fp32 buffer");
  const float scale = std_of(kind) * std::sqrt(3.0f);  // uniform [-a, a) has std a / sqrt(3)
  const uint64_t key = seeded_key(seed, name);
  std::vector<float> host(size_t(std::min(n, kChunk)));
  for (int64_t start = 0; start < n; start += kChunk) {
    const int64_t len = std::min(kChunk, n - start);
    for (int64_t i = 0; i < len; ++i) host[size_t(i)] = scale * seeded_uniform_keyed(key, start + i);
    be.upload(dst.at(start), host.data(), len);
  }
  return record(name, n, dst.storage, kind);
}

nlohmann::json fill_bench_float8_operand(Backend& be, DevPtr dst, DType dtype, int64_t n, uint64_t seed,
                                         const std::string& name, BenchValues kind, float* scale) {
  if (!is_float8(dtype)) throw Error("bench data: " + name + ": not a float8 dtype");
  Buffer staging = be.alloc(n, be.storage_for(DType::bf16)), amax = be.alloc(1, Storage::f32);
  fill_bench_operand(be, staging.ptr(), n, seed, name, kind);
  be.fp8_amax(n, staging.ptr(), amax.f32());
  be.fp8_cast(n, dtype, staging.ptr(), amax.f32(), dst, scale);
  float host_amax = 0;
  be.download(&host_amax, amax.f32(), 1);
  nlohmann::json r = record(name, n, dst.storage, kind);
  r["cast_from"] = std::string(to_string(be.storage_for(DType::bf16)));
  r["amax"] = host_amax;
  return r;
}

nlohmann::json bench_data_json(uint64_t seed) {
  return {
      {"generator", "splitmix64 uniform (runtime/tensor_init.h seeded_uniform), scaled to std (runtime/bench_data.h)"},
      {"seed", seed}};
}

}  // namespace tptune
