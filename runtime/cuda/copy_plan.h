#pragma once
// How CudaBackend::copy2d moves a block of `rows` rows of `cols` elements from a source with row pitch `src_ld`
// into a destination with row pitch `dst_ld` (pitches and widths in elements; `elem` bytes each). Host-only logic,
// tested without a device (tests/runtime/cuda/copy_plan_test.cc).
//
// - contiguous: both pitches equal the row (or there is one row): ONE cudaMemcpyAsync of rows x cols x elem bytes.
//   This is every plain copy (the local-copy fallback of one-rank collectives, gathers of whole tensors): it must
//   not go through cudaMemcpy2DAsync, which rejects a pitch of 2^31 bytes or more (cudaErrorInvalidPitchValue;
//   cudaDevAttrMaxPitch is 2^31 - 1 on current GPUs) although its rows are contiguous: Llama3 logits at tp 1 are
//   8192 x 128256 x 2 = 2.1e9 bytes, and batch 2 or fp32 logits would have failed.
// - strided: both pitches below the limit: one cudaMemcpy2DAsync (a column slice of a shard, a gather's pieces).
// - rows: a pitch at or above the limit: one cudaMemcpyAsync per row (rows are then few: a row that long is over
//   2 GiB).
// Byte counts are overflow-checked (tptune::Error naming the copy).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "plans/util/checked_math.h"
#include "plans/util/error.h"

namespace tptune::cudabe {

struct CopyPlan {
  enum class Kind { none, contiguous, strided, rows };
  Kind kind = Kind::none;
  size_t bytes = 0;                     // contiguous: everything; otherwise one row's width
  size_t dst_pitch = 0, src_pitch = 0;  // bytes
  size_t rows = 0;
};

// cudaMemcpy2DAsync's largest pitch (cudaDevAttrMaxPitch of Hopper and Blackwell parts: 2^31 - 1 bytes).
inline constexpr int64_t kMaxCopyPitchBytes = (int64_t(1) << 31) - 1;

inline CopyPlan plan_copy2d(int64_t dst_ld, int64_t src_ld, int64_t rows, int64_t cols, int64_t elem) {
  if (rows <= 0 || cols <= 0) return {};
  const int64_t width = checked_mul(cols, elem, "cuda backend: copy2d row bytes");
  if (rows == 1) return {CopyPlan::Kind::contiguous, size_t(width), size_t(width), size_t(width), 1};
  if (dst_ld < cols || src_ld < cols)
    throw Error("cuda backend: copy2d: a row pitch is smaller than the row (" + std::to_string(dst_ld) + " / " +
                std::to_string(src_ld) + " < " + std::to_string(cols) + " elements)");
  if (dst_ld == cols && src_ld == cols)
    return {CopyPlan::Kind::contiguous, size_t(checked_mul(rows, width, "cuda backend: copy2d bytes")), size_t(width),
            size_t(width), 1};
  const int64_t dp = checked_mul(dst_ld, elem, "cuda backend: copy2d pitch");
  const int64_t sp = checked_mul(src_ld, elem, "cuda backend: copy2d pitch");
  checked_mul({rows, std::max(dp, sp)}, "cuda backend: copy2d extent");
  const auto kind = dp > kMaxCopyPitchBytes || sp > kMaxCopyPitchBytes ? CopyPlan::Kind::rows : CopyPlan::Kind::strided;
  return {kind, size_t(width), size_t(dp), size_t(sp), size_t(rows)};
}

}  // namespace tptune::cudabe
