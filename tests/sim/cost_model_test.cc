// Compute and communication costs against hand-derived numbers (the arithmetic is in the comments). The defaults
// of CostParams are used, so these tests also pin them: a change to a default must update the arithmetic here.
#include <catch2/catch.hpp>

#include "plans/language/config.h"
#include "plans/language/plan.h"
#include "plans/util/error.h"
#include "sim/cost/comm_cost.h"
#include "sim/cost/compute_cost.h"
#include "tests/error_text.h"

using namespace tptune;

namespace {
const CostParams& P() { return default_cost_params(); }
}  // namespace

TEST_CASE("one bf16 GEMM on an H100, compute-bound") {
  GpuSpec h100 = gpu_preset("h100-sxm");
  GemmOp g{8192, 8192, 8192};
  ComputeEstimate e = gemm_cost(g, h100, P());
  // Tiles 128x256: 64 x 32 = 2048 >= 132 SMs, no split-K; 16 waves (15.5) -> utilisation 2048/(16*132) = 0.969697.
  // k efficiency 8192/(8192+128) = 0.984615. Efficiency 0.84 x 0.969697 x 0.984615 = 0.802014 -> 793.19 TFLOP/s.
  // FLOPs 2 x 8192^3 = 1.099512e12 -> 1386.18 us. Bytes 3 x 8192^2 x 2 = 402.65 MB / (3350 GB/s x 0.85) = 141.4 us,
  // so compute-bound. Plus 2 us launch: 1388.18 us.
  CHECK_FALSE(e.memory_bound);
  CHECK(e.efficiency == Approx(0.802014).epsilon(1e-5));
  CHECK(e.time_us == Approx(1388.18).epsilon(1e-5));
  // The same GEMM on an H200 runs at ~793 TFLOP/s: what we measured there (~790, REFERENCE.md).
  ComputeEstimate h200 = gemm_cost(g, gpu_preset("h200"), P());
  CHECK(e.flops / ((h200.time_us - 2) * 1e-6) / 1e12 == Approx(793.2).epsilon(1e-3));
}

TEST_CASE("a small GEMM splits k and pays the tile overhead") {
  GpuSpec h100 = gpu_preset("h100-sxm");
  GemmOp g{1024, 1024, 4096};
  ComputeEstimate e = gemm_cost(g, h100, P());
  // Tiles 8 x 4 = 32 < 132 SMs: split-K by min(132/32, 4096/512) = 4 -> 128 CTAs in one wave: 128/132 = 0.969697;
  // k per split 1024: 1024/(1024+128) = 0.888889. Efficiency 0.84 x 0.969697 x 0.888889 = 0.724040.
  // FLOPs 2 x 1024 x 1024 x 4096 = 8.589935e9 / (989e12 x 0.724040) = 11.9957 us; bytes (2 x 4M + 1M) x 2 B =
  // 18.87 MB / 2847.5 GB/s = 6.63 us. 11.9957 + 2 = 13.9957 us.
  CHECK(e.efficiency == Approx(0.724040).epsilon(1e-5));
  CHECK(e.time_us == Approx(13.9957).epsilon(1e-4));
}

TEST_CASE("a skinny GEMM is memory-bound") {
  GpuSpec h100 = gpu_preset("h100-sxm");
  GemmOp g{16, 16384, 16384};
  ComputeEstimate e = gemm_cost(g, h100, P());
  // Bytes: 16x16384x2 + 16384^2 x 2 + 16x16384x2 = 537.92 MB / (3350e9 x 0.85) = 188.91 us; FLOPs 8.59e9 at
  // < 0.84 x 989 TF/s is well under that. 188.91 + 2 = 190.91 us.
  CHECK(e.memory_bound);
  CHECK(e.time_us == Approx(190.91).epsilon(1e-4));
}

