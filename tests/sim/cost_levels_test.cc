// Every cost parameter at its level (sim/cost/cost_levels.h): none left out, and the ones issue 38 names where it says.
#include "sim/cost/cost_levels.h"

#include <catch2/catch.hpp>

#include "sim/cost/cost_param_fields.h"
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
