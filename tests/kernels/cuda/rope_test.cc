// [cuda] RoPE forward and backward against kernels/cpu/rope, fp32 and bf16: Llama 3's theta at a sequence-shard
// offset, in place and out of place, and the bad-argument errors.
#include "kernels/cuda/rope.h"

#include "kernels/cpu/rope.h"
#include "tests/kernels/compare.h"
#include "tests/kernels/cuda/device.h"

using namespace tptune;
using test::DeviceArray;
using test::Tol;

TEMPLATE_TEST_CASE("cuda rope forward and backward match the CPU", "[cuda]", float, __nv_bfloat16) {
  TPTUNE_CUDA_TEST_OR_SKIP();
  using T = TestType;
  // Positions up to 8192 + 511: angles up to ~8700 rad, where a float angle would be off by ~1e-3 rad; the
  // kernel's double angle and sincos keep float results within a couple of ulps of the CPU's.
  const cuda::RopeDims s{2, 512, 4, 128, 8192, 500000.0};
  const size_t n = size_t(s.batch * s.seq * s.heads * s.head_dim);
  const auto x = test::rounded<T>(test::randn(n, 1));
  DeviceArray<T> dx(x), dy(n);
  std::vector<float> y(n), back(n);
  kernels::rope(x.data(), s.batch, s.seq, s.heads, s.head_dim, s.offset, s.theta, y.data());
  kernels::rope_bwd(x.data(), s.batch, s.seq, s.heads, s.head_dim, s.offset, s.theta, back.data());
  cuda::rope_fwd<T>(nullptr, s, dx.get(), dy.get());
  test::check_close("rope_fwd", dy.floats(), y, Tol<T>::atol, Tol<T>::rtol);
  cuda::rope_bwd<T>(nullptr, s, dx.get(), dy.get());
  test::check_close("rope_bwd", dy.floats(), back, Tol<T>::atol, Tol<T>::rtol);
  cuda::rope_fwd<T>(nullptr, s, dx.get(), dx.get());  // in place
  test::check_close("rope_fwd in place", dx.floats(), y, Tol<T>::atol, Tol<T>::rtol);
}

TEST_CASE("cuda rope rejects an odd head_dim and a non-positive theta", "[cuda]") {
  TPTUNE_CUDA_TEST_OR_SKIP();
  DeviceArray<float> x(64);
  CHECK_THROWS_WITH(cuda::rope_fwd<float>(nullptr, cuda::RopeDims{1, 2, 2, 15, 0, 10000.0}, x.get(), x.get()),
                    Catch::Contains("rope_fwd") && Catch::Contains("head_dim must be even"));
  CHECK_THROWS_WITH(cuda::rope_bwd<float>(nullptr, cuda::RopeDims{1, 2, 2, 16, 0, 0.0}, x.get(), x.get()),
                    Catch::Contains("theta must be positive"));
}

TEMPLATE_TEST_CASE("cuda rope_qk: q and k in one launch equal rope of each, bit for bit", "[cuda]", float,
                   __nv_bfloat16) {
  // The compiled Program's rope_qk (ElementwiseOp): q with 8 heads and k with 2 (grouped-query), one grid.
  TPTUNE_CUDA_TEST_OR_SKIP();
  using T = TestType;
  const cuda::RopeDims q{2, 64, 8, 64, 128, 500000.0}, k{2, 64, 2, 64, 128, 500000.0};
  const size_t nq = size_t(q.batch * q.seq * q.heads * q.head_dim), nk = size_t(k.batch * k.seq * k.heads * k.head_dim);
  const auto xq = test::rounded<T>(test::randn(nq, 21)), xk = test::rounded<T>(test::randn(nk, 22));
  DeviceArray<T> dq(xq), dk(xk), q_e(nq), k_e(nk), q_f(nq), k_f(nk);
  cuda::rope_fwd<T>(nullptr, q, dq.get(), q_e.get());
  cuda::rope_fwd<T>(nullptr, k, dk.get(), k_e.get());
  cuda::rope_qk_fwd<T>(nullptr, q, k, dq.get(), dk.get(), q_f.get(), k_f.get());
  CHECK(q_f.floats() == q_e.floats());
  CHECK(k_f.floats() == k_e.floats());
  cuda::rope_bwd<T>(nullptr, q, dq.get(), q_e.get());
  cuda::rope_bwd<T>(nullptr, k, dk.get(), k_e.get());
  cuda::rope_qk_bwd<T>(nullptr, q, k, dq.get(), dk.get(), q_f.get(), k_f.get());
  CHECK(q_f.floats() == q_e.floats());
  CHECK(k_f.floats() == k_e.floats());
}

TEMPLATE_TEST_CASE(
    "cuda rope: heads wider than the packed kernel's frequency table, and rope_qk of q and k with "
    "different head_dim, match the CPU",
    "[cuda]", float, __nv_bfloat16) {
  // The packed kernels keep head_dim / 2 inverse frequencies in shared memory, up to 2048 (head_dim 4096); a wider
  // head takes the scalar kernel. rope_qk launches q and k in one grid with one table, so q and k of different
  // head_dim (or theta) rotate one by one.
  TPTUNE_CUDA_TEST_OR_SKIP();
  using T = TestType;
  const auto check_rope = [](const cuda::RopeDims& s, const std::vector<float>& x, const std::vector<float>& got,
                             const char* what) {
    std::vector<float> want(x.size());
    kernels::rope(x.data(), s.batch, s.seq, s.heads, s.head_dim, s.offset, s.theta, want.data());
    test::check_close(what, got, want, Tol<T>::atol, Tol<T>::rtol);
  };
  const cuda::RopeDims wide{1, 3, 2, 4104, 40, 10000.0};  // 4104: whole 16-byte packs of both types, > 2 * 2048
  const size_t nw = size_t(wide.batch * wide.seq * wide.heads * wide.head_dim);
  const auto xw = test::rounded<T>(test::randn(nw, 31));
  DeviceArray<T> dw(xw), yw(nw);
  cuda::rope_fwd<T>(nullptr, wide, dw.get(), yw.get());
  check_rope(wide, xw, yw.floats(), "rope_fwd, head_dim 4104");

  const cuda::RopeDims q{2, 16, 4, 64, 8, 500000.0}, k{2, 16, 2, 32, 8, 500000.0};
  const size_t nq = size_t(q.batch * q.seq * q.heads * q.head_dim), nk = size_t(k.batch * k.seq * k.heads * k.head_dim);
  const auto xq = test::rounded<T>(test::randn(nq, 32)), xk = test::rounded<T>(test::randn(nk, 33));
  DeviceArray<T> dq(xq), dk(xk), yq(nq), yk(nk);
  cuda::rope_qk_fwd<T>(nullptr, q, k, dq.get(), dk.get(), yq.get(), yk.get());
  check_rope(q, xq, yq.floats(), "rope_qk_fwd q, head_dim 64");
  check_rope(k, xk, yk.floats(), "rope_qk_fwd k, head_dim 32");
}