TEST_CASE("float8 GEMMs run at the fp8 rate on H100 and are refused on A100") {
  GemmOp bf{8192, 8192, 8192};
  bf.trans_b = true;  // B stored n x k: both operands K-major, as torch._scaled_mm takes them (no layout copy)
  GemmOp f8 = bf;
  f8.a_dtype = f8.b_dtype = DType::fp8_e4m3;
  GpuSpec h100 = gpu_preset("h100-sxm");
  double speedup = gemm_cost(bf, h100, P()).time_us / gemm_cost(f8, h100, P()).time_us;
  // bf16: 1388.19 us (the first test). float8: the per-tile fixed work is 128 k at the bf16 rate = 256 k at the
  // fp8 rate (1979 / 989 = 2.001), so efficiency 0.72 x 0.969697 x 8192/(8192+256.1) = 0.677013: 1.099512e12 /
  // (1979e12 x 0.677013) = 820.65 us + 2 = 822.65 us. 1388.19 / 822.65 = 1.6875 (1979 x 0.72 / (989 x 0.84) =
  // 1.715 on the rate alone, x 8320/8448.1 for the fixed work).
  CHECK(speedup == Approx(1.6875).epsilon(1e-4));
  // At k = 512 (m = n = 8192, the same tiles and waves) float8 gains less: the fixed work is a larger share of its
  // faster k loop. bf16: 2 x 8192^2 x 512 = 6.872e10 / (989e12 x 0.84 x 0.969697 x 512/640) = 106.63 us + 2;
  // float8: / (1979e12 x 0.72 x 0.969697 x 512/768.1) = 74.62 us + 2. 108.63 / 76.62 = 1.4178. Both compute-bound
  // (bytes (8192 x 512 x 2 + 8192^2 x 2) / 2847.5 GB/s = 50.1 us).
  GemmOp bf_k512{8192, 8192, 512};
  bf_k512.trans_b = true;
  GemmOp f8_k512 = bf_k512;
  f8_k512.a_dtype = f8_k512.b_dtype = DType::fp8_e4m3;
  CHECK(gemm_cost(bf_k512, h100, P()).time_us / gemm_cost(f8_k512, h100, P()).time_us == Approx(1.4178).epsilon(2e-4));
  GpuSpec a100 = gpu_preset("a100-sxm-80gb");
  try {
    gemm_cost(f8, a100, P());
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("float8 is not supported on a100-sxm-80gb"));
  }
}

TEST_CASE("float8 operands that are not K-major are copied before the GEMM (torchao's preprocess_addmm)") {
  // torch._scaled_mm takes A row-major and B column-major; torchao copies an operand that is not (a.contiguous(),
  // b.t().contiguous().t()). A linear's grad_weight GEMM (dy^T x, trans_a, B = x stored k x n) copies both, its
  // grad_input GEMM (B = W stored k x n) the weight, its forward (B = W stored n x k, trans_b) nothing.
  const GpuSpec h100 = gpu_preset("h100-sxm");
  GemmOp fwd{8192, 4096, 4096};
  fwd.a_dtype = fwd.b_dtype = DType::fp8_e4m3;
  fwd.trans_b = true;
  GemmOp grad_weight = fwd;  // m = out, n = in, k = tokens
  grad_weight.trans_a = true, grad_weight.trans_b = false;
  CostParams none = P();
  none.fp8_layout_copy_factor = 0;
  CHECK(gemm_cost(fwd, h100, P()).time_us == gemm_cost(fwd, h100, none).time_us);
  // grad_weight copies A (m x k = 8192 x 4096, 1 byte) and B (k x n = 4096 x 4096): each read and written,
  // 2 x (33554432 + 16777216) = 100663296 bytes at 3350 GB/s x memory_bound_efficiency 0.80 = 37.56 us, plus a
  // 4 us launch per copy: 45.56 us over the same GEMM without the copies.
  const double extra = gemm_cost(grad_weight, h100, P()).time_us - gemm_cost(grad_weight, h100, none).time_us;
  CHECK(extra == Approx(100663296.0 / (3350e9 * 0.80) * 1e6 + 2 * 4.0).epsilon(1e-9));
  CHECK(extra == Approx(45.56).epsilon(1e-3));
  // bf16 GEMMs take any layout (cuBLAS transposes in the kernel): no copy.
  GemmOp bf = grad_weight;
  bf.a_dtype = bf.b_dtype = DType::bf16;
  CostParams doubled = P();
  doubled.fp8_layout_copy_factor = 2;
  CHECK(gemm_cost(bf, h100, P()).time_us == gemm_cost(bf, h100, doubled).time_us);
  // The factor scales the bytes, not the launches.
  const double extra2 = gemm_cost(grad_weight, h100, doubled).time_us - gemm_cost(grad_weight, h100, none).time_us;
  CHECK(extra2 == Approx(2 * 100663296.0 / (3350e9 * 0.80) * 1e6 + 2 * 4.0).epsilon(1e-9));
}

