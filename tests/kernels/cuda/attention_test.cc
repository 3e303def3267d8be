// [cuda] causal GQA attention forward and backward against kernels/cpu/attention:
// - the fp32 path (the simple reference kernel) and the reference kernel on bf16 storage;
// - the bf16 path (cuDNN's fused flash attention through the backend graph API), on Llama-like head dims.
// Inputs are rounded to the storage type first, so the CPU reference sees the values the device holds.
#include "kernels/cuda/attention/attention.h"

#include "kernels/cpu/attention.h"
#include "tests/kernels/compare.h"
#include "tests/kernels/cuda/device.h"

using namespace tptune;
using test::DeviceArray;

namespace {

struct Result {
  std::vector<float> o, lse, dq, dk, dv;
};

struct Inputs {
  std::vector<float> q, k, v, d_o;
};

Inputs make_inputs(const kernels::AttentionDims& s, uint32_t seed, bool bf16) {
  const size_t nq = size_t(s.batch * s.seq * s.n_heads * s.head_dim),
               nk = size_t(s.batch * s.seq * s.n_kv_heads * s.head_dim);
  Inputs in{test::randn(nq, seed), test::randn(nk, seed + 1), test::randn(nk, seed + 2), test::randn(nq, seed + 3)};
  if (bf16)
    for (auto* v : {&in.q, &in.k, &in.v, &in.d_o}) *v = test::rounded<__nv_bfloat16>(*v);
  return in;
}

Result cpu(const kernels::AttentionDims& s, const Inputs& in) {
  Result r;
  r.o.resize(in.q.size()), r.dq.resize(in.q.size()), r.dk.resize(in.k.size()), r.dv.resize(in.k.size());
  r.lse.resize(size_t(s.batch * s.n_heads * s.seq));
  kernels::attention(s, in.q.data(), in.k.data(), in.v.data(), r.o.data(), r.lse.data());
  kernels::attention_bwd(s, in.q.data(), in.k.data(), in.v.data(), r.o.data(), r.lse.data(), in.d_o.data(), r.dq.data(),
                         r.dk.data(), r.dv.data());
  return r;
}

// Runs forward then backward on the device; the backward gets the device's own o and lse (as in training).
template <class T, class Fwd, class Bwd>
Result device(const kernels::AttentionDims& s, const Inputs& in, Fwd fwd, Bwd bwd) {
  DeviceArray<T> q(in.q), k(in.k), v(in.v), d_o(in.d_o), o(in.q.size()), dq(in.q.size()), dk(in.k.size()),
      dv(in.k.size());
  DeviceArray<float> lse(size_t(s.batch * s.n_heads * s.seq));
  fwd(q.get(), k.get(), v.get(), o.get(), lse.get());
  bwd(q.get(), k.get(), v.get(), o.get(), lse.get(), d_o.get(), dq.get(), dk.get(), dv.get());
  return {o.floats(), lse.floats(), dq.floats(), dk.floats(), dv.floats()};
}

void compare(const Result& got, const Result& want, double atol, double rtol) {
  test::check_close("o", got.o, want.o, atol, rtol);
  test::check_close("lse", got.lse, want.lse, atol, rtol);
  test::check_close("dq", got.dq, want.dq, atol, rtol);
  test::check_close("dk", got.dk, want.dk, atol, rtol);
  test::check_close("dv", got.dv, want.dv, atol, rtol);
}

// GQA (8 query heads on 2 kv heads), a ragged seq, causal; MHA non-causal; and Llama 3 8B's local heads at tp 4
// (32/8 heads -> 8/2, head_dim 128) on a 1024-token sequence.
const kernels::AttentionDims kShapes[] = {
    {2, 77, 8, 2, 64, true}, {1, 130, 4, 4, 128, false}, {1, 1024, 8, 2, 128, true}};

}  // namespace

