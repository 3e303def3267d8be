// cuBLASLt GEMMs (see cublaslt_gemm.h for the layout mapping and the float8 rules).
#include "runtime/cuda/cublaslt_gemm.h"

#include <fmt/format.h>

#include "plans/util/error.h"
#include "runtime/cuda/cuda_check.h"

namespace tptune::cudabe {
namespace {

bool is_fp8(Storage s) { return s == Storage::fp8_e4m3 || s == Storage::fp8_e5m2; }

cudaDataType_t data_type(Storage s) {
  switch (s) {
    case Storage::f32:
      return CUDA_R_32F;
    case Storage::bf16:
      return CUDA_R_16BF;
    case Storage::fp8_e4m3:
      return CUDA_R_8F_E4M3;
    case Storage::fp8_e5m2:
      return CUDA_R_8F_E5M2;
    case Storage::i32:
      break;
  }
  throw Error("cuda backend: gemm: int32 operands");
}

std::string describe(const GemmArgs& g) {
  return fmt::format("m {}, n {}, k {}, {} x {} -> {}, trans_a {}, trans_b {}", g.m, g.n, g.k, to_string(g.a.storage),
                     to_string(g.b.storage), to_string(g.c.storage), g.trans_a, g.trans_b);
}

}  // namespace

struct CublasLtGemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A (our B), B (our A), C = D
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

CublasLtGemm::CublasLtGemm(std::shared_ptr<DeviceAllocator> allocator) : allocator_(std::move(allocator)) {
  check(cublasLtCreate(&handle_), "gemm", "cublasLtCreate");
  workspace_ = allocator_->allocate(kWorkspaceBytes, "cuBLASLt workspace");
}

CublasLtGemm::~CublasLtGemm() {
  plans_.clear();
  if (handle_) cublasLtDestroy(handle_);
}

CublasLtGemm::Plan& CublasLtGemm::plan(const Key& key, const GemmArgs& g) {
  if (auto it = plans_.find(key); it != plans_.end()) return *it->second;
  const std::string ctx = describe(g);
  auto p = std::make_unique<Plan>();
  check(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "gemm", "cublasLtMatmulDescCreate", ctx);
  const cublasOperation_t op_a = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our B
  const cublasOperation_t op_b = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)), "gemm",
        "cublasLtMatmulDescSetAttribute(TRANSA)", ctx);
  check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)), "gemm",
        "cublasLtMatmulDescSetAttribute(TRANSB)", ctx);
  if (is_fp8(g.a.storage)) {
    // Device scale pointers (set again on every call: the scalars live in the Program's tensors).
    const void* sa = g.scale_b;
    const void* sb = g.scale_a;
    check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof(sa)), "gemm",
          "cublasLtMatmulDescSetAttribute(A_SCALE_POINTER)", ctx);
    check(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof(sb)), "gemm",
          "cublasLtMatmulDescSetAttribute(B_SCALE_POINTER)", ctx);
  }
  // Column-major layouts (see the header): cuBLASLt A = our B, stored (n, k) row-major when trans_b else (k, n).
  const uint64_t n = uint64_t(g.n), m = uint64_t(g.m), k = uint64_t(g.k);
  check(g.trans_b ? cublasLtMatrixLayoutCreate(&p->a, data_type(g.b.storage), k, n, int64_t(k))
                  : cublasLtMatrixLayoutCreate(&p->a, data_type(g.b.storage), n, k, int64_t(n)),
        "gemm", "cublasLtMatrixLayoutCreate(B)", ctx);
  check(g.trans_a ? cublasLtMatrixLayoutCreate(&p->b, data_type(g.a.storage), m, k, int64_t(m))
                  : cublasLtMatrixLayoutCreate(&p->b, data_type(g.a.storage), k, m, int64_t(k)),
        "gemm", "cublasLtMatrixLayoutCreate(A)", ctx);
  check(cublasLtMatrixLayoutCreate(&p->c, data_type(g.c.storage), n, m, int64_t(n)), "gemm",
        "cublasLtMatrixLayoutCreate(C)", ctx);

  cublasLtMatmulPreference_t pref = nullptr;
  check(cublasLtMatmulPreferenceCreate(&pref), "gemm", "cublasLtMatmulPreferenceCreate", ctx);
  const size_t ws = kWorkspaceBytes;
  cublasStatus_t s =
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulAlgoGetHeuristic(handle_, p->desc, p->a, p->b, p->c, p->c, pref, 1, &result, &returned);
  cublasLtMatmulPreferenceDestroy(pref);
  check(s, "gemm", "cublasLtMatmulAlgoGetHeuristic", ctx);
  if (returned == 0) throw_error("gemm", "cublasLtMatmulAlgoGetHeuristic", "no algorithm for " + ctx);
  p->algo = result.algo;
  return *plans_.emplace(key, std::move(p)).first->second;
}

