// Kernel-level public measurements (sim/calibrate/kernel_record.h) and the architecture fit to them
// (sim/calibrate/kernel_fit.h): the real folder read whole, every check's one-line error on a hand-written bad file,
// and fitted terms, residuals and a power-capped part's implied clock derived by hand.
#include "sim/calibrate/kernel_record.h"

#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <set>

#include "plans/util/error.h"
#include "sim/calibrate/kernel_fit.h"
#include "sim/gpu_spec.h"
#include "tests/error_text.h"
#include "tests/sim/kernel_record_text.h"

using namespace tptune;
using tptune::test::error_of;

namespace {

// A valid file: a GEMM on the 700 W H100 at 8192^3, the same kind of figure on the 500 W part without a shape, and an
// NVLink ring all-reduce on the H200; `extra` is appended to the measurements.
std::string kernels(const std::string& extra = "") {
  return test::kernel_source_header("test-kernels") + R"yaml(  - id: gemm
    gpu: h100-sxm
    gpu_as_printed: "NVIDIA H100 SXM"
    kernel: gemm
    dtype: bf16
    shape: {m: 8192, n: 8192, k: 8192}
    figure: 791.2
    unit: TFLOPS
    quote: "| H100 | 791.2 |"
  - {id: capped, gpu: h100-sxm-hbm2e-500w, gpu_as_printed: "H100 (Meta)", kernel: gemm, dtype: bf16, figure: 0.78, unit: fraction_of_peak, quote: "0.78"}
  - {id: ring, gpu: h200, gpu_as_printed: "H200", kernel: all_reduce, backend: nccl ring, shape: {ranks: 8, bytes: 17179869184}, figure: 367.61, unit: GBps, quote: "| 367.61GBps |"}
)yaml" + extra;
}

KernelSource parse(const std::string& text) { return parse_kernel_source(text, "bad.yaml"); }

}  // namespace

TEST_CASE("kernel record: a valid file reads every field") {
  const KernelSource s = parse(kernels());
  CHECK(s.id == "test-kernels");
  CHECK(s.commit == "744d01e18b79512572f64a6bbd8b5f4a725203a7");
  REQUIRE(s.measurements.size() == 3);
  const KernelMeasurement& g = s.measurements[0];
  CHECK(g.at == "bad.yaml:8");
  CHECK(g.gpu == "h100-sxm");
  CHECK(g.kind == KernelKind::gemm);
  CHECK(g.dtype == DType::bf16);
  CHECK((g.m == 8192 && g.n == 8192 && g.k == 8192));
  CHECK(g.value() == Approx(791.2e12));
  CHECK(!s.measurements[1].has_shape());
  CHECK(s.measurements[1].value() == 0.78);
  CHECK(s.measurements[2].kind == KernelKind::all_reduce);
  CHECK((s.measurements[2].ranks == 8 && s.measurements[2].bytes == 17179869184));
  CHECK(s.measurements[2].value() == Approx(367.61e9));
}

