#pragma once
// The data benchmarks run on (issue 39): values like a training step's, not constants. A GEMM's power draw, and so
// its clock, depends on its operands' values (constant operands let an H200 report 93 % of its datasheet rate), and
// a float8 cast with a unit scale is not the cast training runs, so every bench operand is
//   value[i] = scale x seeded_uniform(seed, name, i)      (runtime/tensor_init.h: SplitMix64 of the seed, the
//                                                           operand's name and i; uniform in [-1, 1))
// with scale sqrt(3) for activations and gradients (unit variance, as a normed activation) and 0.02 sqrt(3) for
// weights (torchtitan's init std 0.02). Float8 operands are cast as training casts them: the amax of the bf16
// values, torchao's multiplier max finite / amax, round to nearest even (the Backend's fp8_amax and fp8_cast).
// bench/torch_compare.py ports the generator to Python (same bits), so that PyTorch times the same values.
// Every operand a bench fills is described in its JSON: {"name", "elements", "storage", "distribution", "std"}.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/backend.h"

namespace tptune {

inline constexpr uint64_t kBenchSeed = 20261204;  // the default seed of every bench (recorded in its JSON)

enum class BenchValues { activation, weight };

// Fills n elements at dst (any floating storage but float8) with the operand `name`'s values; returns its record.
nlohmann::json fill_bench_operand(Backend& be, DevPtr dst, int64_t n, uint64_t seed, const std::string& name,
                                  BenchValues kind);

// Fills a float8 operand (dst.storage fp8_e4m3 or fp8_e5m2, dtype to match) with the float8 cast of the operand's
// bf16 values, and its tensorwise scale at *scale (a device fp32 scalar); returns its record (with "amax").
nlohmann::json fill_bench_float8_operand(Backend& be, DevPtr dst, DType dtype, int64_t n, uint64_t seed,
                                         const std::string& name, BenchValues kind, float* scale);

// The generator's description for a bench JSON's top level: {"generator", "seed"}.
nlohmann::json bench_data_json(uint64_t seed);

}  // namespace tptune