TEST_CASE("attention: causal FLOPs at the flash efficiency") {
  GpuSpec h100 = gpu_preset("h100-sxm");
  AttentionOp a{1, 8192, 16, 1, 128};
  ComputeEstimate f = attention_cost(a, DType::bf16, h100, P());
  // FLOPs 2 x 1 x 16 x 8192^2 x 128 = 2.748779e11. CTAs 16 x 64 = 1024 -> 8 waves: 1024/1056 = 0.969697.
  // 0.40 x 0.969697 x 989e12 = 383.61 TF/s -> 716.55 us, + 4 us = 720.55 us.
  CHECK(f.time_us == Approx(720.55).epsilon(1e-4));
  a.backward = true;
  ComputeEstimate b = attention_cost(a, DType::bf16, h100, P());
  // 2.5 x the FLOPs at 0.33: 716.55 x 2.5 x 0.40 / 0.33 = 2171.37 us + 4.
  CHECK(b.time_us == Approx(2175.37).epsilon(1e-4));
}

TEST_CASE("attention: each SDPA kernel at its own rate, in the direction of the kernel data", "[sdpa]") {
  GpuSpec h100 = gpu_preset("h100-sxm");
  AttentionOp a{1, 8192, 16, 1, 128};
  // The flash FLOP time of the case above: 716.55 us forward, 2171.37 backward, + 4 us overhead each.
  auto t = [&](SdpaBackend b, bool bwd) {
    AttentionOp x = a;
    x.backward = bwd;
    return attention_cost(x, DType::bf16, h100, P(), b).time_us;
  };
  CHECK(t(SdpaBackend::flash, false) == Approx(720.55).epsilon(1e-4));
  // cuDNN 1.62x forward, 1.36x backward (our H200 cuDNN profiles over FlashAttention-2's published figures).
  CHECK(t(SdpaBackend::cudnn, false) == Approx(716.55 / 1.62 + 4).epsilon(1e-4));
  CHECK(t(SdpaBackend::cudnn, true) == Approx(2171.37 / 1.36 + 4).epsilon(1e-4));
  // FlexAttention 0.90 / 0.85 of FlashAttention-2 (PyTorch's FlexAttention blog); the memory-efficient kernel 0.5.
  CHECK(t(SdpaBackend::flex, false) == Approx(716.55 / 0.90 + 4).epsilon(1e-4));
  CHECK(t(SdpaBackend::flex, true) == Approx(2171.37 / 0.85 + 4).epsilon(1e-4));
  CHECK(t(SdpaBackend::efficient, true) == Approx(2171.37 / 0.5 + 4).epsilon(1e-4));
  // The order the kernel data gives: cuDNN < flash < flex < efficient, both passes.
  for (bool bwd : {false, true}) {
    CHECK(t(SdpaBackend::cudnn, bwd) < t(SdpaBackend::flash, bwd));
    CHECK(t(SdpaBackend::flash, bwd) < t(SdpaBackend::flex, bwd));
    CHECK(t(SdpaBackend::flex, bwd) < t(SdpaBackend::efficient, bwd));
  }
  // auto_ (the cpu device's own kernel) prices as the preset's attention terms, as flash does.
  CHECK(t(SdpaBackend::auto_, true) == t(SdpaBackend::flash, true));
}