TEST_CASE("cuda attention fp32 (reference kernel) matches the CPU", "[cuda]") {
  TPTUNE_CUDA_TEST_OR_SKIP();
  cuda::AttentionPlanCache cache;
  for (const auto& s : kShapes) {
    INFO("seq " << s.seq << ", heads " << s.n_heads << "/" << s.n_kv_heads << ", d " << s.head_dim);
    const Inputs in = make_inputs(s, 1, false);
    const Result got = device<float>(
        s, in, [&](auto... a) { cuda::attention_fwd<float>(nullptr, cache, s, a...); },
        [&](auto... a) { cuda::attention_bwd<float>(nullptr, cache, s, a...); });
    // Both sides are float with dot products of head_dim terms and sums of <= seq terms, in different orders
    // (Eigen's blocked GEMM vs sequential loops): errors ~ sqrt(terms) * 6e-8 * |terms| -> 1e-5 absolute on
    // O(1) outputs; rtol 1e-4 for the larger gradients.
    compare(got, cpu(s, in), 2e-5, 1e-4);
  }
}

TEST_CASE("cuda attention reference kernel on bf16 storage matches the CPU", "[cuda]") {
  TPTUNE_CUDA_TEST_OR_SKIP();
  for (const auto& s : kShapes) {
    const Inputs in = make_inputs(s, 2, true);
    using B = __nv_bfloat16;
    cuda::AttentionPlanCache cache(cuda::AttentionImpl::reference);  // the dispatch to the reference kernels
    const Result got = device<B>(
        s, in, [&](auto... a) { cuda::attention_fwd<B>(nullptr, cache, s, a...); },
        [&](auto... a) { cuda::attention_bwd<B>(nullptr, cache, s, a...); });
    // fp32 math on bf16 inputs; outputs rounded to bf16 (2^-9 relative); dq/dk/dv are computed from the device's
    // bf16-rounded o (D = rowsum(dO * O)): a relative error of 2^-9 in O gives ~2^-9 |D| absolute in ds.
    compare(got, cpu(s, in), 2e-2, 1e-2);
  }
}

TEST_CASE("cuda attention bf16 (cuDNN fused SDPA) matches the CPU", "[cuda]") {
  TPTUNE_CUDA_TEST_OR_SKIP();
  cuda::AttentionPlanCache cache;
  for (const auto& s : kShapes) {
    INFO("seq " << s.seq << ", heads " << s.n_heads << "/" << s.n_kv_heads << ", d " << s.head_dim);
    const Inputs in = make_inputs(s, 3, true);
    using B = __nv_bfloat16;
    // Twice: the second call reuses the cached plans.
    for (int round = 0; round < 2; ++round) {
      const Result got = device<B>(
          s, in, [&](auto... a) { cuda::attention_fwd<B>(nullptr, cache, s, a...); },
          [&](auto... a) { cuda::attention_bwd<B>(nullptr, cache, s, a...); });
      // cuDNN's flash attention rounds P to bf16 before the P V and dS K / dS^T Q products (as FlashAttention-2
      // does), on top of the bf16 outputs: PyTorch's own SDPA tests use atol/rtol ~1e-2 for bf16 outputs and
      // larger for gradients. Here 3e-2 absolute on O(1) values, 2e-2 relative.
      compare(got, cpu(s, in), 3e-2, 2e-2);
    }
  }
}

TEST_CASE("cuda attention bf16 refuses a head_dim cuDNN cannot run, naming the kernel", "[cuda]") {
  TPTUNE_CUDA_TEST_OR_SKIP();
  cuda::AttentionPlanCache cache;
  const kernels::AttentionDims s{1, 16, 2, 2, 12, true};
  DeviceArray<__nv_bfloat16> x(16 * 2 * 12);
  DeviceArray<float> lse(2 * 16);
  CHECK_THROWS_WITH(
      cuda::attention_fwd<__nv_bfloat16>(nullptr, cache, s, x.get(), x.get(), x.get(), x.get(), lse.get()),
      Catch::Contains("attention_fwd (cuDNN)") && Catch::Contains("head_dim"));
}
