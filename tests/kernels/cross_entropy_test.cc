// Staged cross entropy: hand goldens, a double log-softmax reference, finite differences, and the vocab-parallel
// property (shards' stage results combine to the unsharded loss and gradient).
#include "kernels/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "tests/kernels/compare.h"

using namespace tptune::kernels;
using tptune::test::check_close;

namespace {

// Mean over rows of -log softmax(logits)[target], in double.
double ref_loss(const std::vector<double>& logits, const std::vector<int32_t>& targets, int64_t vocab) {
  const int64_t tokens = int64_t(targets.size());
  double total = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    const double* row = logits.data() + t * vocab;
    const double m = *std::max_element(row, row + vocab);
    double s = 0;
    for (int64_t j = 0; j < vocab; ++j) s += std::exp(row[j] - m);
    total += std::log(s) + m - row[targets[size_t(t)]];
  }
  return total / double(tokens);
}

struct Result {
  float loss;
  std::vector<float> d_logits;  // (tokens, vocab), shards concatenated along vocab
};

// Runs the five stages on `shards` equal vocab shards, combining the statistics as the runtime's all-reduces do:
// max of the row maxes, then sum of the sumexps and of the target logits.
Result run_sharded(const std::vector<float>& logits, const std::vector<int32_t>& targets, int64_t vocab,
                   int64_t shards) {
  const int64_t tokens = int64_t(targets.size()), vl = vocab / shards;
  const size_t ns = static_cast<size_t>(shards), nt = static_cast<size_t>(tokens);
  std::vector<std::vector<float>> local(ns, std::vector<float>(nt * size_t(vl)));  // rank r's (tokens, vl)
  for (int64_t r = 0; r < shards; ++r)
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t j = 0; j < vl; ++j) local[size_t(r)][size_t(t * vl + j)] = logits[size_t(t * vocab + r * vl + j)];
  std::vector<float> max(nt, -INFINITY), sumexp(nt), tlogit(nt), part(nt);
  for (int64_t r = 0; r < shards; ++r) {
    cross_entropy_row_max(local[size_t(r)].data(), tokens, vl, part.data());
    for (size_t t = 0; t < part.size(); ++t) max[t] = std::max(max[t], part[t]);  // all-reduce(max)
  }
  for (int64_t r = 0; r < shards; ++r) {
    cross_entropy_sum_exp(local[size_t(r)].data(), max.data(), tokens, vl, part.data());
    for (size_t t = 0; t < part.size(); ++t) sumexp[t] += part[t];  // all-reduce(sum)
    cross_entropy_target_logit(local[size_t(r)].data(), targets.data(), tokens, vl, r * vl, part.data());
    for (size_t t = 0; t < part.size(); ++t) tlogit[t] += part[t];  // all-reduce(sum)
  }
  Result res{cross_entropy_loss(max.data(), sumexp.data(), tlogit.data(), tokens, tokens),
             std::vector<float>(logits.size())};
  for (int64_t r = 0; r < shards; ++r) {
    std::vector<float> d(local[size_t(r)].size());
    cross_entropy_bwd(local[size_t(r)].data(), max.data(), sumexp.data(), targets.data(), tokens, tokens, vl, r * vl,
                      d.data());
    for (int64_t t = 0; t < tokens; ++t)
      std::copy(d.begin() + t * vl, d.begin() + (t + 1) * vl, res.d_logits.begin() + t * vocab + r * vl);
  }
  return res;
}

}  // namespace

TEST_CASE("cross entropy golden: two rows of four classes") {
  // Row 0: logits ln[1, 3, 2, 2], sum of exps 8, target 1: loss -ln(3/8) = ln(8/3) = 0.9808293.
  //        softmax [1/8, 3/8, 2/8, 2/8], minus onehot(1) = [0.125, -0.625, 0.25, 0.25], / 2 tokens.
  // Row 1: logits 0, sum 4, target 3: loss ln 4 = 1.3862944; gradient [0.25, 0.25, 0.25, -0.75] / 2.
  // Mean loss (0.9808293 + 1.3862944) / 2 = 1.1835618.
  const std::vector<float> logits = {0, std::log(3.0f), std::log(2.0f), std::log(2.0f), 0, 0, 0, 0};
  const std::vector<int32_t> targets = {1, 3};
  const Result r = run_sharded(logits, targets, 4, 1);
  CHECK(r.loss == Approx(1.1835618).epsilon(1e-6));
  check_close("d_logits", r.d_logits, std::vector<double>{0.0625, -0.3125, 0.125, 0.125, 0.125, 0.125, 0.125, -0.375},
              1e-7, 1e-6);
}

