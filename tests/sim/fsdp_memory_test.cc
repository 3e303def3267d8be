// FSDP2's reduce-scatter input in the memory model, and the caching allocator's reserved figure (sim/memory.h).
#include <catch2/catch.hpp>

#include "sim/memory.h"
#include "sim/report/step_report.h"
#include "sim/simulate.h"
#include "tests/fixtures.h"

using namespace tptune;
using tptune::test::small_model;

TEST_CASE("fsdp memory: one unit's fp32 reduce-scatter input stays alive through the backward") {
  // small_model's block: wq 512x512, wk and wv 512x256 (8 kv heads of 32), wo 512x512, w1 and w3 512x1024, w2
  // 1024x512, two norms of 512: 262144 + 2 x 131072 + 262144 + 3 x 524288 + 1024 = 2,360,320 elements, the largest
  // FSDP unit (the embedding and the output are 524,288 each). fp32: 4 x 2,360,320 = 9,441,280 bytes.
  const CostParams c;
  Program p = test::lower_preset("sequence_parallel", {.tp_degree = 1, .dp_shard = 4}, small_model(2), 256);
  MemoryParts parts = memory_parts(p, c);
  CHECK(parts.fsdp_reduce_scatter_input == 9441280.0);
  // tp 2: the linear weights are halved, the norms replicated: (2,359,296 / 2 + 1024) x 4 = 4,722,688.
  p = test::lower_preset("sequence_parallel", {.tp_degree = 2, .dp_shard = 2}, small_model(2), 256);
  CHECK(memory_parts(p, c).fsdp_reduce_scatter_input == 4722688.0);
  // No FSDP, no buffer.
  p = test::lower_preset("sequence_parallel", {.tp_degree = 4}, small_model(2), 256);
  CHECK(memory_parts(p, c).fsdp_reduce_scatter_input == 0);
  SECTION("it counts in the backward phases only") {
    p = test::lower_preset("sequence_parallel", {.tp_degree = 1, .dp_shard = 4}, small_model(2), 256);
    parts = memory_parts(p, c);
    MemoryParts without = parts;
    without.fsdp_reduce_scatter_input = 0;
    // Make the backward the peak phase: a large backward working set.
    parts.ws_backward = without.ws_backward = 1e10;
    const GpuSpec gpu = test::cluster_of("h100-sxm", 1, 8).gpu;
    const MemoryReport a = memory_from_parts(parts, gpu, c), b = memory_from_parts(without, gpu, c);
    CHECK(a.peak_phase == "backward");
    CHECK(a.working_set - b.working_set == 9441280.0);
    // A forward peak does not see it.
    parts.ws_backward = without.ws_backward = 0;
    parts.ws_forward = without.ws_forward = 1e10;
    CHECK(memory_from_parts(parts, gpu, c).peak == memory_from_parts(without, gpu, c).peak);
  }
}

TEST_CASE("fsdp memory: the allocator reserves the tensors x (1 + memory_fragmentation), no runtime overhead") {
  CostParams c;
  c.memory_fragmentation = 0.10;
  c.memory_runtime_overhead_GiB = 1.5;
  const Program p = test::lower_preset("sequence_parallel", {.tp_degree = 2, .dp_shard = 4}, small_model(2), 256);
  const MemoryReport r = memory_model(p, test::cluster_of("h100-sxm", 1, 8).gpu, c);
  // peak = tensors + 1.5 GiB + 0.10 x tensors; reserved = 1.10 x tensors, without the CUDA context and NCCL's
  // buffers (outside the caching allocator).
  const double tensors = (r.peak - 1.5 * 1073741824.0) / 1.10;
  CHECK(r.allocator_reserved == Approx(1.10 * tensors).epsilon(1e-12));
  CHECK(r.allocator_reserved == Approx(r.peak - 1.5 * 1073741824.0).epsilon(1e-12));
}

TEST_CASE("fsdp memory: simulate's JSON carries the allocator's reserved figure") {
  const StepReport r =
      simulate(test::lower_preset("sequence_parallel", {.tp_degree = 2, .dp_shard = 4}, small_model(2), 256),
               test::cluster_of("h100-sxm", 1, 8), default_cost_params());
  const nlohmann::json j = report_json(r);
  CHECK(j["memory_gib"]["allocator_reserved"].get<double>() == r.memory.allocator_reserved / 1073741824.0);
  CHECK(r.memory.allocator_reserved > 0);
  CHECK(r.memory.allocator_reserved < r.memory.peak);  // no CUDA context, no NCCL buffers
}
