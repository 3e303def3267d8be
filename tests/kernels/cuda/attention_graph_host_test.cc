// The cuDNN SDPA operation graphs (kernels/cuda/attention/attention_cudnn.cu) checked on the host, no device needed:
// every tensor and operation descriptor of the forward and backward graphs finalizes, and so does the operation graph,
// for causal and non-causal, MHA and GQA shapes. This is as far as cuDNN goes without a GPU: choosing an engine and
// building the plan (and so whether cuDNN recognizes the graph as its fused flash attention) need a device, and are
// what the [cuda] attention test checks.
#include <catch2/catch.hpp>

#include "kernels/cuda/attention/attention.h"
#include "kernels/cuda/attention/attention_cudnn.h"

using namespace tptune;

TEST_CASE("cuDNN attention graphs finalize on the host", "[cuda-math]") {
  if (cuda::cudnn_version() == 0) {
    WARN("built without cuDNN: skipped");
    return;
  }
  const kernels::AttentionDims shapes[] = {
      {2, 77, 8, 2, 64, true}, {1, 130, 4, 4, 128, false}, {4, 8192, 8, 2, 128, true}};
  for (const auto& s : shapes) {
    INFO("seq " << s.seq << ", heads " << s.n_heads << "/" << s.n_kv_heads << ", d " << s.head_dim << ", causal "
                << s.causal);
    // Forward: bmm1, scale, [GEN_INDEX x2, CMP_GE, BINARY_SELECT], max, sub, exp, sum, log, add, div, bmm2.
    CHECK(cuda::detail::attention_graph_self_check(s, false) == (s.causal ? 14 : 10));
    // Backward: dO*O, sum, x1; bmm, scale, sub stats, [mask 4], exp; reshape, E^T dO [+ head sum]; dO VT, sub, mul,
    // scale; reshape, dS^T Q [+ head sum]; reshape K, dS K, identity.
    const int64_t gqa = s.n_heads != s.n_kv_heads ? 2 : 0;
    CHECK(cuda::detail::attention_graph_self_check(s, true) == 18 + (s.causal ? 4 : 0) + gqa);
  }
  CHECK_THROWS_WITH(cuda::detail::attention_graph_self_check({1, 16, 2, 2, 12, true}, false),
                    Catch::Contains("head_dim"));
}