TEST_CASE("attention: compute_cost prices the kernel the Program's training settings resolve to", "[sdpa]") {
  // sdpa_kernel(): auto on an H100 with the record's torch runs flash; with no torch_version, cuDNN; an A100, flash.
  Training t;
  t.torch_version = parse_torch_version("2.6");
  CHECK(sdpa_kernel(t, SdpaBackend::auto_, gpu_preset("h100-sxm")) == SdpaBackend::flash);
  CHECK(sdpa_kernel(t, SdpaBackend::auto_, gpu_preset("h100-sxm-hbm2e-500w")) == SdpaBackend::flash);
  t.torch_version.reset();
  CHECK(sdpa_kernel(t, SdpaBackend::auto_, gpu_preset("h100-sxm")) == SdpaBackend::cudnn);
  CHECK(sdpa_kernel(t, SdpaBackend::auto_, gpu_preset("h200")) == SdpaBackend::cudnn);
  CHECK(sdpa_kernel(t, SdpaBackend::auto_, gpu_preset("b200")) == SdpaBackend::cudnn);
  CHECK(sdpa_kernel(t, SdpaBackend::auto_, gpu_preset("a100-sxm-80gb")) == SdpaBackend::flash);
  CHECK(sdpa_kernel(t, SdpaBackend::auto_, gpu_preset("cpu")) == SdpaBackend::auto_);
  t.sdpa_backend = SdpaBackend::efficient;
  CHECK(sdpa_kernel(t, SdpaBackend::auto_, gpu_preset("h100-sxm")) == SdpaBackend::efficient);
  // torchtitan 0.3's plans (Plan::attention_kernel flex, apply_framework) run FlexAttention unless the config names
  // a kernel: with the record's torch on an H100, auto is flex, not flash.
  Plan tt;
  apply_framework(tt, Framework::torchtitan_0_3);
  CHECK(tt.attention_kernel == SdpaBackend::flex);
  t.sdpa_backend = SdpaBackend::auto_;
  t.torch_version = parse_torch_version("2.6");
  CHECK(sdpa_kernel(t, tt.attention_kernel, gpu_preset("h100-sxm")) == SdpaBackend::flex);
  apply_framework(tt, Framework::dtensor);
  CHECK(sdpa_kernel(t, tt.attention_kernel, gpu_preset("h100-sxm")) == SdpaBackend::flash);
}

TEST_CASE("memory-bound ops: bytes over HBM bandwidth plus launch") {
  GpuSpec h100 = gpu_preset("h100-sxm");
  // 1 GB at 3350 GB/s x 0.8 = 373.13 us + 4 us.
  ComputeEstimate e = memory_bound_cost(1e9, P().memory_bound_efficiency, P().memory_bound_overhead_us, h100);
  CHECK(e.time_us == Approx(377.13).epsilon(1e-4));
}

TEST_CASE("bus-bandwidth factors (nccl-tests)") {
  CHECK(bus_factor(CollectiveKind::all_reduce, 8) == Approx(1.75));
  CHECK(bus_factor(CollectiveKind::all_gather, 8) == Approx(0.875));
  CHECK(bus_factor(CollectiveKind::reduce_scatter, 4) == Approx(0.75));
  CHECK(bus_factor(CollectiveKind::all_to_all, 2) == Approx(0.5));
  CHECK(bus_factor(CollectiveKind::all_reduce, 1) == 0);
}

namespace {
constexpr int64_t GiB = 1073741824;
}

TEST_CASE("ring all-reduce inside a node (A100: no NVLS)") {
  ClusterSpec c = make_cluster(gpu_preset("a100-sxm-80gb"), 1, 8);
  GroupLayout g = group_layout(c, Group::tp, 8, 1);
  CommEstimate e = collective_cost(CollectiveKind::all_reduce, GiB, g, c, P());
  // Ring Simple: 8.4 + 2 x 7 x 3.4 = 56 us latency; 1 GiB x 1.75 / (300 GB/s x 0.82 = 246 GB/s) = 7638.41 us.
  // 7694.41 us (LL pays 1/0.3 of the bandwidth term; no NVLS on A100). busbw = 1.879e9 / 7694.41 us = 244.2 GB/s.
  CHECK(e.algorithm == CommAlgorithm::ring);
  CHECK(e.time_us == Approx(7694.41).epsilon(1e-5));
  CHECK(e.busbw_GBps == Approx(244.2).epsilon(1e-3));
}

