// Embedding: hand goldens, vocab-sharded lookups summing to the full lookup, scatter-add backward.
#include "kernels/cpu/embedding.h"

#include <cmath>
#include <stdexcept>

#include "tests/kernels/compare.h"

using namespace tptune::kernels;

namespace {

// Table (4, 2): row r = [10 r, 10 r + 1].
const std::vector<float> kTable = {0, 1, 10, 11, 20, 21, 30, 31};
const std::vector<int32_t> kTokens = {2, 0, 2, 3};

}  // namespace

TEST_CASE("embedding golden lookup") {
  std::vector<float> out(8);
  embedding(kTokens.data(), 4, kTable.data(), 4, 2, 0, false, out.data());
  CHECK(out == std::vector<float>{20, 21, 0, 1, 20, 21, 30, 31});
}

TEST_CASE("vocab-sharded embedding: foreign ids give zero rows and the shards sum to the full lookup") {
  // Rank 0 owns ids [0, 2) (rows 0, 10), rank 1 owns [2, 4).
  std::vector<float> out0(8), out1(8);
  embedding(kTokens.data(), 4, kTable.data(), 2, 2, 0, true, out0.data());
  embedding(kTokens.data(), 4, kTable.data() + 4, 2, 2, 2, true, out1.data());
  CHECK(out0 == std::vector<float>{0, 0, 0, 1, 0, 0, 0, 0});
  CHECK(out1 == std::vector<float>{20, 21, 0, 0, 20, 21, 30, 31});
  std::vector<float> sum(8);
  for (size_t i = 0; i < 8; ++i) sum[i] = out0[i] + out1[i];
  CHECK(sum == std::vector<float>{20, 21, 0, 1, 20, 21, 30, 31});
}

TEST_CASE("embedding backward scatter-adds repeated ids and zeroes the rest") {
  // d_out rows [1, 1], [2, 2], [3, 3], [4, 4] for tokens 2, 0, 2, 3:
  // d_weight[0] = [2, 2], d_weight[1] = 0, d_weight[2] = [1 + 3, 1 + 3] = [4, 4], d_weight[3] = [4, 4].
  const std::vector<float> d_out = {1, 1, 2, 2, 3, 3, 4, 4};
  std::vector<float> dw(8, std::nanf(""));  // must be zeroed, not added to
  embedding_bwd(kTokens.data(), 4, d_out.data(), 4, 2, 0, false, dw.data());
  CHECK(dw == std::vector<float>{2, 2, 0, 0, 4, 4, 4, 4});

  // Sharded: each rank gets its rows of the same gradient.
  std::vector<float> dw0(4, std::nanf("")), dw1(4, std::nanf(""));
  embedding_bwd(kTokens.data(), 4, d_out.data(), 2, 2, 0, true, dw0.data());
  embedding_bwd(kTokens.data(), 4, d_out.data(), 2, 2, 2, true, dw1.data());
  CHECK(dw0 == std::vector<float>{2, 2, 0, 0});
  CHECK(dw1 == std::vector<float>{4, 4, 4, 4});
}

TEST_CASE("embedding with an unsharded vocab rejects out-of-range ids") {
  const std::vector<int32_t> bad = {1, 4};
  std::vector<float> out(4);
  CHECK_THROWS_WITH(embedding(bad.data(), 2, kTable.data(), 4, 2, 0, false, out.data()),
                    "embedding: token 1 has id 4, expected an id in [0, 4)");
  const std::vector<int32_t> negative = {-1};
  std::vector<float> d_out(2), d_weight(8);
  CHECK_THROWS_AS(embedding_bwd(negative.data(), 1, d_out.data(), 4, 2, 0, false, d_weight.data()),
                  std::invalid_argument);
}