TEST_CASE("kernel record: every check is one line naming the file, line and key") {
  CHECK(error_of([] { parse(kernels() + "colour: red\n"); }) ==
        "bad.yaml:19: colour: unknown key; expected one of source, measurements");
  CHECK(error_of([] { parse("measurements: []\n"); }) ==
        "bad.yaml:1: source: missing; expected the citation map (id, citation, ...)");
  std::string text = kernels();
  text.replace(text.find("commit: 744d01e1"), 16, "commit: main");
  CHECK(error_of([&] { parse(text); }).starts_with("bad.yaml:6: source.commit: expected a commit hash of 40 hex"));
  // A preset tptune does not have, a kernel it does not know, a unit the kernel cannot have, a fraction above 1.5.
  text = kernels();
  text.replace(text.find("gpu: h100-sxm\n"), 13, "gpu: h100-pcie");
  CHECK(error_of([&] { parse(text); }).starts_with("bad.yaml:9: measurements[0].gpu: expected one of"));
  CHECK(error_of([] {
          parse(
              kernels("  - {id: x, gpu_as_printed: X, kernel: conv, figure: 1, unit: TFLOPS, quote: "
                      "q}\n"));
        }) ==
        "bad.yaml:19: measurements[3].kernel: expected one of gemm, gemm_sustained, attention_fwd, attention_bwd, "
        "attention_fwd_bwd, memory_bound, all_reduce, all_gather, reduce_scatter, grouped_gemm_fwd_bwd, got 'conv'");
  CHECK(error_of([] {
          parse(kernels("  - {id: x, gpu_as_printed: X, kernel: memory_bound, figure: 3000, unit: GBps, quote: q}\n"));
        }) == "bad.yaml:19: measurements[3].unit: expected one of fraction_of_peak, got 'GBps'");
  CHECK(error_of([] {
          parse(
              kernels("  - {id: x, gpu_as_printed: X, kernel: gemm, dtype: bf16, figure: 80, unit: "
                      "fraction_of_peak, quote: q}\n"));
        }) == "bad.yaml:19: measurements[3].figure: expected a number in (0, 1.5], got '80'");
  // A GEMM's dtype and a collective's shape are required; a memory-bound figure has neither dtype nor shape.
  CHECK(error_of([] {
          parse(
              kernels("  - {id: x, gpu_as_printed: X, kernel: gemm, figure: 0.8, unit: fraction_of_peak, quote: q}\n"));
        }) == "bad.yaml:19: measurements[3].dtype: missing; expected bf16, fp16 or fp8");
  CHECK(error_of([] {
          parse(kernels("  - {id: x, gpu_as_printed: X, kernel: all_reduce, figure: 300, unit: GBps, quote: q}\n"));
        }) == "bad.yaml:19: measurements[3].shape: missing; a collective's figure needs {ranks, bytes}");
  CHECK(error_of([] {
          parse(
              kernels("  - {id: x, gpu_as_printed: X, kernel: gemm, dtype: bf16, shape: {m: 1, n: 2}, figure: 1, "
                      "unit: TFLOPS, quote: q}\n"));
        }) == "bad.yaml:19: measurements[3].shape.k: missing; a GEMM shape is {m, n, k}");
  CHECK(error_of([] {
          parse(
              kernels("  - {id: gemm, gpu_as_printed: X, kernel: memory_bound, figure: 0.9, unit: "
                      "fraction_of_peak, quote: q}\n"));
        }) ==
        "bad.yaml:19: measurements[3].id: 'gemm' is also measurements[0]'s id; measurement ids are unique in a file");
  CHECK(error_of([] { parse(kernels("  - {id: y, kernel: gemm}\n")); }) ==
        "bad.yaml:19: measurements[3].gpu_as_printed: missing");
  // A grouped GEMM's time: us only, its shape {m, n, k, groups} required, the groups dividing m.
  CHECK(error_of([] {
          parse(
              kernels("  - {id: x, gpu_as_printed: X, kernel: grouped_gemm_fwd_bwd, dtype: bf16, figure: 900, unit: "
                      "TFLOPS, quote: q}\n"));
        }) == "bad.yaml:19: measurements[3].unit: expected one of us, got 'TFLOPS'");
  CHECK(error_of([] {
          parse(
              kernels("  - {id: x, gpu_as_printed: X, kernel: grouped_gemm_fwd_bwd, dtype: bf16, figure: 900, unit: "
                      "us, quote: q}\n"));
        }) == "bad.yaml:19: measurements[3].shape: missing; a grouped GEMM's time needs {m, n, k, groups}");
  CHECK(error_of([] {
          parse(
              kernels("  - {id: x, gpu_as_printed: X, kernel: grouped_gemm_fwd_bwd, dtype: bf16, shape: {m: 10, n: 2, "
                      "k: 2, groups: 4}, figure: 900, unit: us, quote: q}\n"));
        }) == "bad.yaml:19: measurements[3].shape.groups: 4 does not divide m 10");
}

TEST_CASE("kernel record: source ids are unique over the folder, which holds *.yaml") {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "tptune_kernel_record_test";
  std::filesystem::remove_all(dir);
  CHECK(error_of([&] { load_kernel_record(dir.string()); }) ==
        fmt::format("{}: no such folder (expected the kernel-level record's folder of *.yaml files)", dir.string()));
  std::filesystem::create_directories(dir);
  for (const char* name : {"a.yaml", "b.yaml"}) std::ofstream(dir / name) << kernels();
  CHECK(error_of([&] { load_kernel_record(dir.string()); }) ==
        fmt::format("{}:2: source.id: 'test-kernels' is also the id of {}; source ids are unique over the folder",
                    (dir / "b.yaml").string(), (dir / "a.yaml").string()));
  std::filesystem::remove_all(dir);
}

TEST_CASE("kernel record: the real folder reads whole, four sources or more, each figure with its quote") {
  const auto sources = load_kernel_record(std::string(TPTUNE_SOURCE_DIR) + "/profiles/kernels");
  REQUIRE(sources.size() >= 4);
  std::set<std::string> ids;
  for (const auto& s : sources) {
    ids.insert(s.id);
    for (const auto& m : s.measurements) CHECK(!m.quote.empty());
  }
  for (const char* id : {"ml-engineering-mamf", "torchao-roofline", "flashattention-papers", "ml-engineering-nccl",
                         "ml-engineering-msmf"})
    CHECK(ids.count(id) == 1);
}