TEST_CASE("NVLS all-reduce inside an H100 node beats the ring") {
  ClusterSpec c = make_cluster(gpu_preset("h100-sxm"), 1, 8);
  GroupLayout g = group_layout(c, Group::tp, 8, 1);
  CommEstimate e = collective_cost(CollectiveKind::all_reduce, GiB, g, c, P());
  // NVLS: 30 + 1 GiB x 1.75 / (450 x 1.055 = 474.75 GB/s) = 30 + 3957.98 = 3987.98 us (busbw ~471 GB/s);
  // the ring would take 56 + 1.879e9 / 369e9 = 5148.28 us.
  CHECK(e.algorithm == CommAlgorithm::nvls);
  CHECK(e.time_us == Approx(3987.98).epsilon(1e-5));
}

TEST_CASE("small all-reduce: the LL protocol's latency wins") {
  ClusterSpec c = make_cluster(gpu_preset("h100-sxm"), 1, 8);
  GroupLayout g = group_layout(c, Group::tp, 8, 1);
  CommEstimate e = collective_cost(CollectiveKind::all_reduce, 4096, g, c, P());
  // LL: 6.6 + 14 x 3.4 x 0.18 = 15.168 us + 4096 x 1.75 / (369e9 x 0.3) = 0.0648 us -> 15.233 us.
  CHECK(e.algorithm == CommAlgorithm::ring_ll);
  CHECK(e.time_us == Approx(15.233).epsilon(1e-4));
}

TEST_CASE("all-gather inside a node") {
  ClusterSpec c = make_cluster(gpu_preset("h100-sxm"), 1, 8);
  GroupLayout g = group_layout(c, Group::tp, 8, 1);
  CommEstimate e = collective_cost(CollectiveKind::all_gather, GiB / 4, g, c, P());
  // 8.4 + 7 x 3.4 = 32.2 us; 256 MiB x 7/8 = 234881024 B / 369 GB/s = 636.53 us -> 668.73 us.
  CHECK(e.algorithm == CommAlgorithm::ring);
  CHECK(e.time_us == Approx(668.73).epsilon(1e-5));
}

TEST_CASE("all-reduce across nodes: one GPU per node, ring over the NICs") {
  ClusterSpec c = make_cluster(gpu_preset("h100-sxm"), 4, 8);
  GroupLayout g = group_layout(c, Group::dp, 8, 4);  // one GPU in each of 4 nodes
  REQUIRE((g.per_node == 1 && g.nodes == 4));
  CommEstimate e = collective_cost(CollectiveKind::all_reduce, GiB, g, c, P());
  // Ring: 8.4 + 6 x 14 = 92.4 us; 1 GiB x 1.5 / (50 x 0.94 = 47 GB/s) = 34268.36 us -> 34360.76 us.
  // Tree: 8.4 + 4 x 14 + 2 GiB / 47 GB/s = 45755.5 us. Ring wins for 1 GiB.
  CHECK(e.algorithm == CommAlgorithm::ring);
  CHECK(e.time_us == Approx(34360.76).epsilon(1e-5));
}

TEST_CASE("all-gather across nodes is hierarchical") {
  ClusterSpec c = make_cluster(gpu_preset("h100-sxm"), 2, 8);
  GroupLayout g = group_layout(c, Group::dp, 2, 8);  // tp 2: 4 DP ranks per node, 2 nodes
  REQUIRE((g.per_node == 4 && g.nodes == 2));
  CommEstimate e = collective_cost(CollectiveKind::all_gather, GiB, g, c, P());
  // Across nodes: S/4 = 256 MiB over 2 nodes: 8.4 + 14 + 268435456 x 1/2 / 47e9 = 22.4 + 2855.70 = 2878.10 us.
  // In the node: 1 GiB over 4 GPUs: 8.4 + 3 x 3.4 + 1 GiB x 3/4 / (450 x 0.72 = 324 GB/s) = 18.6 + 2485.51 us.
  // Total 5382.21 us.
  CHECK(e.algorithm == CommAlgorithm::hierarchical);
  CHECK(e.time_us == Approx(5382.21).epsilon(1e-5));
}

