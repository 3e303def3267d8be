// The q/k/v bias ops of Qwen2.5 7B priced by the simulator's memory-bound path (sim/cost/compute_cost.h): bytes over
// HBM bandwidth plus launch, the arithmetic in the comments (default CostParams, as tests/sim/cost_model_test.cc).
#include <catch2/catch.hpp>

#include "plans/lower/lower.h"
#include "plans/model/hf_config.h"
#include "sim/cost/compute_cost.h"
#include "tests/fixtures.h"

using namespace tptune;

TEST_CASE("bias ops: bytes and time of Qwen2.5 7B's wq bias at tp 4 on an H100") {
  const Model m = load_hf_config(std::string(TPTUNE_SOURCE_DIR) + "/examples/hf/qwen2.5-7b/config.json");
  const Program p = lower(m, Training{.seq_len = 8192}, test::make_plan("vanilla", {.tp_degree = 4}));
  const GpuSpec h100 = gpu_preset("h100-sxm");
  auto op = [&](const std::string& name) -> const Op& {
    for (const Segment& s : p.segments)
      for (const Op& o : s.ops)
        if (o.name == name) return o;
    FAIL("no op " << name);
    throw;
  };
  // Forward: wq's local output (1 x 8192 tokens, 3584 / 4 = 896 features) read and written plus the 896-element
  // bias shard, bf16: (2 x 8192 x 896 + 896) x 2 = 29,361,920 bytes; at 3350 GB/s x 0.8 = 10.95594 us, + 4 us launch.
  const Op& add = op("attention.wq.bias_add");
  CHECK(std::get<ElementwiseOp>(add.kind).bytes == 29361920);
  CHECK(compute_cost(add, p, h100, default_cost_params()).time_us == Approx(14.95594).epsilon(1e-6));
  // Backward: dy read once, the shard's gradient written: (8192 x 896 + 896) x 2 = 14,681,856 bytes -> 5.47830 us
  // + 4 us.
  const Op& grad = op("attention.wq.bwd_bias");
  CHECK(std::get<ElementwiseOp>(grad.kind).bytes == 14681856);
  CHECK(compute_cost(grad, p, h100, default_cost_params()).time_us == Approx(9.47830).epsilon(1e-6));
}
