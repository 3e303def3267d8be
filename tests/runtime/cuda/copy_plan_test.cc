// Host-side (no device needed): which CUDA copy CudaBackend::copy2d issues for a shape (runtime/cuda/copy_plan.h).
#include "runtime/cuda/copy_plan.h"

#include <catch2/catch.hpp>

using tptune::cudabe::CopyPlan;
using tptune::cudabe::plan_copy2d;

TEST_CASE("copy2d: contiguous copies are one cudaMemcpyAsync, whatever their size", "[runtime][copy]") {
  // Llama3 logits at tp 1, batch 2, fp32: 2 x 8192 x 128256 x 4 = 8,405,385,216 bytes. As the one-row copy of a
  // one-rank collective (pitch = the whole tensor, 8.4e9 > 2^31 - 1) cudaMemcpy2DAsync refused it.
  const int64_t n = 2 * 8192 * int64_t(128256);
  CopyPlan p = plan_copy2d(n, n, 1, n, 4);
  CHECK(p.kind == CopyPlan::Kind::contiguous);
  CHECK(p.bytes == size_t(8405385216));
  // Whole rows with both pitches equal to the row are one block too: 8192 rows of 128256 bf16 = 2,101,346,304 B.
  p = plan_copy2d(128256, 128256, 8192, 128256, 2);
  CHECK(p.kind == CopyPlan::Kind::contiguous);
  CHECK(p.bytes == size_t(2101346304));
  CHECK(plan_copy2d(4, 4, 0, 4, 2).kind == CopyPlan::Kind::none);
}

TEST_CASE("copy2d: a column slice is one cudaMemcpy2DAsync; pitches over the limit go row by row", "[runtime][copy]") {
  // Rank 1's columns of a (4, 8) bf16 tensor sharded in 2: 4 rows of 4 elements, pitches 8 x 2 = 16 and 4 x 2 = 8.
  CopyPlan p = plan_copy2d(4, 8, 4, 4, 2);
  CHECK(p.kind == CopyPlan::Kind::strided);
  CHECK(p.bytes == 8);
  CHECK(p.dst_pitch == 8);
  CHECK(p.src_pitch == 16);
  CHECK(p.rows == 4);
  // A source pitch of 2^30 fp32 elements = 2^32 bytes > 2^31 - 1: two rows, each its own cudaMemcpyAsync.
  p = plan_copy2d(16, int64_t(1) << 30, 2, 16, 4);
  CHECK(p.kind == CopyPlan::Kind::rows);
  CHECK(p.rows == 2);
  CHECK(p.src_pitch == size_t(1) << 32);
}

TEST_CASE("copy2d: a pitch below the row and byte counts past 64 bits are errors", "[runtime][copy]") {
  CHECK_THROWS_WITH(plan_copy2d(2, 8, 4, 4, 2), Catch::Contains("a row pitch is smaller than the row"));
  CHECK_THROWS_WITH(plan_copy2d(int64_t(1) << 62, int64_t(1) << 62, 1, int64_t(1) << 62, 4),
                    Catch::Contains("overflows 64-bit integers"));
}