TEST_CASE("kernel fit: the presets' sustained_tensor_fraction is what their own MSMF rows imply") {
  // profiles/kernels/ml-engineering-msmf.yaml: h200 sqrt(755/850 x 1354/1525) = 0.888052, b200 sqrt(1439/1737 x
  // 2788/3350) = 0.830337; the presets round them to 0.888 and 0.830.
  const KernelFit f = fit_kernels(load_kernel_record(std::string(TPTUNE_SOURCE_DIR) + "/profiles/kernels"));
  int with_rows = 0;
  for (const auto& p : f.sustained) {
    INFO(p.gpu);
    if (p.rows == 0) continue;
    ++with_rows;
    CHECK(p.preset == Approx(p.implied).epsilon(1e-3));
    if (p.gpu == "h200") CHECK(p.implied == Approx(0.888052).epsilon(1e-5));
    if (p.gpu == "b200") CHECK(p.implied == Approx(0.830337).epsilon(1e-5));
  }
  CHECK(with_rows == 2);
}

TEST_CASE("kernel fit: the Blackwell presets' grouped_gemm_factor is what torchao's grouped rows imply") {
  // profiles/kernels/torchao-moe-grouped-mm.yaml: the six rows with more than one group, measured over tptune's dense
  // pricing (tests/sim/grouped_gemm_test.cc): geometric mean 0.4339; the one-group rows are listed as not fitted.
  const KernelFit f = fit_kernels(load_kernel_record(std::string(TPTUNE_SOURCE_DIR) + "/profiles/kernels"));
  int found = 0;
  for (const auto& t : f.terms)
    if (t.name == "grouped_gemm_factor") {
      ++found;
      CHECK(t.architecture == "blackwell");
      CHECK(t.rows == 6);
      CHECK(t.value == Approx(0.434).epsilon(1e-3));
      CHECK(t.prior == 0.434);  // the b200 preset's value: the fit leaves it where it is
    }
  CHECK(found == 1);
  int one_group = 0;
  for (const auto& n : f.not_fitted) one_group += n.find("one group, which tptune prices as a dense GEMM") != n.npos;
  CHECK(one_group == 2);
}

TEST_CASE("kernel fit: the architecture's terms from the uncapped parts, the capped part's implied clock") {
  const KernelFit f = fit_kernels({parse(kernels())});
  // Hopper gemm_efficiency from the 700 W H100's 8192^3 GEMM alone: 791.2 / 989 = 0.8 of the peak; the model's shape
  // at efficiency 1: 64 x 32 = 2048 tiles of 128x256 in ceil(2048 / 132) = 16 waves (2048 / 2112 = 0.969697) x k
  // 8192 / (8192 + 128) = 0.984615 -> 0.954779 (128x128 tiles: 0.9 x 4096 / 4224 x 0.984615 = 0.859, lower), so
  // 0.8 / 0.954779 = 0.837897.
  const KernelTermFit* gemm = nullptr;
  const KernelTermFit* ring = nullptr;
  for (const auto& t : f.terms) {
    if (t.architecture == "hopper" && t.name == "gemm_efficiency") gemm = &t;
    if (t.architecture == "hopper" && t.name == "ring_busbw_efficiency@8") ring = &t;
  }
  REQUIRE(gemm != nullptr);
  CHECK(gemm->rows == 1);
  CHECK(gemm->prior == 0.84);
  CHECK(gemm->value == Approx(0.837897).epsilon(1e-5));
  // The H200 ring: 367.61 GB/s busbw over 450 per direction = 0.816911.
  REQUIRE(ring != nullptr);
  CHECK(ring->value == Approx(0.816911).epsilon(1e-5));
  // The 500 W part's shapeless 0.78 is not fitted: at its preset's clock the model says 0.837897 x clock, and the
  // clock the figure implies is 0.78 / 0.837897 = 0.930902.
  REQUIRE(f.clocks.size() == 1);
  CHECK(f.clocks[0].gpu == "h100-sxm-hbm2e-500w");
  CHECK(f.clocks[0].implied == Approx(0.930902).epsilon(1e-5));
  const auto capped = std::find_if(f.residuals.begin(), f.residuals.end(), [](auto& r) { return r.id == "capped"; });
  REQUIRE(capped != f.residuals.end());
  CHECK(!capped->fitted);
  CHECK(capped->predicted == Approx(0.837897 * f.clocks[0].preset).epsilon(1e-5));
  CHECK(f.sources_of("hopper") == std::vector<std::string>{"test-kernels"});
  CHECK(f.sources_of("ampere").empty());
  // The report names every GPU's residuals.
  const std::string text = kernel_fit_text(f);
  CHECK(text.find("h100-sxm: 1 fitted row, mean |error| 0.0%") != std::string::npos);
  CHECK(text.find("part level: h100-sxm-hbm2e-500w tensor_clock_fraction") != std::string::npos);
}

