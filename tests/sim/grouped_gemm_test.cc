// The grouped GEMM of a mixture of experts' routed experts (GemmOp::groups > 1, torch._grouped_mm), priced at
// CostParams::grouped_gemm_factor of a dense GEMM's rate: the factor is what torchao's microbenchmark of bf16
// torch._grouped_mm on a B200 measured against tptune's dense pricing of the same GEMMs.
#include <catch2/catch.hpp>
#include <cmath>

#include "sim/cost/compute_cost.h"
#include "sim/cost/cost_param_fields.h"
#include "sim/gpu_spec.h"

using namespace tptune;

namespace {

// Forward and backward of y = A W^T over G groups of M / G rows (N outputs, K inputs): the output (M/G, N, K), the
// grad-input (M/G, K, N) and the grad-weight (N, K, M/G) grouped GEMMs, as plans/lower/experts.cc lowers them.
double fwd_bwd_us(int64_t M, int64_t N, int64_t K, int64_t G, const GpuSpec& gpu, const CostParams& c) {
  const int64_t m = M / G;
  GemmOp fwd{m, N, K, DType::bf16, DType::bf16, DType::bf16, false, true};
  GemmOp d_input{m, K, N, DType::bf16, DType::bf16, DType::bf16, false, false};
  GemmOp d_weight{N, K, m, DType::bf16, DType::bf16, DType::bf16, true, false};
  fwd.groups = d_input.groups = d_weight.groups = G;
  return gemm_cost(fwd, gpu, c).time_us + gemm_cost(d_input, gpu, c).time_us + gemm_cost(d_weight, gpu, c).time_us;
}

}  // namespace

TEST_CASE("grouped GEMMs on b200 run at torchao's measured rate of bf16 torch._grouped_mm") {
  // pytorch/ao torchao/prototype/moe_training/README.md at 0b1bb117, "Microbenchmarks" (B200, torch
  // 2.10.0a0+gitf6de195): bf16_fwd_bwd_us as printed, Llama 4 and DeepSeek-V3 expert shapes, G = 1 .. 8 groups
  // ("to simulate different degrees of expert parallelism"). The burst scale: kernel benchmarks time short bursts
  // (sustained_tensor_fraction 1).
  const GpuSpec b200 = gpu_preset("b200");
  CostParams burst = device_cost_params(b200);
  REQUIRE(burst.grouped_gemm_factor == 0.434);
  burst.sustained_tensor_fraction = 1;
  CostParams dense = burst;
  dense.grouped_gemm_factor = 1;
  struct Row {
    int64_t m, n, k, g;
    double us;
  };
  const Row rows[] = {{128000, 8192, 5120, 1, 43140.20}, {128000, 8192, 5120, 2, 39487.60},
                      {128000, 8192, 5120, 4, 39189.20}, {128000, 8192, 5120, 8, 37700.70},
                      {128000, 2048, 7168, 1, 13064.80}, {128000, 2048, 7168, 2, 14900.20},
                      {128000, 2048, 7168, 4, 15823.60}, {128000, 2048, 7168, 8, 14966.80}};
  double log_sum = 0;
  int grouped = 0;
  for (const Row& r : rows) {
    INFO("M " << r.m << " N " << r.n << " K " << r.k << " G " << r.g);
    // Priced as dense GEMMs (what tptune did before the factor): 0.40 to 0.52 of the measured time.
    const double as_dense = fwd_bwd_us(r.m, r.n, r.k, r.g, b200, dense);
    CHECK(as_dense / r.us > 0.39);
    CHECK(as_dense / r.us < 0.53);
    if (r.g == 1) continue;  // one group: GemmOp::groups 1 is a dense GEMM to tptune (recorded, not fitted)
    log_sum += std::log(as_dense / r.us);
    // With the factor: within 10 % of each measurement (their spread around the geometric mean).
    const double t = fwd_bwd_us(r.m, r.n, r.k, r.g, b200, burst);
    CHECK(std::abs(t / r.us - 1) < 0.10);
    ++grouped;
  }
  CHECK(grouped == 6);
  // The factor is the geometric mean of the six grouped rows' ratios, 0.434 (what `tp-plan calibrate --kernels`
  // fits from profiles/kernels/torchao-moe-grouped-mm.yaml).
  CHECK(std::exp(log_sum / 6) == Approx(0.434).margin(0.0005));
}

TEST_CASE("grouped_gemm_factor: a grouped GEMM's FLOP time over the factor, a dense one unchanged") {
  const GpuSpec h200 = gpu_preset("h200");
  CostParams c = device_cost_params(h200);
  REQUIRE(c.grouped_gemm_factor == 1.0);  // Hopper: no measurement, priced as dense GEMMs
  // 8 groups of (1024, 4096, 4096): the same shape terms whatever the factor; the FLOP time scales by 1 / factor.
  GemmOp g{1024, 4096, 4096};
  g.groups = 8;
  const double at_one = gemm_cost(g, h200, c).time_us - c.gemm_overhead_us;
  c.grouped_gemm_factor = 0.5;
  CHECK(gemm_cost(g, h200, c).time_us - c.gemm_overhead_us == Approx(2 * at_one));
  GemmOp one = g;
  one.groups = 1;
  CostParams base = device_cost_params(h200);
  CHECK(gemm_cost(one, h200, c).time_us == gemm_cost(one, h200, base).time_us);
}