void* CublasLtGemm::TransposeBuffer::transposed(DeviceAllocator& allocator, cudaStream_t stream, const void* src,
                                                int64_t rows, int64_t cols) {
  const size_t need = size_t(rows * cols);
  if (need > bytes) data = allocator.allocate(need, "gemm fp8 transpose"), bytes = need;
  transpose_bytes(stream, src, data.get(), rows, cols);
  return data.get();
}

void CublasLtGemm::run(const GemmArgs& in, cudaStream_t stream) {
  GemmArgs g = in;
  if (g.m <= 0 || g.n <= 0) return;
  const bool fp8 = is_fp8(g.a.storage) || is_fp8(g.b.storage);
  if (fp8) {
    if (!is_fp8(g.a.storage) || !is_fp8(g.b.storage))
      throw_error("gemm", "float8", "both operands must be float8 (" + describe(g) + ")");
    if (g.a.storage == Storage::fp8_e5m2 && g.b.storage == Storage::fp8_e5m2)
      throw_error("gemm", "float8", "e5m2 x e5m2 has no cuBLASLt kernel (" + describe(g) + ")");
    if (!g.scale_a || !g.scale_b) throw_error("gemm", "float8", "operands need their scales (" + describe(g) + ")");
    if (g.k % 16 != 0 || g.m % 16 != 0 || g.n % 16 != 0)
      throw_error("gemm", "float8", "m, n and k must be multiples of 16 (" + describe(g) + ")");
    if (g.c.storage != Storage::bf16 && g.c.storage != Storage::f32)
      throw_error("gemm", "float8", "the output must be bf16 or fp32 (" + describe(g) + ")");
    // The TN form (see the header): transpose an operand that is in the other layout into a workspace copy.
    if (!g.trans_b) {  // B stored (k, n) -> (n, k)
      g.b.ptr = transpose_b_.transposed(*allocator_, stream, g.b.ptr, g.k, g.n);
      g.trans_b = true;
    }
    if (g.trans_a) {  // A stored (k, m) -> (m, k)
      g.a.ptr = transpose_a_.transposed(*allocator_, stream, g.a.ptr, g.k, g.m);
      g.trans_a = false;
    }
  } else {
    if (g.scale_a || g.scale_b) throw_error("gemm", "scales", "only float8 operands take scales (" + describe(g) + ")");
    if (g.a.storage != g.b.storage)
      throw_error("gemm", "types", "operands of different storages (" + describe(g) + ")");
    if (g.a.storage == Storage::f32 && g.c.storage != Storage::f32)
      throw_error("gemm", "types", "fp32 operands give an fp32 output (" + describe(g) + ")");
  }
  if (g.k <= 0) {  // C = 0 (+ C): nothing to multiply
    if (!g.accumulate)
      check(cudaMemsetAsync(g.c.ptr, 0, size_t(g.m * g.n) * size_t(storage_bytes(g.c.storage)), stream), "gemm",
            "cudaMemsetAsync");
    return;
  }
  const Key key{g.m,       g.n,       g.k,         int(g.a.storage), int(g.b.storage), int(g.c.storage),
                g.trans_a, g.trans_b, g.accumulate};
  Plan& p = plan(key, g);
  if (fp8) {
    const void* sa = g.scale_b;
    const void* sb = g.scale_a;
    check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof(sa)), "gemm",
          "cublasLtMatmulDescSetAttribute(A_SCALE_POINTER)", describe(g));
    check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof(sb)), "gemm",
          "cublasLtMatmulDescSetAttribute(B_SCALE_POINTER)", describe(g));
  }
  const float alpha = 1.0f, beta = g.accumulate ? 1.0f : 0.0f;
  check(cublasLtMatmul(handle_, p.desc, &alpha, g.b.ptr, p.a, g.a.ptr, p.b, &beta, g.c.ptr, p.c, g.c.ptr, p.c, &p.algo,
                       workspace_.get(), kWorkspaceBytes, stream),
        "gemm", "cublasLtMatmul", describe(g));
}

}  // namespace tptune::cudabe