TEST_CASE("kernel record: a sustained GEMM figure carries the burst printed beside it, the fit reads it per part") {
  // ml-engineering's MSMF beside MAMF for the H200 SXM, bf16 and fp8, and the A100 PCIe (no preset).
  const std::string rows =
      "  - {id: s-bf16, gpu: h200, gpu_as_printed: H200, kernel: gemm_sustained, dtype: bf16, shape: {m: 1536, n: "
      "2816, k: 6144}, figure: 755, burst: 850, unit: TFLOPS, quote: q}\n"
      "  - {id: s-fp8, gpu: h200, gpu_as_printed: H200, kernel: gemm_sustained, dtype: fp8, figure: 1354, burst: 1525, "
      "unit: TFLOPS, quote: q}\n"
      "  - {id: s-a100, gpu_as_printed: A100 PCIe, kernel: gemm_sustained, dtype: bf16, figure: 258, burst: 285, unit: "
      "TFLOPS, quote: q}\n";
  const KernelSource s = parse(kernels(rows));
  REQUIRE(s.measurements.size() == 6);
  const KernelMeasurement& m = s.measurements[3];
  CHECK(m.kind == KernelKind::gemm_sustained);
  CHECK((m.figure == 755 && m.burst == 850 && m.m == 1536 && m.k == 6144));
  CHECK(m.has_shape());
  CHECK(!s.measurements[4].has_shape());
  // A sustained figure needs its burst; no other figure has one.
  CHECK(error_of([] {
          parse(
              kernels("  - {id: x, gpu_as_printed: X, kernel: gemm_sustained, dtype: bf16, figure: 755, unit: "
                      "TFLOPS, quote: q}\n"));
        }) ==
        "bad.yaml:19: measurements[3].burst: missing; a gemm_sustained figure needs the short-burst figure printed "
        "beside it");
  CHECK(error_of([] {
          parse(
              kernels("  - {id: x, gpu_as_printed: X, kernel: gemm, dtype: bf16, figure: 755, burst: 850, unit: "
                      "TFLOPS, quote: q}\n"));
        }) == "bad.yaml:19: measurements[3].burst: a gemm figure has no burst: leave it out");
  // The fit: part level only. h200's rows imply exp((ln(755/850) + ln(1354/1525)) / 2) = sqrt(0.888235 x 0.887869) =
  // 0.888052; they fit no architecture term (Hopper gemm_efficiency still rests on the one gemm row: 0.837897, as
  // below), and the A100 PCIe, without a preset, is listed with its ratio 258 / 285 = 0.905.
  const KernelFit f = fit_kernels({s});
  const auto h200 = std::find_if(f.sustained.begin(), f.sustained.end(), [](auto& p) { return p.gpu == "h200"; });
  REQUIRE(h200 != f.sustained.end());
  CHECK(h200->rows == 2);
  CHECK(h200->implied == Approx(0.888052).epsilon(1e-5));
  CHECK(h200->preset == 0.888);
  for (const auto& t : f.terms)
    if (t.architecture == "hopper" && t.name == "gemm_efficiency") CHECK(t.value == Approx(0.837897).epsilon(1e-5));
  for (const auto& r : f.residuals) CHECK(r.id.rfind("s-", 0) != 0);
  const std::string text = kernel_fit_text(f);
  CHECK(text.find("part level: h200 sustained_tensor_fraction 0.888 in its preset; its 2 sustained rows (test-kernels: "
                  "bf16 0.888, fp8_e4m3 0.888) imply 0.888 (-0.0%)") != std::string::npos);
  CHECK(text.find("part level: h100-sxm sustained_tensor_fraction 0.888 in its preset; no sustained row of its own") !=
        std::string::npos);
  CHECK(text.find("not fitted: test-kernels s-a100: A100 PCIe has no tptune preset (sustained / burst bf16 0.905)") !=
        std::string::npos);
}

TEST_CASE("kernel fit: each preset's kernel_sources are the sources with a fitted row on its architecture") {
  // The trust line names them (sim/trust.h): a preset must not claim a source that fits nothing of its architecture,
  // nor leave one out.
  const KernelFit f = fit_kernels(load_kernel_record(std::string(TPTUNE_SOURCE_DIR) + "/profiles/kernels"));
  for (const auto& name : gpu_preset_names()) {
    INFO(name);
    const GpuSpec g = gpu_preset(name);
    std::vector<std::string> want = f.sources_of(g.architecture), have = g.kernel_sources;
    std::sort(want.begin(), want.end());
    std::sort(have.begin(), have.end());
    CHECK(have == want);
  }
}
