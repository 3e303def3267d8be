// CpuBackend without MPI (groups of size 1): memory, strided copies, GEMM in every transpose combination and with
// float8 operands, and the size-1 collectives. Multi-rank collectives are tested under mpirun in
// tests/runtime/mpi/.
#include "runtime/cpu/cpu_backend.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/float8.h"

using namespace tptune;

namespace {
std::vector<float> transpose(const std::vector<float>& x, int rows, int cols) {
  std::vector<float> t(x.size());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) t[size_t(c * rows + r)] = x[size_t(r * cols + c)];
  return t;
}
}  // namespace

TEST_CASE("alloc returns zero-filled buffers of the asked storage", "[runtime][cpu]") {
  CpuBackend be;
  Buffer f = be.alloc(5, Storage::f32);
  Buffer i = be.alloc(3, Storage::i32);
  REQUIRE(f.f32() != nullptr);
  REQUIRE(f.i32() == nullptr);
  REQUIRE(i.i32() != nullptr);
  for (int k = 0; k < 5; ++k) CHECK(f.f32()[k] == 0.0f);
  for (int k = 0; k < 3; ++k) CHECK(i.i32()[k] == 0);
  CHECK(be.group_size(Group::tp) == 1);
  CHECK(be.group_rank(Group::tp) == 0);
}

TEST_CASE("copy2d copies a strided block", "[runtime][cpu]") {
  CpuBackend be;
  // src is 3x4 (values 0..11); copy its columns 1..2 of rows 0..2 into a 3x2 tight block.
  std::vector<float> src(12), dst(6, -1.0f);
  for (int k = 0; k < 12; ++k) src[size_t(k)] = float(k);
  be.copy2d(dst.data(), 2, src.data() + 1, 4, 3, 2);
  CHECK(dst == std::vector<float>{1, 2, 5, 6, 9, 10});
}

TEST_CASE("gemm: hand-computed product in all four transpose combinations", "[runtime][cpu]") {
  CpuBackend be;
  // A (2, 3) = [[1,2,3],[4,5,6]], B (3, 2) = [[7,8],[9,10],[11,12]]
  // C = [[1*7+2*9+3*11, 1*8+2*10+3*12], [4*7+5*9+6*11, 4*8+5*10+6*12]] = [[58, 64], [139, 154]]
  std::vector<float> a{1, 2, 3, 4, 5, 6}, b{7, 8, 9, 10, 11, 12};
  std::vector<float> at = transpose(a, 2, 3), bt = transpose(b, 3, 2);
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      std::vector<float> c(4, 99.0f);
      GemmArgs g;
      g.m = 2, g.n = 2, g.k = 3;
      g.a = ta ? at.data() : a.data();
      g.b = tb ? bt.data() : b.data();
      g.c = c.data();
      g.trans_a = ta, g.trans_b = tb;
      be.gemm(g);
      INFO("trans_a " << ta << " trans_b " << tb);
      CHECK(c == std::vector<float>{58, 64, 139, 154});
    }
  }
}

TEST_CASE("gemm accumulate adds onto C", "[runtime][cpu]") {
  CpuBackend be;
  // [1 2] x [[3],[4]] = 11, onto 5 -> 16.
  std::vector<float> a{1, 2}, b{3, 4}, c{5};
  GemmArgs g;
  g.m = 1, g.n = 1, g.k = 2, g.a = a.data(), g.b = b.data(), g.c = c.data(), g.accumulate = true;
  be.gemm(g);
  CHECK(c[0] == 16.0f);
}

TEST_CASE("gemm with float8 operands applies both scales", "[runtime][cpu]") {
  CpuBackend be;
  // Stored A = [[1,-2],[0.5,3]] (all exact e4m3), scale_a 0.25; stored B = [[2,1],[1,-1]], scale_b 2.
  // A B = [[1*2-2*1, 1*1+2*1], [0.5*2+3*1, 0.5*1-3*1]] = [[0, 3], [4, -2.5]]; times 0.25*2 = [[0,1.5],[2,-1.25]].
  std::vector<float> a{1, -2, 0.5f, 3}, b{2, 1, 1, -1}, c(4);
  for (float x : a) REQUIRE(kernels::round_to_e4m3(x) == x);
  float sa = 0.25f, sb = 2.0f;
  GemmArgs g;
  g.m = 2, g.n = 2, g.k = 2, g.a = a.data(), g.b = b.data(), g.c = c.data();
  g.scale_a = &sa, g.scale_b = &sb, g.a_dtype = DType::fp8_e4m3, g.b_dtype = DType::fp8_e4m3;
  be.gemm(g);
  CHECK(c == std::vector<float>{0.0f, 1.5f, 2.0f, -1.25f});
}

TEST_CASE("gemm matches a double-precision product on odd shapes", "[runtime][cpu]") {
  CpuBackend be;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  const int m = 37, n = 19, k = 53;
  std::vector<float> a(m * k), b(n * k), c(m * n);
  for (auto& x : a) x = u(rng);
  for (auto& x : b) x = u(rng);
  GemmArgs g;  // a linear y = x W^T: x (m, k), W (n, k), trans_b
  g.m = m, g.n = n, g.k = k, g.a = a.data(), g.b = b.data(), g.c = c.data(), g.trans_b = true;
  be.gemm(g);
  double worst = 0;
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double ref = 0;
      for (int p = 0; p < k; ++p) ref += double(a[size_t(i * k + p)]) * b[size_t(j * k + p)];
      worst = std::max(worst, std::abs(ref - c[size_t(i * n + j)]));
    }
  // fp32 dot products of 53 terms of magnitude <= 1: error <= k * eps * sum|terms| ~ 53 * 6e-8 * 53 ~ 2e-4 (bound);
  // typical far smaller.
  CHECK(worst < 2e-4);
}

TEST_CASE("collectives of a group of one are copies and complete at once", "[runtime][cpu]") {
  CpuBackend be;
  std::vector<float> in{1, 2, 3}, out(3);
  auto r = be.all_reduce(Group::tp, ReduceOp::sum, in.data(), out.data(), 3);
  CHECK(r->test());
  CHECK(out == in);
  std::fill(out.begin(), out.end(), 0.0f);
  be.all_gather(Group::tp, in.data(), out.data(), 3)->wait();
  CHECK(out == in);
  std::fill(out.begin(), out.end(), 0.0f);
  be.reduce_scatter(Group::dp, ReduceOp::max, in.data(), out.data(), 3)->wait();
  CHECK(out == in);
  std::fill(out.begin(), out.end(), 0.0f);
  be.send_recv(Group::tp, in.data(), 0, out.data(), 0, 3)->wait();
  CHECK(out == in);
  CHECK_THROWS(be.send_recv(Group::tp, in.data(), 1, out.data(), 0, 3));
}

TEST_CASE("environment names the backend, the CPU and Eigen", "[runtime][cpu]") {
  CpuBackend be;
  auto e = be.environment();
  CHECK(e.backend == "cpu");
  CHECK(!e.device.empty());
  CHECK(e.threads == 1);
  REQUIRE(!e.libraries.empty());
  CHECK(e.libraries[0].first == "eigen");
}