TEST_CASE("cross entropy matches a double reference and finite differences, with large logits") {
  const int64_t tokens = 9, vocab = 40;
  auto logits = tptune::test::randn(size_t(tokens * vocab), 101, 3.0);
  for (int64_t j = 0; j < vocab; ++j) logits[size_t(2 * vocab + j)] += 1000.0f;  // exp(1000) overflows w/o the max
  std::vector<int32_t> targets;
  for (int64_t t = 0; t < tokens; ++t) targets.push_back(int32_t((t * 7 + 3) % vocab));
  const Result r = run_sharded(logits, targets, vocab, 1);
  const auto ld = tptune::test::to_double(logits);
  // The loss is a double-accumulated mean stored as float: 1e-6 relative.
  CHECK(r.loss == Approx(ref_loss(ld, targets, vocab)).epsilon(1e-6));
  // Finite differences of the double loss with h = 1e-4: truncation ~h^2 = 1e-8, cancellation ~1e-16 * |L| / h
  // ~1e-11 (also on row 2, whose logits are ~1000). The kernel computes exp(l - max) in double from the float
  // inputs and rounds once, so its gradient (entries O(1/tokens)) is good to ~1e-8 absolute; observed worst 5e-9.
  // 1e-6 + 1e-5 |ref| keeps a wide margin, while a wrong term (missing onehot, wrong 1/tokens) is off by >0.01.
  const auto grad =
      tptune::test::finite_diff([&](const std::vector<double>& x) { return ref_loss(x, targets, vocab); }, ld, 1e-4);
  check_close("d_logits vs finite differences", r.d_logits, grad, 1e-6, 1e-5);
}

TEST_CASE("vocab-parallel cross entropy on 2 and 4 shards equals the unsharded one") {
  const int64_t tokens = 33, vocab = 1024;
  auto logits = tptune::test::randn(size_t(tokens * vocab), 111, 4.0);
  std::vector<int32_t> targets;
  for (int64_t t = 0; t < tokens; ++t) targets.push_back(int32_t((t * 131 + 17) % vocab));
  const Result full = run_sharded(logits, targets, vocab, 1);
  for (int64_t shards : {2, 4}) {
    INFO(shards << " shards");
    const Result r = run_sharded(logits, targets, vocab, shards);
    // Only the order of the float additions of the partial sumexps differs (1 float rounding per shard, ~1e-7
    // relative on sumexp): the loss agrees to ~1e-7 and the gradient to ~1e-7 relative.
    CHECK(r.loss == Approx(full.loss).epsilon(1e-6));
    check_close("d_logits", r.d_logits, full.d_logits, 1e-9, 1e-6);
  }
}

TEST_CASE("cross entropy stages on one shard: target outside the shard gives a zero target logit") {
  const std::vector<float> logits = {1, 2, 3, 4};  // one token, local vocab 4 = global columns [4, 8)
  const int32_t in_shard = 6, outside = 1;
  float tl = -1;
  cross_entropy_target_logit(logits.data(), &in_shard, 1, 4, 4, &tl);
  CHECK(tl == 3.0f);
  cross_entropy_target_logit(logits.data(), &outside, 1, 4, 4, &tl);
  CHECK(tl == 0.0f);
  // The backward of a shard without the target is the plain softmax / tokens: no onehot term.
  const float max = 4, sumexp = std::exp(-3.0f) + std::exp(-2.0f) + std::exp(-1.0f) + 1.0f;
  std::vector<float> d(4);
  cross_entropy_bwd(logits.data(), &max, &sumexp, &outside, 1, 1, 4, 4, d.data());
  CHECK(d[3] == Approx(1.0 / sumexp).epsilon(1e-6));
}
