// The part-level sustained tensor rate, CostParams::sustained_tensor_fraction: the rate a training step holds once the
// part is saturated at its power limit, against the short bursts kernel-level figures are timed at
// (profiles/kernels/ml-engineering-msmf.yaml: MSMF over MAMF).
#include <catch2/catch.hpp>

#include "sim/cost/compute_cost.h"
#include "sim/cost/cost_levels.h"
#include "sim/cost/cost_param_fields.h"
#include "sim/gpu_spec.h"

using namespace tptune;

TEST_CASE("sustained_tensor_fraction: an 8192^3 bf16 GEMM on h200 takes 1/0.888 of its burst time") {
  const GpuSpec h200 = gpu_preset("h200");
  const CostParams sustained = device_cost_params(h200);
  CostParams burst = sustained;
  burst.sustained_tensor_fraction = 1;
  REQUIRE(sustained.sustained_tensor_fraction == 0.888);
  GemmOp g{8192, 8192, 8192};
  // h200 is h100-sxm's GH100 (132 SMs, 989 TFLOPS bf16): tiles 128x256, 2048 CTAs in 16 waves of 132 -> 0.969697;
  // k 8192 / (8192 + 128) = 0.984615; efficiency 0.84 x 0.969697 x 0.984615 = 0.802014 (tests/sim/cost_model_test.cc).
  // Burst: 2 x 8192^3 = 1.099512e12 FLOPs / (989e12 x 0.802014) = 1386.19 us, + 2 us launch = 1388.19 us.
  // Sustained: efficiency 0.802014 x 0.888 = 0.712188; 1386.19 / 0.888 = 1561.02 us, + 2 = 1563.02 us (the operand
  // bytes, 3 x 8192^2 x 2 B = 402.7 MB at 4800 GB/s x 0.85 = 98.7 us, stay under it).
  CHECK(gemm_cost(g, h200, burst).time_us == Approx(1388.19).epsilon(1e-5));
  const ComputeEstimate c = gemm_cost(g, h200, sustained);
  CHECK(c.time_us == Approx(1563.02).epsilon(1e-5));
  CHECK(c.efficiency == Approx(0.712188).epsilon(1e-5));
  // float8: the same factor on the fp8 rate.
  GemmOp f8 = g;
  f8.a_dtype = f8.b_dtype = DType::fp8_e4m3;
  f8.trans_b = true;  // K-major operands: no layout copy
  CHECK((gemm_cost(f8, h200, sustained).time_us - 2) == Approx((gemm_cost(f8, h200, burst).time_us - 2) / 0.888));
  // fp32 runs on CUDA cores, which the figure does not describe: unchanged.
  GemmOp f32 = g;
  f32.a_dtype = f32.b_dtype = f32.c_dtype = DType::fp32;
  CHECK(gemm_cost(f32, h200, sustained).time_us == gemm_cost(f32, h200, burst).time_us);
  // Attention runs on the same tensor cores in the same saturated step: its FLOP time over 0.888 too.
  AttentionOp a{1, 8192, 32, 8, 128};
  const double t_burst = attention_cost(a, DType::bf16, h200, burst).time_us - burst.attention_overhead_us;
  const double t_sustained = attention_cost(a, DType::bf16, h200, sustained).time_us - sustained.attention_overhead_us;
  CHECK(t_sustained == Approx(t_burst / 0.888));
  // It composes with a power cap's clock: 0.5 x 0.888 of the rate.
  CostParams capped = sustained;
  capped.tensor_clock_fraction = 0.5;
  CHECK((gemm_cost(g, h200, capped).time_us - 2) == Approx(1386.19 / (0.5 * 0.888)).epsilon(1e-5));
}

TEST_CASE("sustained_tensor_fraction: each preset's value and where it comes from") {
  // MSMF / MAMF as ml-engineering prints them (profiles/kernels/ml-engineering-msmf.yaml): H200 SXM bf16 755 / 850 =
  // 0.8882, fp8 1354 / 1525 = 0.8879 -> 0.888; B200 1439 / 1737 = 0.8284, 2788 / 3350 = 0.8322 -> 0.830; A100 PCIe
  // 258 / 285 = 0.9053. Parts without a row carry the nearest part's, and say so; the A100 SXM does not carry the A100
  // PCIe's (Ampere's GEMM prior already sits 7 % under its burst: its source says why).
  struct Want {
    const char* preset;
    double value;
    const char* source_has;
  };
  for (const Want& w :
       {Want{"h200", 0.888, "MSMF 755 / MAMF 850"}, Want{"h100-sxm", 0.888, "carried from the H200 SXM"},
        Want{"h100-sxm-hbm2e-500w", 0.888, "carried from the H200 SXM"}, Want{"b200", 0.830, "MSMF 1439 / MAMF 1737"},
        Want{"gb200", 0.830, "carried from the B200 SXM"}, Want{"a100-sxm-80gb", 1.0, "not carried"},
        Want{"cpu", 1.0, "no boost"}}) {
    INFO(w.preset);
    const GpuSpec g = gpu_preset(w.preset);
    CHECK(device_cost_params(g).sustained_tensor_fraction == w.value);
    CHECK_THAT(g.sources.at("cost_params.sustained_tensor_fraction"), Catch::Contains(w.source_has));
  }
  CHECK(default_cost_params().sustained_tensor_fraction == 1.0);
  CHECK(cost_param_level("sustained_tensor_fraction") == CostLevel::part);
  // A calibration sets it by name, within (0, 1].
  CostParams c = default_cost_params();
  set_cost_param(c, "sustained_tensor_fraction", 0.9, "calib.yaml:3");
  CHECK(c.sustained_tensor_fraction == 0.9);
  CHECK_THROWS_WITH(set_cost_param(c, "sustained_tensor_fraction", 1.2, "calib.yaml:3"),
                    Catch::Contains("sustained_tensor_fraction"));
}
