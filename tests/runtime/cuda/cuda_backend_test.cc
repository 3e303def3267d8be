// The CUDA backend's own parts on a device: the caching allocator, typed host transfers (bf16 and float8 rounding),
// and cuBLASLt GEMMs in every layout and type against the CPU backend. [cuda]: skipped without a device.
#include "runtime/cuda/cuda_backend.h"

#include <cmath>
#include <vector>

#include "runtime/cpu/cpu_backend.h"
#include "tests/runtime/cuda/skip.h"

using namespace tptune;

TEST_CASE("cuda allocator: a freed block is reused, no cudaMalloc per allocation", "[cuda][runtime]") {
  TPTUNE_CUDA_OR_SKIP();
  CudaBackend be(MPI_COMM_NULL, MPI_COMM_NULL, 0);
  { Buffer b = be.alloc(1000, Storage::bf16); }
  be.synchronize();
  const size_t before = be.device_mallocs();
  for (int i = 0; i < 10; ++i) {
    Buffer b = be.alloc(1000, Storage::bf16);  // 2000 bytes -> the same 2048-byte class every time
    be.synchronize();
  }
  CHECK(be.device_mallocs() == before);
}

TEST_CASE("cuda host transfers round to the storage: bf16 nearest-even, float8 exact", "[cuda][runtime]") {
  TPTUNE_CUDA_OR_SKIP();
  CudaBackend be(MPI_COMM_NULL, MPI_COMM_NULL, 0);
  // bf16 keeps 8 significant bits: 1 + 2^-8 is the midpoint of 1 and 1 + 2^-7 and rounds to the even 1;
  // 1 + 3*2^-8 is the midpoint of 1 + 2^-7 (odd last bit) and 1 + 2^-6 (even) and rounds to 1 + 2^-6.
  std::vector<float> in = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.5f, 0.0f};
  std::vector<float> want = {1.0f, 1.0f + 0x1p-6f, -2.5f, 0.0f}, got(4);
  Buffer b = be.alloc(4, Storage::bf16);
  be.upload(b.ptr(), in.data(), 4);
  be.download(got.data(), b.ptr(), 4);
  CHECK(got == want);
  // e4m3 values (448 is its largest) survive the trip exactly.
  std::vector<float> f8 = {448.0f, -0.015625f, 3.5f, 0.0f};
  Buffer q = be.alloc(4, Storage::fp8_e4m3);
  be.upload(q.ptr(), f8.data(), 4);
  be.download(got.data(), q.ptr(), 4);
  CHECK(got == f8);
}

namespace {
// Values on a coarse grid, exactly representable in bf16 and in float8 e4m3/e5m2 (small integers / 4).
std::vector<float> grid_values(int64_t n, int seed) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(((i * 7 + seed * 13) % 9) - 4) / 4.0f;
  return v;
}

// C from the CPU backend (fp32, exact for these inputs: every product is a multiple of 1/16 and the sums stay far
// below 2^24 / 16, so any summation order gives the same fp32 value).
std::vector<float> cpu_gemm(GemmArgs g, const std::vector<float>& a, const std::vector<float>& b, float sa, float sb) {
  CpuBackend cpu;
  std::vector<float> c(size_t(g.m * g.n)), a2 = a, b2 = b;
  g.a = a2.data(), g.b = b2.data(), g.c = c.data();
  g.scale_a = g.scale_b = nullptr;
  cpu.gemm(g);
  for (float& x : c) x *= sa * sb;
  return c;
}

void check_gemm(Storage as, Storage bs, Storage cs, bool ta, bool tb) {
  CudaBackend be(MPI_COMM_NULL, MPI_COMM_NULL, 0);
  const int64_t m = 64, n = 48, k = 32;
  auto a = grid_values(m * k, 1), b = grid_values(k * n, 2);
  const bool fp8 = as == Storage::fp8_e4m3 || as == Storage::fp8_e5m2;
  const float sa = fp8 ? 0.5f : 1.0f, sb = fp8 ? 2.0f : 1.0f;
  Buffer da = be.alloc(m * k, as), db = be.alloc(k * n, bs), dc = be.alloc(m * n, cs), dsa = be.alloc(1, Storage::f32),
         dsb = be.alloc(1, Storage::f32);
  be.upload(da.ptr(), a.data(), m * k);
  be.upload(db.ptr(), b.data(), k * n);
  be.upload(dsa.ptr(), &sa, 1);
  be.upload(dsb.ptr(), &sb, 1);
  GemmArgs g;
  g.m = m, g.n = n, g.k = k, g.trans_a = ta, g.trans_b = tb;
  g.a = da.ptr(), g.b = db.ptr(), g.c = dc.ptr();
  if (fp8) g.scale_a = dsa.f32(), g.scale_b = dsb.f32();
  be.gemm(g);
  std::vector<float> got(size_t(m * n));
  be.download(got.data(), dc.ptr(), m * n);
  auto want = cpu_gemm(g, a, b, sa, sb);
  // Exact products and sums (see cpu_gemm); a bf16 output rounds once: relative 2^-9 of |C|.
  const double rtol = cs == Storage::bf16 ? 0x1p-9 : 0.0;
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::abs(double(got[i]) - want[i]) > rtol * std::abs(double(want[i])) && bad++ < 5)
      UNSCOPED_INFO("C[" << i << "] = " << got[i] << ", CPU " << want[i]);
  CHECK(bad == 0);
}
}  // namespace