TEST_CASE("TP across nodes is much slower than inside a node") {
  // The same 8-GPU TP all-gather of 64 MiB: in one 8-GPU node, or over 4 nodes of 2 GPUs.
  ClusterSpec node8 = make_cluster(gpu_preset("h100-sxm"), 1, 8);
  ClusterSpec node2 = make_cluster(gpu_preset("h100-sxm"), 4, 2);
  GroupLayout in_node = group_layout(node8, Group::tp, 8, 1);
  GroupLayout across = group_layout(node2, Group::tp, 8, 1);
  REQUIRE((across.per_node == 2 && across.nodes == 4));
  double t_in = collective_cost(CollectiveKind::all_gather, 64 << 20, in_node, node8, P()).time_us;
  double t_across = collective_cost(CollectiveKind::all_gather, 64 << 20, across, node2, P()).time_us;
  // In the node: 32.2 + 64 MiB x 7/8 / 369 GB/s = 32.2 + 159.1 = 191.3 us.
  // Across: 32 MiB over 4 nodes on the NICs: 8.4 + 3 x 14 + 33554432 x 3/4 / 47e9 = 50.4 + 535.4 us, then 64 MiB
  // over 2 GPUs in each node: 8.4 + 3.4 + 33554432 / 270e9 = 136.1 us: 722.0 us, 3.8x.
  CHECK(t_in == Approx(191.3).epsilon(1e-3));
  CHECK(t_across == Approx(722.0).epsilon(1e-3));
}

TEST_CASE("group size 1 and empty messages cost nothing, p2p is latency + bytes / link") {
  ClusterSpec c = make_cluster(gpu_preset("h100-sxm"), 1, 8);
  GroupLayout one = group_layout(c, Group::dp, 8, 1);
  CHECK(collective_cost(CollectiveKind::all_reduce, GiB, one, c, P()).time_us == 0);
  GroupLayout tp = group_layout(c, Group::tp, 8, 1);
  CHECK(collective_cost(CollectiveKind::all_gather, 0, tp, c, P()).time_us == 0);
  // 5 us + 16 MiB / (450 GB/s x 0.8) = 5 + 46.60 us.
  CHECK(collective_cost(CollectiveKind::p2p, 16 << 20, tp, c, P()).time_us == Approx(51.60).epsilon(1e-4));
}

