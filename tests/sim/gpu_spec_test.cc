// GPU presets as data, inline specs, cluster resolution and process-group placement.
#include "sim/gpu_spec.h"

#include <yaml-cpp/yaml.h>

#include <catch2/catch.hpp>

#include "plans/util/error.h"
#include "sim/cluster_spec.h"
#include "tests/error_text.h"

using namespace tptune;
using tptune::test::error_of;

namespace {
const char* kFigures[] = {"bf16_tflops",        "fp16_tflops", "fp8_tflops", "fp32_tflops",
                          "hbm_bandwidth_GBps", "memory_GiB",  "sm_count",   "nvlink_bandwidth_GBps",
                          "nvlink_latency_us",  "nvswitch",    "nvls",       "network_bandwidth_GBps",
                          "network_latency_us"};
}  // namespace

TEST_CASE("every GPU preset loads, and every figure has a source") {
  auto names = gpu_preset_names();
  for (const char* want : {"h100-sxm", "h100-sxm-hbm2e-500w", "h200", "a100-sxm-80gb", "b200"})
    CHECK(std::find(names.begin(), names.end(), want) != names.end());
  for (const auto& n : names) {
    INFO(n);
    GpuSpec g = gpu_preset(n);
    CHECK(g.name == n);
    for (const char* f : kFigures) {
      INFO(f);
      CHECK(g.sources.count(f) == 1);
      CHECK(!g.sources[f].empty());
    }
    CHECK(g.bf16_tflops > 0);
    CHECK(g.sm_count > 0);
  }
}

TEST_CASE("preset figures match the datasheets") {
  GpuSpec h100 = gpu_preset("h100-sxm");
  CHECK(h100.bf16_tflops == 989);
  CHECK(h100.fp8_tflops == 1979);
  CHECK(h100.hbm_bandwidth_GBps == 3350);
  CHECK(h100.nvlink_bandwidth_GBps == 450);
  CHECK(h100.nvls);
  CHECK(h100.peak_flops(DType::fp8_e4m3) == Approx(1979e12));
  CHECK(h100.peak_flops(DType::bf16) == Approx(989e12));
  GpuSpec h200 = gpu_preset("h200");
  CHECK(h200.hbm_bandwidth_GBps == 4800);
  CHECK(h200.memory_GiB > 139);
  GpuSpec a100 = gpu_preset("a100-sxm-80gb");
  CHECK(a100.bf16_tflops == 312);
  CHECK_FALSE(a100.has_float8());
  CHECK_FALSE(a100.nvls);
  GpuSpec b200 = gpu_preset("b200");
  CHECK(b200.bf16_tflops == 2250);
  CHECK(b200.nvlink_bandwidth_GBps == 900);
  // As the part reports itself: 7680-bit bus x 3996 MHz x 2 / 8 = 7.672 TB/s; 183359 MiB / 1024 = 179.06 GiB.
  CHECK(b200.hbm_bandwidth_GBps == 7672);
  CHECK(b200.memory_GiB == Approx(183359.0 / 1024).epsilon(1e-4));
  // nvidia-smi's totals: H100 81559 MiB (79.65 GiB), H200 143771 MiB (140.40 GiB), A100 81920 MiB (80 GiB).
  CHECK(h100.memory_GiB == Approx(81559.0 / 1024).epsilon(1e-3));
  CHECK(h200.memory_GiB == Approx(143771.0 / 1024).epsilon(1e-3));
  CHECK(a100.memory_GiB == 80);
}

TEST_CASE("float8 on a GPU without float8 is an error that says so") {
  GpuSpec a100 = gpu_preset("a100-sxm-80gb");
  std::string e = error_of([&] { a100.peak_flops(DType::fp8_e4m3); });
  CHECK_THAT(e, Catch::Contains("float8 is not supported on a100-sxm-80gb"));
}

TEST_CASE("unknown preset lists the known ones") {
  std::string e = error_of([] { gpu_preset("h900", "cfg.yaml:4: cluster.gpu"); });
  CHECK_THAT(e, Catch::Contains("cfg.yaml:4: cluster.gpu: unknown GPU preset 'h900'"));
  CHECK_THAT(e, Catch::Contains("h100-sxm"));
}

namespace {
const char* kInline = R"(cluster:
  gpu:
    name: mygpu
    bf16_tflops: 500
    fp16_tflops: 500
    fp8_tflops: 0
    fp32_tflops: 50
    hbm_bandwidth_GBps: 2000
    memory_GiB: 48
    sm_count: 100
    nvlink_bandwidth_GBps: 200
    nvlink_latency_us: 3
    nvswitch: true
    nvls: false
    network_bandwidth_GBps: 25
    network_latency_us: 10
)";
}

TEST_CASE("inline specs use the same keys, plain values allowed") {
  YAML::Node root = YAML::Load(kInline);
  GpuSpec g = parse_gpu_spec(root["cluster"]["gpu"], "cfg.yaml");
  CHECK(g.name == "mygpu");
  CHECK(g.bf16_tflops == 500);
  CHECK(g.sm_count == 100);
  CHECK(g.sources.empty());
  CHECK(g.origin == "cfg.yaml:3");
}

