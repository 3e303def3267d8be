// [cuda] the vocab-parallel cross-entropy stages against kernels/cpu/cross_entropy, fp32 and bf16 logits, on one
// vocab shard with targets inside and outside it; and two shards combined as the runtime does (max of the maxes,
// sums of sumexp and tlogit) giving the unsharded loss.
#include "kernels/cuda/cross_entropy.h"

#include <algorithm>
#include <random>

#include "kernels/cpu/cross_entropy.h"
#include "tests/kernels/compare.h"
#include "tests/kernels/cuda/device.h"

using namespace tptune;
using test::DeviceArray;
using test::Tol;

TEMPLATE_TEST_CASE("cuda cross-entropy stages match the CPU", "[cuda]", float, __nv_bfloat16) {
  TPTUNE_CUDA_TEST_OR_SKIP();
  using T = TestType;
  const int64_t tokens = 513, vocab = 16032, shard = vocab / 2;
  const auto logits = test::rounded<T>(test::randn(size_t(tokens * vocab), 1, 3.0));
  std::vector<int32_t> targets(static_cast<size_t>(tokens));
  std::mt19937 gen(2);
  for (auto& t : targets) t = int32_t(std::uniform_int_distribution<int>(0, int(vocab) - 1)(gen));
  auto dtargets = test::upload_ints(targets);

  // The unsharded CPU reference.
  std::vector<float> max(static_cast<size_t>(tokens)), sumexp(static_cast<size_t>(tokens)),
      tlogit(static_cast<size_t>(tokens));
  kernels::cross_entropy_row_max(logits.data(), tokens, vocab, max.data());
  kernels::cross_entropy_sum_exp(logits.data(), max.data(), tokens, vocab, sumexp.data());
  kernels::cross_entropy_target_logit(logits.data(), targets.data(), tokens, vocab, 0, tlogit.data());
  const float loss = kernels::cross_entropy_loss(max.data(), sumexp.data(), tlogit.data(), tokens, tokens);
  std::vector<float> dlogits(logits.size());
  kernels::cross_entropy_bwd(logits.data(), max.data(), sumexp.data(), targets.data(), tokens, tokens, vocab, 0,
                             dlogits.data());

  // Two vocab shards on the device, each a (tokens, shard) slice copied out of the full logits.
  std::vector<float> gmax(static_cast<size_t>(tokens), -INFINITY), gsum(static_cast<size_t>(tokens), 0.0f),
      gt(static_cast<size_t>(tokens), 0.0f);
  std::vector<std::vector<float>> slices(2);
  for (int r = 0; r < 2; ++r) {
    slices[size_t(r)].resize(size_t(tokens * shard));
    for (int64_t t = 0; t < tokens; ++t)
      std::copy_n(logits.begin() + t * vocab + r * shard, shard, slices[size_t(r)].begin() + t * shard);
    DeviceArray<T> dl(slices[size_t(r)]);
    DeviceArray<float> dmax(static_cast<size_t>(tokens));
    cuda::ce_row_max<T>(nullptr, tokens, shard, dl.get(), dmax.get());
    const auto m = dmax.floats();
    for (size_t t = 0; t < size_t(tokens); ++t) gmax[t] = std::max(gmax[t], m[t]);
  }
  // max is exact: the max of the shard maxes is the CPU's max.
  test::check_close("row max", gmax, max, 0.0, 0.0);
  DeviceArray<float> dgmax(gmax);
  for (int r = 0; r < 2; ++r) {
    DeviceArray<T> dl(slices[size_t(r)]);
    DeviceArray<float> dsum(static_cast<size_t>(tokens)), dt(static_cast<size_t>(tokens));
    cuda::ce_sum_exp<T>(nullptr, tokens, shard, dl.get(), dgmax.get(), dsum.get());
    cuda::ce_target_logit<T>(nullptr, tokens, shard, r * shard, dl.get(), dtargets.get(), dt.get());
    const auto s = dsum.floats(), tl = dt.floats();
    for (size_t t = 0; t < size_t(tokens); ++t) gsum[t] += s[t], gt[t] += tl[t];
  }
  // sumexp: double sums of exp (16032 terms) in another order, stored as float, then two float partials added:
  // a few float ulps (1e-6). With bf16 logits the exps are float (expf, <= 2.7e-6 relative for these logits,
  // kernels/formulas/cross_entropy.h): 3e-6. tlogit: one shard contributes the logit, the other 0.0: exact.
  test::check_close("sumexp", gsum, sumexp, 0.0, std::is_same_v<T, float> ? 1e-6 : 3e-6);
  test::check_close("tlogit", gt, tlogit, 0.0, 0.0);
  DeviceArray<float> dgsum(gsum), dgt(gt), dloss(1);
  cuda::ce_loss(nullptr, tokens, dgmax.get(), dgsum.get(), dgt.get(), dloss.get());
  test::check_close("loss", dloss.floats(), std::vector<float>{loss}, 0.0, 1e-6);
  for (int r = 0; r < 2; ++r) {
    DeviceArray<T> dl(slices[size_t(r)]), dd(size_t(tokens * shard));
    cuda::ce_backward<T>(nullptr, tokens, shard, r * shard, dl.get(), dgmax.get(), dgsum.get(), dtargets.get(),
                         dd.get());
    std::vector<float> want(size_t(tokens * shard));
    for (int64_t t = 0; t < tokens; ++t)
      std::copy_n(dlogits.begin() + t * vocab + r * shard, shard, want.begin() + t * shard);
    // d_logits ~ 1/(tokens * vocab) ~ 1e-7 for most entries: the tolerance is relative (the sumexp above differs
    // by ~1e-7 relative), with an absolute floor far below the entries' size.
    test::check_close("d_logits", dd.floats(), want, 1e-12, Tol<T>::rtol);
  }
}