// Issue 38: a GB200 NVL72 rack is one NVLink domain of 72 GPUs in 4-GPU hosts (cluster.nvlink_domain_gpus).
TEST_CASE("GB200: an all-reduce inside a 72-GPU NVLink domain, and the same 72 ranks across 4-GPU domains") {
  const GpuSpec gb200 = gpu_preset("gb200");
  ClusterSpec rack = make_cluster(gb200, 18, 4);  // 72 GPUs in 18 trays of 4
  rack.nvlink_domain_gpus = 72;
  const ClusterSpec trays = make_cluster(gb200, 18, 4);  // no domain: a tray is the NVLink domain
  const GroupLayout in_rack = group_layout(rack, Group::dp, 1, 72);
  const GroupLayout across = group_layout(trays, Group::dp, 1, 72);
  REQUIRE((in_rack.per_node == 72 && in_rack.nodes == 1));
  REQUIRE((across.per_node == 4 && across.nodes == 18));
  const CommEstimate e = collective_cost(CollectiveKind::all_reduce, GiB, in_rack, rack, P());
  // Inside the domain, 1 GiB over 72 ranks, factor 2 x 71/72: NVLS 30 + 1 GiB x 142/72 / (900 x 0.932 = 838.8 GB/s)
  // = 30 + 2524.63 = 2554.63 us (the 72-rank point of nvls_busbw_efficiency: a full NVL72 rack's nccl-tests); the
  // ring would take 8.4 + 142 x 3.4 + 1 GiB x 142/72 / 738 GB/s = 491.2 + 2869.45 = 3360.65 us.
  CHECK(e.algorithm == CommAlgorithm::nvls);
  CHECK(e.time_us == Approx(2554.627).epsilon(1e-6));
  // Across 18 trays of 4 (hierarchical): reduce-scatter in the tray 8.4 + 3 x 3.4 + 1 GiB x 3/4 / (900 x 0.72 =
  // 648 GB/s) = 18.6 + 1242.76 = 1261.36 us; all-reduce of 256 MiB over 18 NICs, ring 8.4 + 34 x 14 + 256 MiB x 34/18
  // / 47 GB/s = 484.4 + 10788.19 = 11272.59 us (tree: 8.4 + 10 x 14 + 512 MiB / 47 GB/s = 11571.19); all-gather in the
  // tray 1261.36 us: 13795.30 us, 5.4x the rack's.
  const CommEstimate x = collective_cost(CollectiveKind::all_reduce, GiB, across, trays, P());
  CHECK(x.algorithm == CommAlgorithm::hierarchical);
  CHECK(x.time_us == Approx(13795.30).epsilon(1e-6));
  // TP 8 spans two trays: inside the rack's domain it is one NVLink group; without the domain it crosses nodes.
  CHECK(group_layout(rack, Group::tp, 8, 9).nodes == 1);
  CHECK(group_layout(trays, Group::tp, 8, 9).nodes == 2);
  // Two racks: the DP group of tp 8 (18 ranks, stride 8) has 9 members in each of the 2 domains.
  ClusterSpec two = make_cluster(gb200, 36, 4);
  two.nvlink_domain_gpus = 72;
  const GroupLayout dp = group_layout(two, Group::dp, 8, 18);
  CHECK((dp.per_node == 9 && dp.nodes == 2));
  // tp 16 straddles a 72-GPU domain (neither divides the other).
  CHECK(tptune::test::error_of([&] { group_layout(two, Group::tp, 16, 9); }) ==
        "tp 16 and nvlink_domain_gpus 72: neither divides the other, so TP groups would straddle NVLink domains");
}

TEST_CASE("cluster.nvlink_domain_gpus: whole nodes, whole domains, one-line errors naming the file and line") {
  auto err = [](const std::string& cluster) {
    return tptune::test::error_of(
        [&] { load_config_string("model: {preset: llama3-8b}\ncluster: " + cluster + "\n", "c.yaml"); });
  };
  CHECK(err("{gpu: gb200, nodes: 18, gpus_per_node: 4, nvlink_domain_gpus: 70}") ==
        "c.yaml:2: cluster.nvlink_domain_gpus: expected a multiple of gpus_per_node 4 (an NVLink domain joins whole "
        "nodes), got 70");
  CHECK(err("{gpu: gb200, nodes: 20, gpus_per_node: 4, nvlink_domain_gpus: 72}") ==
        "c.yaml:2: cluster.nvlink_domain_gpus: expected a divisor of the cluster's 80 GPUs (20 nodes x 4: whole NVLink "
        "domains), got 72");
  CHECK(err("{gpu: gb200, nodes: 18, gpus_per_node: 4, nvlink_domain_gpus: 0}") ==
        "c.yaml:2: cluster.nvlink_domain_gpus: expected an integer in 1..1024, got '0'");
  CHECK(err("{gpu: gb200, nodes: 18, gpus_per_node: 4, nvlink_domain_gpus: 2048}") ==
        "c.yaml:2: cluster.nvlink_domain_gpus: expected an integer in 1..1024, got '2048'");
  // Default: a node is the domain; a cluster smaller than one domain (a slice of a rack) is inside it.
  CHECK(resolve_cluster(load_config_string("model: {preset: llama3-8b}\ncluster: {gpu: gb200, gpus_per_node: 4}\n"))
            .domain_gpus() == 4);
  CHECK(resolve_cluster(load_config_string("model: {preset: llama3-8b}\ncluster: {gpu: gb200, nodes: 9, "
                                           "gpus_per_node: 4, nvlink_domain_gpus: 72}\n"))
            .domain_gpus() == 72);
}
