// The 500 W HBM2e H100 torchtitan benchmarked on (sim/gpus/h100-sxm-hbm2e-500w.yaml) and the cost parameter that
// models its power cap, CostParams::tensor_clock_fraction.
#include <catch2/catch.hpp>

#include "sim/cost/compute_cost.h"
#include "sim/cost/cost_param_fields.h"
#include "sim/gpu_spec.h"

using namespace tptune;

namespace {
double cost_param(const GpuSpec& g, const std::string& name) {
  for (const auto& [k, v] : g.cost_params)
    if (k == name) return v;
  return -1;
}
}  // namespace

TEST_CASE("the 500 W HBM2e H100 preset: torchtitan's figures, the same GH100 die, a power-capped clock") {
  const GpuSpec g = gpu_preset("h100-sxm-hbm2e-500w");
  const GpuSpec sxm = gpu_preset("h100-sxm");
  // torchtitan: "96GB HBM2e with 2.4 TB/sec peak memory bandwidth", "400 Gb/s per GPU", 8 GPUs per host on NVLink.
  CHECK(g.hbm_bandwidth_GBps == 2400);
  CHECK(g.network_bandwidth_GBps == 50);  // 400 Gb/s / 8
  CHECK(g.nvlink_bandwidth_GBps == sxm.nvlink_bandwidth_GBps);
  // 96 GiB of HBM2e less the 361 MiB the 80 GB part reserves (81920 - 81559): 97943 MiB = 95.647 GiB.
  CHECK(g.memory_GiB == Approx(95.6));
  // The die's tensor peaks are the SXM's; the cap is the clock fraction, fitted to the public record (tp-plan
  // calibrate --published), started from a datasheet interpolation between NVL (835.5 / 989.4 at 400 W) and SXM (1.0
  // at 700 W), linear in power at 500 W: 0.845 + 0.155 / 3 = 0.897. Its prior now
  // is the rate the die holds at 500 W from measured sustained rates (tests/sim/power_curve_test.cc: 0.735).
  CHECK(g.bf16_tflops == sxm.bf16_tflops);
  CHECK(g.fp8_tflops == sxm.fp8_tflops);
  CHECK(g.sm_count == 132);
  // The fitted clock 0.6421 now reads 0.6421 / 0.888 = 0.723086 beside the sustained rate the part carries from the
  // H200 SXM (sustained_tensor_fraction 0.888, which scales the same rates): their product is what the fit found.
  CHECK(cost_param(g, "tensor_clock_fraction") == Approx(0.723086));
  CHECK(device_cost_params(g).tensor_clock_fraction == Approx(0.723086));
  CHECK(device_cost_params(g).tensor_clock_fraction * device_cost_params(g).sustained_tensor_fraction ==
        Approx(0.6421).epsilon(1e-6));
  CHECK(device_cost_params(sxm).tensor_clock_fraction == 1.0);
  CHECK_THAT(g.sources.at("cost_params.tensor_clock_fraction"), Catch::Contains("835.5 dense"));
  CHECK_THAT(g.sources.at("cost_params.tensor_clock_fraction"), Catch::Contains("fitted"));
  CHECK_THAT(g.sources.at("cost_params.tensor_clock_fraction"), Catch::Contains("started from 0.90"));
  CHECK_THAT(g.sources.at("cost_params.tensor_clock_fraction"), Catch::Contains("Prior 0.735, measured"));
  CHECK_THAT(g.sources.at("hbm_bandwidth_GBps"), Catch::Contains("2.4 TB/sec"));
}

TEST_CASE("tensor_clock_fraction scales tensor-core GEMMs and attention, not fp32 GEMMs") {
  const GpuSpec h100 = gpu_preset("h100-sxm");
  CostParams full = default_cost_params(), capped = full;
  set_cost_param(capped, "tensor_clock_fraction", 0.9, "test");
  GemmOp g{8192, 8192, 8192};
  // h100-sxm at 8192^3 bf16: efficiency 0.84 x 0.969697 x 0.984615 = 0.802014 (tests/sim/cost_model_test.cc),
  // 2 x 8192^3 FLOPs / (989e12 x 0.802014) = 1386.19 us + 2 us launch = 1388.19 us. At 0.9 of the clock:
  // 1386.19 / 0.9 = 1540.21 + 2 = 1542.21 us (the operand bytes, 141 us, stay under it).
  CHECK(gemm_cost(g, h100, full).time_us == Approx(1388.19).epsilon(1e-5));
  const ComputeEstimate c = gemm_cost(g, h100, capped);
  CHECK(c.time_us == Approx(1542.21).epsilon(1e-5));
  CHECK(c.efficiency == Approx(0.802014 * 0.9).epsilon(1e-5));
  // float8 operands: the same factor on the fp8 rate.
  GemmOp f8 = g;
  f8.a_dtype = f8.b_dtype = DType::fp8_e4m3;
  f8.trans_b = true;  // K-major operands: no layout copy (memory-bound, not clocked)
  CHECK((gemm_cost(f8, h100, capped).time_us - 2) == Approx((gemm_cost(f8, h100, full).time_us - 2) / 0.9));
  // fp32 runs on CUDA cores: unchanged.
  GemmOp f32 = g;
  f32.a_dtype = f32.b_dtype = f32.c_dtype = DType::fp32;
  CHECK(gemm_cost(f32, h100, capped).time_us == gemm_cost(f32, h100, full).time_us);
  // Attention (compute-bound at seq 8192): its FLOP time over 0.9, the 4 us overhead unchanged.
  AttentionOp a{1, 8192, 32, 8, 128};
  const double t_full = attention_cost(a, DType::bf16, h100, full).time_us - full.attention_overhead_us;
  const double t_capped = attention_cost(a, DType::bf16, h100, capped).time_us - capped.attention_overhead_us;
  CHECK(t_capped == Approx(t_full / 0.9));
}

TEST_CASE("tensor_clock_fraction is a cost parameter a calibration sets by name, from 0.1 to 1") {
  CostParams c = default_cost_params();
  set_cost_param(c, "tensor_clock_fraction", 0.85, "calib.yaml:3");
  CHECK(c.tensor_clock_fraction == 0.85);
  CHECK_THROWS_WITH(set_cost_param(c, "tensor_clock_fraction", 1.2, "calib.yaml:3"),
                    Catch::Contains("tensor_clock_fraction"));
}
