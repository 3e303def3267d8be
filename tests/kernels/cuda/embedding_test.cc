// [cuda] vocab-sharded embedding forward and backward against kernels/cpu/embedding: ids inside, below and above
// the shard, repeated ids (the deterministic scatter-add), fp32 (bit-identical) and bf16.
#include "kernels/cuda/embedding.h"

#include <random>

#include "kernels/cpu/embedding.h"
#include "tests/kernels/compare.h"
#include "tests/kernels/cuda/device.h"

using namespace tptune;
using test::DeviceArray;

TEMPLATE_TEST_CASE("cuda vocab-sharded embedding matches the CPU", "[cuda]", float, __nv_bfloat16) {
  TPTUNE_CUDA_TEST_OR_SKIP();
  using T = TestType;
  const int64_t tokens = 4099, vocab_local = 500, dim = 384, offset = 1000;
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  std::mt19937 gen(5);
  // Ids over [0, 2000): about a quarter owned by this shard [1000, 1500), many repeated (~8 per owned row).
  for (auto& id : ids) id = int32_t(std::uniform_int_distribution<int>(0, 1999)(gen));
  ids[0] = 1000, ids[1] = 1499, ids[2] = 999, ids[3] = 1500, ids[4] = 1000;  // the shard's edges
  const auto weight = test::rounded<T>(test::randn(size_t(vocab_local * dim), 6));
  const auto d_out = test::rounded<T>(test::randn(size_t(tokens * dim), 7));
  auto dids = test::upload_ints(ids);
  DeviceArray<T> dw(weight), dout(size_t(tokens * dim)), dgo(d_out), dgw(size_t(vocab_local * dim));
  cuda::embedding_fwd<T>(nullptr, tokens, vocab_local, dim, offset, true, dids.get(), dw.get(), dout.get());
  std::vector<float> out(size_t(tokens * dim)), gw(size_t(vocab_local * dim));
  kernels::embedding(ids.data(), tokens, weight.data(), vocab_local, dim, offset, true, out.data());
  test::check_close("embedding_fwd", dout.floats(), out, 0.0, 0.0);  // a copy: exact
  cuda::embedding_bwd<T>(nullptr, tokens, vocab_local, dim, offset, true, dids.get(), dgo.get(), dgw.get());
  kernels::embedding_bwd(ids.data(), tokens, d_out.data(), vocab_local, dim, offset, true, gw.data());
  // float: the same float additions in token order, bit-identical. bf16: the float sum is rounded once to bf16
  // (relative 2^-9), against the CPU's float sum; atol for sums that cancel to near zero (~8 addends of N(0,1)).
  test::check_close("embedding_bwd", dgw.floats(), gw, std::is_same_v<T, float> ? 0.0 : 1e-2,
                    std::is_same_v<T, float> ? 0.0 : 4e-3);
  // Deterministic: a second run gives the same bits.
  const auto first = dgw.floats();
  cuda::embedding_bwd<T>(nullptr, tokens, vocab_local, dim, offset, true, dids.get(), dgo.get(), dgw.get());
  CHECK(dgw.floats() == first);
}
