// The clock a power cap leaves (sim/calibrate/power_curve.h): the sustained GEMM rates one die holds at two or more
// board power limits give its rate at a lower one. The real record's figure for the 500 W H100 derived by hand, the
// least-squares fit on three limits, and the rows that give no curve; the kernel record's one-line errors for the keys.
#include "sim/calibrate/power_curve.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <catch2/catch.hpp>
#include <cmath>

#include "sim/calibrate/kernel_fit.h"
#include "sim/cost/cost_param_fields.h"
#include "sim/gpu_spec.h"
#include "tests/error_text.h"
#include "tests/sim/kernel_record_text.h"

using namespace tptune;
using tptune::test::error_of;

namespace {

std::string source(const std::string& rows) { return test::kernel_source_header("test-power") + rows; }

std::string row(const std::string& id, const std::string& dtype, double figure, double power_W,
                const std::string& unit = "TFLOPS") {
  return fmt::format(
      "  - {{id: {}, gpu_as_printed: X, architecture: hopper, kernel: gemm_sustained, dtype: {}, figure: {}, burst: "
      "{}, unit: {}, power_limit_W: {}, power_source: s, quote: q}}\n",
      id, dtype, figure, figure * 1.1, unit, power_W);
}

KernelSource parse(const std::string& text) { return parse_kernel_source(text, "bad.yaml"); }

}  // namespace

TEST_CASE("power curve: the 500 W H100's clock from the rates its die holds at 700 and 600 W") {
  const auto record = load_kernel_record(std::string(TPTUNE_SOURCE_DIR) + "/profiles/kernels");
  const auto clocks = power_curve_clocks(record);
  // Only the 500 W preset is capped (tensor_clock_fraction < 1) and states its limit; its die's rows in
  // ml-engineering's MSMF table: H200 SXM 700 W 755 bf16 / 1354 fp8 TFLOPS, H200 NVL 600 W 665 / 1160.
  REQUIRE(clocks.size() == 1);
  const PowerCurveClock& c = clocks[0];
  CHECK(c.gpu == "h100-sxm-hbm2e-500w");
  CHECK(c.power_W == 500);
  CHECK(c.reference_W == 700);
  // bf16: alpha = ln(665 / 755) / ln(600 / 700) = -0.126928 / -0.154151 = 0.823420;
  //       (500 / 700)^alpha = exp(0.823420 x -0.336472) = 0.758011.
  // fp8:  alpha = ln(1160 / 1354) / ln(600 / 700) = -0.154643 / -0.154151 = 1.003195; clock 0.713518.
  // Geometric mean: sqrt(0.758011 x 0.713518) = 0.735428.
  REQUIRE(c.per_dtype.size() == 2);
  CHECK(c.per_dtype[0] == "bf16 0.758 (alpha 0.823; 665 TFLOPS at 600 W, 755 TFLOPS at 700 W)");
  CHECK(c.per_dtype[1] == "fp8_e4m3 0.714 (alpha 1.003; 1160 TFLOPS at 600 W, 1354 TFLOPS at 700 W)");
  CHECK(c.implied == Approx(0.735428).epsilon(1e-5));
  CHECK(c.sources == std::vector<std::string>{"ml-engineering-msmf"});
  // Issue 38: the clock the public record's fit found is within 5 % of what the power cap alone explains.
  CHECK(c.preset == device_cost_params(gpu_preset("h100-sxm-hbm2e-500w")).tensor_clock_fraction);
  CHECK(std::fabs(c.preset / c.implied - 1) < 0.05);
  // tp-plan calibrate --kernels prints it.
  CHECK(kernel_fit_text(fit_kernels(record))
            .find("part level: h100-sxm-hbm2e-500w tensor_clock_fraction 0.7231 in its preset; at its 500 W the "
                  "sustained rates of its die held at other power limits (ml-engineering-msmf) imply 0.735 of the "
                  "rate at 700 W: bf16 0.758") != std::string::npos);
}