TEST_CASE("cuBLASLt bf16 GEMM in all four layouts matches the CPU backend", "[cuda][runtime][gemm]") {
  TPTUNE_CUDA_OR_SKIP();
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      INFO("trans_a " << ta << ", trans_b " << tb);
      check_gemm(Storage::bf16, Storage::bf16, Storage::bf16, ta, tb);
      check_gemm(Storage::bf16, Storage::bf16, Storage::f32, ta, tb);
      check_gemm(Storage::f32, Storage::f32, Storage::f32, ta, tb);
    }
}

TEST_CASE("cuBLASLt float8 GEMM: e4m3 x e4m3 and e5m2 x e4m3 with scales, any layout, matches the CPU",
          "[cuda][runtime][gemm]") {
  TPTUNE_CUDA_OR_SKIP();
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      INFO("trans_a " << ta << ", trans_b " << tb << " (non-TN layouts go through the byte transpose)");
      check_gemm(Storage::fp8_e4m3, Storage::fp8_e4m3, Storage::f32, ta, tb);
      check_gemm(Storage::fp8_e5m2, Storage::fp8_e4m3, Storage::bf16, ta, tb);
    }
}

TEST_CASE("cuBLASLt refuses e5m2 x e5m2 and mixed float8/bf16 in one line", "[cuda][runtime][gemm]") {
  TPTUNE_CUDA_OR_SKIP();
  CudaBackend be(MPI_COMM_NULL, MPI_COMM_NULL, 0);
  Buffer a = be.alloc(16 * 16, Storage::fp8_e5m2), c = be.alloc(16 * 16, Storage::bf16), s = be.alloc(1, Storage::f32);
  GemmArgs g;
  g.m = g.n = g.k = 16, g.trans_b = true;
  g.a = a.ptr(), g.b = a.ptr(), g.c = c.ptr(), g.scale_a = g.scale_b = s.f32();
  CHECK_THROWS_WITH(be.gemm(g), Catch::Contains("e5m2 x e5m2"));
  g.b = c.ptr();
  CHECK_THROWS_WITH(be.gemm(g), Catch::Contains("both operands must be float8"));
}

TEST_CASE("cuda kernel scratch comes from the caching allocator: a second norm backward allocates nothing",
          "[cuda][runtime]") {
  TPTUNE_CUDA_OR_SKIP();
  CudaBackend be(MPI_COMM_NULL, MPI_COMM_NULL, 0);
  const int64_t rows = 64, dim = 256;
  Buffer x = be.alloc(rows * dim, Storage::bf16), dy = be.alloc(rows * dim, Storage::bf16);
  Buffer dx = be.alloc(rows * dim, Storage::bf16), w = be.alloc(dim, Storage::bf16), dw = be.alloc(dim, Storage::bf16);
  Buffer rstd = be.alloc(rows, Storage::f32);
  be.fill(x.ptr(), rows * dim, 0.5f);
  be.fill(dy.ptr(), rows * dim, 0.25f);
  be.fill(w.ptr(), dim, 1.0f);
  be.fill(rstd.ptr(), rows, 1.0f);
  be.rmsnorm_bwd(rows, dim, x.ptr(), w.ptr(), rstd.f32(), dy.ptr(), dx.ptr(), dw.ptr());  // dw partials: scratch
  be.synchronize();
  const size_t before = be.device_mallocs();
  for (int i = 0; i < 3; ++i) {
    be.rmsnorm_bwd(rows, dim, x.ptr(), w.ptr(), rstd.f32(), dy.ptr(), dx.ptr(), dw.ptr());
    be.synchronize();
  }
  CHECK(be.device_mallocs() == before);  // the partial sums' block came back from the cache each time
}
