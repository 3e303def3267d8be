// Seeded initialization: values depend on (seed, name, index in the full tensor) only, so shards of any TP degree
// reassemble the same full tensor; scales and token ranges are what tensor_init.h promises.
#include "runtime/tensor_init.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "runtime/profiler.h"

using namespace tptune;

TEST_CASE("shard_of takes rank r's slice of a dim", "[runtime][init]") {
  // full (2, 4) = [[0,1,2,3],[4,5,6,7]]; dim 1 in 2 parts: rank 1 holds columns 2..3 = [2,3,6,7].
  std::vector<float> full{0, 1, 2, 3, 4, 5, 6, 7};
  CHECK(shard_of(full, {2, 4}, 1, 2, 1) == std::vector<float>{2, 3, 6, 7});
  // dim 0 in 2 parts: rank 0 holds row 0.
  CHECK(shard_of(full, {2, 4}, 0, 2, 0) == std::vector<float>{0, 1, 2, 3});
  CHECK(shard_of(full, {2, 4}, -1, 2, 1) == full);  // replicated
  CHECK_THROWS(shard_of(full, {2, 4}, 1, 3, 0));    // 4 is not divisible by 3
}

TEST_CASE("parameters do not depend on the TP degree: shards reassemble the full tensor", "[runtime][init]") {
  const Shape w{8, 6};
  auto full = init_parameter(11, "layers.0.attention.wq.weight", w);
  for (int tp : {2, 4}) {
    std::vector<float> rows;
    for (int r = 0; r < tp; ++r) {
      auto s = shard_of(full, w, 0, tp, r);
      rows.insert(rows.end(), s.begin(), s.end());
    }
    CHECK(rows == full);
  }
  CHECK(init_parameter(11, "layers.0.attention.wq.weight", w) == full);  // deterministic
  CHECK(init_parameter(12, "layers.0.attention.wq.weight", w) != full);  // the seed matters
  CHECK(init_parameter(11, "layers.1.attention.wq.weight", w) != full);  // so does the name
}

TEST_CASE("a rank draws its shard alone: init_parameter_shard equals the full tensor's slice, bit for bit",
          "[runtime][init]") {
  // The executor draws each rank's shard directly (the 405B block at tp 8's local shapes: 1.3 G elements instead of
  // 10.6 G); it must be exactly the slice the full tensor gives, for every dim, degree and rank, matrices, 3-D expert
  // weights, norm weights and biases alike, and replicated (dim -1, or 1 part) is the full tensor.
  const std::vector<std::pair<std::string, Shape>> params = {{"layers.0.attention.wq.weight", {8, 6}},
                                                             {"layers.0.moe.experts.w1", {4, 6, 8}},
                                                             {"layers.0.attention_norm.weight", {12}},
                                                             {"layers.0.attention.wq.bias", {12}}};
  for (const auto& [name, shape] : params) {
    const std::vector<float> full = init_parameter(5, name, shape);
    CHECK(init_parameter_shard(5, name, shape, -1, 4, 2) == full);
    CHECK(init_parameter_shard(5, name, shape, 0, 1, 0) == full);
    for (int dim = 0; dim < static_cast<int>(shape.size()); ++dim)
      for (int parts : {2, 4})
        for (int r = 0; r < parts; ++r) {
          if (shape[size_t(dim)] % parts != 0) continue;
          INFO(name << " dim " << dim << " parts " << parts << " rank " << r);
          CHECK(init_parameter_shard(5, name, shape, dim, parts, r) == shard_of(full, shape, dim, parts, r));
        }
  }
  CHECK_THROWS_WITH(init_parameter_shard(5, "w", {8, 6}, 1, 4, 0),
                    "shard_of: cannot take slice 0 of dim 1 of [8, 6] in 4 parts");
}

TEST_CASE("initial scales: 1/sqrt(fan_in) for matrices, ~1 for norm weights, ~0 for biases", "[runtime][init]") {
  // Uniform u in [-1, 1) scaled by sqrt(3/in) has variance 1/in: 1/256 for in = 256.
  auto w = init_parameter(1, "output.weight", {64, 256});
  double var = 0;
  for (float x : w) var += double(x) * x;
  var /= double(w.size());
  CHECK(var == Approx(1.0 / 256).epsilon(0.05));
  for (float x : w) CHECK(std::abs(x) <= std::sqrt(3.0 / 256) + 1e-7);
  for (float x : init_parameter(1, "norm.weight", {64})) CHECK(std::abs(x - 1.0f) <= 0.1f);
  for (float x : init_parameter(1, "norm.bias", {64})) CHECK(std::abs(x) <= 0.1f);
}

TEST_CASE("tokens lie in 0 .. vocab - 1", "[runtime][init]") {
  auto t = init_tokens(3, "tokens", {2, 32}, 7);
  bool seen_last = false;
  for (int32_t x : t) {
    CHECK(x >= 0);
    CHECK(x < 7);
    seen_last |= x == 6;
  }
  CHECK(seen_last);
  CHECK(init_tokens(3, "targets", {2, 32}, 7) != t);
}

TEST_CASE("summarize: median and nearest-rank spread", "[runtime][profile]") {
  // Sorted samples 1 2 3 4 10: median 3; p10 = 1 (rank ceil(0.5) = 1), p90 = 10 (rank ceil(4.5) = 5).
  OpTiming t = summarize({10, 2, 1, 4, 3});
  CHECK(t.median == 3);
  CHECK(t.min == 1);
  CHECK(t.max == 10);
  CHECK(t.p10 == 1);
  CHECK(t.p90 == 10);
  CHECK(t.samples == std::vector<double>{10, 2, 1, 4, 3});  // raw, in iteration order
  CHECK(summarize({4, 1, 3, 2}).median == 2.5);             // even count: mean of the middle two
}

TEST_CASE("the per-tensor hash is hoisted without changing a bit: the values every earlier run initialised",
          "[runtime][init]") {
  // init_parameter / init_tokens hash the tensor's name once per tensor (issue 27: once per element was 19-22 ns an
  // element, minutes for a 70B block on the host). Every element must equal the per-element reference draw
  // (seeded_uniform / seeded_index, which still hash the whole name per call) bit for bit...
  const std::string name = "layers.0.attention.wq.weight";
  const auto w = init_parameter(11, name, {8, 4});
  const float scale = static_cast<float>(std::sqrt(3.0 / 4.0));  // fan_in 4
  for (int64_t i = 0; i < 32; ++i) CHECK(w[size_t(i)] == scale * seeded_uniform(11, name, i));
  const auto n = init_parameter(5, "norm.weight", {16});
  for (int64_t i = 0; i < 16; ++i) CHECK(n[size_t(i)] == 1.0f + 0.1f * seeded_uniform(5, "norm.weight", i));
  const auto t = init_tokens(3, "tokens", {2, 32}, 50257);
  for (int64_t i = 0; i < 64; ++i) CHECK(t[size_t(i)] == seeded_index(3, "tokens", i, 50257));
  // ...and equal what the per-element implementation of main (commit cd4f02d) produced, printed there with %a.
  CHECK(w[0] == 0x1.03b7b2p-1f);
  CHECK(w[1] == -0x1.866aaap-1f);
  CHECK(w[31] == -0x1.7072d2p-1f);
  CHECK(n[3] == 0x1.ce9662p-1f);
  CHECK(t[0] == 842);
  CHECK(t[63] == 19229);
}