TEST_CASE("inline spec errors name file:line and the key") {
  SECTION("bad value") {
    std::string text = kInline;
    text.replace(text.find("hbm_bandwidth_GBps: 2000"), 24, "hbm_bandwidth_GBps: fast");
    YAML::Node root = YAML::Load(text);
    CHECK(error_of([&] { parse_gpu_spec(root["cluster"]["gpu"], "cfg.yaml"); }) ==
          "cfg.yaml:8: hbm_bandwidth_GBps: expected a number in (0, 1000000], got 'fast'");
  }
  SECTION("missing key") {
    std::string text = kInline;
    text.erase(text.find("    sm_count: 100\n"), 18);
    YAML::Node root = YAML::Load(text);
    CHECK_THAT(error_of([&] { parse_gpu_spec(root["cluster"]["gpu"], "cfg.yaml"); }),
               Catch::StartsWith("cfg.yaml:3: sm_count: missing"));
  }
  SECTION("unknown key") {
    std::string text = std::string(kInline) + "    hbm_GBps: 3\n";
    YAML::Node root = YAML::Load(text);
    CHECK_THAT(error_of([&] { parse_gpu_spec(root["cluster"]["gpu"], "cfg.yaml"); }),
               Catch::StartsWith("cfg.yaml:17: hbm_GBps: unknown key"));
  }
  SECTION("nvls without nvswitch") {
    std::string text = kInline;
    text.replace(text.find("nvswitch: true"), 14, "nvswitch: false");
    text.replace(text.find("nvls: false"), 11, "nvls: true");
    YAML::Node root = YAML::Load(text);
    CHECK_THAT(error_of([&] { parse_gpu_spec(root["cluster"]["gpu"], "cfg.yaml"); }),
               Catch::Contains("nvls: NVLink SHARP needs an NVSwitch"));
  }
}

TEST_CASE("resolve_cluster: preset defaults, overrides, inline specs") {
  Config cfg;
  cfg.path = "cfg.yaml";
  cfg.cluster.gpu = "h100-sxm";
  cfg.cluster.source = "cfg.yaml:7";
  cfg.cluster.nodes = 4;
  cfg.cluster.gpus_per_node = 8;
  ClusterSpec c = resolve_cluster(cfg);
  CHECK(c.world_size() == 32);
  CHECK(c.intra_node.bandwidth_GBps == 450);
  CHECK(c.inter_node.bandwidth_GBps == 50);

  cfg.cluster.inter_node = LinkSpec{25, 6};
  cfg.cluster.intra_node = LinkSpec{400, 3};
  c = resolve_cluster(cfg);
  CHECK(c.inter_node.bandwidth_GBps == 25);
  CHECK(c.inter_node.latency_us == 6);
  CHECK(c.intra_node.bandwidth_GBps == 400);

  cfg.cluster.gpu = "h300";
  CHECK_THAT(error_of([&] { resolve_cluster(cfg); }), Catch::StartsWith("cfg.yaml:7: cluster.gpu: unknown GPU preset"));

  cfg.cluster.gpu.clear();
  YAML::Node root = YAML::Load(kInline);
  cfg.cluster.gpu_inline = root["cluster"]["gpu"];
  c = resolve_cluster(cfg);
  CHECK(c.gpu.name == "mygpu");
  CHECK(c.intra_node.bandwidth_GBps == 400);  // the override still wins
}

TEST_CASE("group layouts: TP innermost, DP strided") {
  ClusterSpec c = make_cluster(gpu_preset("h100-sxm"), 128, 8);
  // tp 8: one whole node; dp 128: one GPU in each of 128 nodes.
  GroupLayout tp = group_layout(c, Group::tp, 8, 128);
  CHECK((tp.size == 8 && tp.per_node == 8 && tp.nodes == 1));
  GroupLayout dp = group_layout(c, Group::dp, 8, 128);
  CHECK((dp.size == 128 && dp.per_node == 1 && dp.nodes == 128));
  // tp 2: dp 512 = 4 per node x 128 nodes.
  dp = group_layout(c, Group::dp, 2, 512);
  CHECK((dp.per_node == 4 && dp.nodes == 128));
  // tp 16 spans two nodes; dp 64 = one GPU in each of 64 nodes.
  tp = group_layout(c, Group::tp, 16, 64);
  CHECK((tp.per_node == 8 && tp.nodes == 2));
  dp = group_layout(c, Group::dp, 16, 64);
  CHECK((dp.per_node == 1 && dp.nodes == 64));
  // tp 2, dp 4 on one node: dp fits in the node.
  ClusterSpec one = make_cluster(gpu_preset("h100-sxm"), 1, 8);
  dp = group_layout(one, Group::dp, 2, 4);
  CHECK((dp.per_node == 4 && dp.nodes == 1));
  CHECK_THAT(error_of([&] { group_layout(one, Group::tp, 16, 1); }), Catch::Contains("needs 16 GPUs"));
  CHECK_THAT(error_of([&] { group_layout(one, Group::tp, 3, 1); }), Catch::Contains("straddle"));
}