TEST_CASE("power curve: least squares over three limits, and the rows that give no curve") {
  // ln rate = ln a + alpha ln P through (500 W, 600), (600 W, 700), (700 W, 800), by hand:
  //   x = ln 500, ln 600, ln 700 = 6.214608, 6.396930, 6.551080 (mean 6.387539; deviations -0.172931, 0.009390,
  //   0.163541); y = ln 600, ln 700, ln 800 (mean 6.544207; deviations -0.147278, 0.006873, 0.140404);
  //   sxx = 0.029905 + 0.000088 + 0.026746 = 0.056739; sxy = 0.025469 + 0.000065 + 0.022962 = 0.048495;
  //   alpha = 0.048495 / 0.056739 = 0.854708; clock at 500 W of 700 W: (500 / 700)^0.854708 = 0.750072.
  const KernelSource s =
      parse(source(row("a", "bf16", 600, 500) + row("b", "bf16", 700, 600) + row("c", "bf16", 800, 700) +
                   row("d", "fp8", 1500, 700) + row("e", "fp8", 0.7, 600, "fraction_of_peak")));
  const auto clocks = power_curve_clocks({s});
  REQUIRE(clocks.size() == 1);
  // fp8 has one usable limit (the fraction of its own part's peak is left out): no curve, so bf16's alone.
  REQUIRE(clocks[0].per_dtype.size() == 1);
  CHECK(clocks[0].implied == Approx(0.750072).epsilon(1e-5));
  CHECK(clocks[0].per_dtype[0].starts_with("bf16 0.750 (alpha 0.855; "));
  // One limit only: no curve at all.
  CHECK(power_curve_clocks({parse(source(row("a", "bf16", 600, 700) + row("b", "bf16", 650, 700)))}).empty());
}

TEST_CASE("power curve: the kernel record's keys, each error one line with file, line and key") {
  const std::string gemm_with_power =
      "  - {id: g, gpu: h200, gpu_as_printed: X, kernel: gemm, dtype: bf16, figure: 700, unit: TFLOPS, "
      "power_limit_W: 700, power_source: s, quote: q}\n";
  CHECK(error_of([&] { parse(source(gemm_with_power)); }) ==
        "bad.yaml:8: measurements[0].power_limit_W: only a gemm_sustained figure was held at a power limit: leave it "
        "out of a gemm");
  const std::string no_source =
      "  - {id: s, gpu: h200, gpu_as_printed: X, kernel: gemm_sustained, dtype: bf16, figure: 755, burst: 850, unit: "
      "TFLOPS, power_limit_W: 700, quote: q}\n";
  CHECK(error_of([&] { parse(source(no_source)); }) ==
        "bad.yaml:8: measurements[0].power_source: missing; power_limit_W and power_source go together (the limit, "
        "and where it is stated)");
  CHECK(error_of([] {
          parse(source(row("a", "bf16", 600, 0)));
        }).starts_with("bad.yaml:8: measurements[0].power_limit_W: expected a number in (0, 5000], got '0'"));
  CHECK(error_of([] {
          parse(source(row("a", "bf16", 600, 9000)));
        }).starts_with("bad.yaml:8: measurements[0].power_limit_W: expected a number in (0, 5000]"));
  const std::string both =
      "  - {id: s, gpu: h200, architecture: hopper, gpu_as_printed: X, kernel: gemm_sustained, dtype: bf16, figure: "
      "755, burst: 850, unit: TFLOPS, quote: q}\n";
  CHECK(error_of([&] { parse(source(both)); }) ==
        "bad.yaml:8: measurements[0].architecture: the preset h200 states it (hopper): leave it out");
  const std::string unknown =
      "  - {id: s, architecture: volta, gpu_as_printed: X, kernel: gemm_sustained, dtype: bf16, figure: 755, burst: "
      "850, unit: TFLOPS, quote: q}\n";
  CHECK(error_of([&] {
          parse(source(unknown));
        }).starts_with("bad.yaml:8: measurements[0].architecture: expected one of"));
  // A preset's architecture reaches its rows.
  const KernelSource ok = parse(source(row("a", "bf16", 600, 600)));
  CHECK(ok.measurements[0].architecture == "hopper");
  CHECK(ok.measurements[0].power_limit_W == 600);
}

TEST_CASE("power curve: a GPU spec's power_limit_W is optional, above 0 and at most 5000 W") {
  CHECK(gpu_preset("h100-sxm-hbm2e-500w").power_limit_W == 500);
  CHECK(gpu_preset("h100-sxm").power_limit_W == 700);
  CHECK(gpu_preset("gb200").power_limit_W == 0);  // not stated
  YAML::Node n = YAML::Load(
      "{bf16_tflops: 1, fp16_tflops: 1, fp8_tflops: 0, fp32_tflops: 1, hbm_bandwidth_GBps: 1, memory_GiB: 1, "
      "sm_count: 1, nvlink_bandwidth_GBps: 1, nvlink_latency_us: 1, nvswitch: true, nvls: false, "
      "network_bandwidth_GBps: 1, network_latency_us: 1, power_limit_W: -3}");
  CHECK(error_of([&] { parse_gpu_spec(n, "spec.yaml"); }) ==
        "spec.yaml:1: power_limit_W: expected a number in (0, 5000], got '-3'");
  n["power_limit_W"] = 450;
  CHECK(parse_gpu_spec(n, "spec.yaml").power_limit_W == 450);
}
