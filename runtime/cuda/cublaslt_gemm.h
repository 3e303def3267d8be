#pragma once
// GEMMs through cuBLASLt, for the CUDA backend's Backend::gemm (runtime/backend.h: row-major C (m, n) = alpha *
// op(A) (m, k) x op(B) (k, n) [+ C]).
//
// Layout. cuBLASLt is column-major; a row-major X (r, c) is the column-major X^T (c, r). So the backend computes
// the column-major C^T (n, m) = op(B)^T op(A)^T: cuBLASLt's first operand is our B (transposed when trans_b is
// false... see cublaslt_gemm.cc), its second our A, M = n, N = m. Transposes are layouts (CUBLAS_OP_T), never
// copies, except where cuBLASLt has no kernel: float8 GEMMs need the "TN" form (cuBLASLt docs, cublasLtMatmul,
// FP8 requirements: A transposed, B not), which here means trans_b and !trans_a; an fp8 operand in the other layout
// is transposed into the workspace first by a byte transpose kernel (fp8_transpose.cu). (torchao does the same with
// its "col-major B" copies for torch._scaled_mm.)
// Types. bf16 x bf16 -> bf16 or fp32; fp32 x fp32 -> fp32 (CUBLAS_COMPUTE_32F, no TF32: the exact-ish reference);
// e4m3 x e4m3 (forward) and e4m3 x e5m2 / e5m2 x e4m3 (gradients) -> bf16 or fp32 with per-tensor scale pointers
// (CUBLASLT_MATMUL_DESC_A_SCALE_POINTER / B_SCALE_POINTER: device fp32 scalars, D = scale_a * scale_b * A B, as
// torch._scaled_mm). Accumulation is fp32 in every case (CUBLAS_COMPUTE_32F); `accumulate` is beta = 1 with C = D.
// Heuristic. The descriptors and the algorithm cuBLASLt's heuristic picks are cached per (m, n, k, storages,
// transposes, accumulate); one workspace (32 MiB, what cuBLAS recommends for Hopper) serves every call.
// Errors: an unsupported combination, or k / a leading dim that float8 cannot take (multiples of 16), throws
// tptune::Error naming the shape and types.

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <tuple>

#include "runtime/backend.h"
#include "runtime/cuda/device_allocator.h"

namespace tptune::cudabe {

class CublasLtGemm {
 public:
  CublasLtGemm(std::shared_ptr<DeviceAllocator> allocator);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  void run(const GemmArgs& g, cudaStream_t stream);
  size_t cached_plans() const { return plans_.size(); }
  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;

 private:
  using Key = std::tuple<int64_t, int64_t, int64_t, int, int, int, bool, bool, bool>;
  struct Plan;
  Plan& plan(const Key& key, const GemmArgs& g);

  cublasLtHandle_t handle_ = nullptr;
  std::shared_ptr<DeviceAllocator> allocator_;
  std::shared_ptr<void> workspace_;
  // An fp8 operand transposed for the TN form: a workspace that grows to the largest operand seen.
  struct TransposeBuffer {
    std::shared_ptr<void> data;
    size_t bytes = 0;
    // The (cols, rows) transpose of the byte matrix `src` (rows, cols), written on `stream` into the workspace.
    void* transposed(DeviceAllocator& allocator, cudaStream_t stream, const void* src, int64_t rows, int64_t cols);
  };
  TransposeBuffer transpose_a_, transpose_b_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

// A byte matrix transpose: dst (cols, rows) = src (rows, cols)^T, row-major, stream-ordered (fp8_transpose.cu).
void transpose_bytes(cudaStream_t stream, const void* src, void* dst, int64_t rows, int64_t cols);

}  // namespace tptune::cudabe
