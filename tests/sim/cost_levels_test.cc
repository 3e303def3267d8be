// Every cost parameter at its level (sim/cost/cost_levels.h): none left out, and the ones issue 38 names where it says.
#include "sim/cost/cost_levels.h"

#include <catch2/catch.hpp>

#include "sim/cost/cost_param_fields.h"
#include "sim/gpu_spec.h"
#include "tests/error_text.h"

using namespace tptune;

TEST_CASE("cost levels: every named cost parameter has a level") {
  for (const auto& f : cost_param_fields()) {
    INFO(f.name);
    CHECK(test::error_of([&] { cost_param_level(f.name); }) == "(no error)");
  }
  CHECK(cost_param_level("tensor_clock_fraction") == CostLevel::part);
  CHECK(cost_param_level("gemm_efficiency") == CostLevel::architecture);
  CHECK(cost_param_level("attention_bwd_efficiency") == CostLevel::architecture);
  // Issue 38: the caching allocator's reserve and torchao's rowwise recipe are the stack's, not one part's.
  CHECK(cost_param_level("memory_fragmentation") == CostLevel::stack);
  CHECK(cost_param_level("gemm_fp8_rowwise_factor") == CostLevel::stack);
  CHECK(cost_param_level("norm_traffic_factor") == CostLevel::stack);
  CHECK(test::error_of([] { cost_param_level("gemm_eficiency"); }) ==
        "gemm_eficiency: no level (part, architecture, stack) for this cost parameter: add it to "
        "sim/cost/cost_levels.cc");
}

// Issue 38: a GPU preset is a part and its architecture; the software stack's terms (PyTorch's caching allocator,
// torchao's recipes, eager PyTorch's traffic) are shared by every GPU, so what the public record's fit teaches them
// reaches every preset. A preset that set one would price the same PyTorch differently per part. The cpu device is
// another stack (tp-run's own kernels and allocation), so it states its own.
TEST_CASE("cost levels: no GPU preset sets a software-stack term") {
  for (const std::string& name : gpu_preset_names()) {
    const GpuSpec g = gpu_preset(name);
    if (g.architecture == "cpu") continue;
    for (const auto& [param, value] : g.cost_params) {
      INFO(name << ": " << param << " = " << value);
      CHECK(cost_param_level(param) != CostLevel::stack);
    }
  }
  // The two the 500 W preset carried until they moved: every GPU preset now prices them as the stack's fit left them
  // (sim/cost/cost_param_list.h: 0.6636 and 0.1826, fitted to the public record's H100 runs).
  for (const char* name : {"h100-sxm-hbm2e-500w", "h100-sxm", "h200", "b200", "a100-sxm-80gb"}) {
    const CostParams c = device_cost_params(gpu_preset(name));
    INFO(name);
    CHECK(c.gemm_fp8_rowwise_factor == 0.6636);
    CHECK(c.memory_fragmentation == 0.1826);
  }
  // tp-run allocates from the C++ heap: no caching allocator's reserve.
  CHECK(device_cost_params(gpu_preset("cpu")).memory_fragmentation == 0);
}
