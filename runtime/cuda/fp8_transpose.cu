// Byte transpose for float8 GEMM operands (cublaslt_gemm.h): 32x32 tiles through shared memory, so that reads and
// writes are both coalesced. One byte per element (e4m3 / e5m2 storage).
#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/cuda/cublaslt_gemm.h"
#include "runtime/cuda/cuda_check.h"

namespace tptune::cudabe {
namespace {

constexpr int kTile = 32;

__global__ void transpose_u8(const uint8_t* __restrict__ src, uint8_t* __restrict__ dst, int64_t rows, int64_t cols) {
  __shared__ uint8_t tile[kTile][kTile + 1];
  const int64_t c0 = int64_t(blockIdx.x) * kTile, r0 = int64_t(blockIdx.y) * kTile;
  for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
    const int64_t r = r0 + i, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[i][threadIdx.x] = src[r * cols + c];
  }
  __syncthreads();
  for (int i = threadIdx.y; i < kTile; i += blockDim.y) {
    const int64_t c = c0 + i, r = r0 + threadIdx.x;  // dst row c, column r
    if (r < rows && c < cols) dst[c * rows + r] = tile[threadIdx.x][i];
  }
}

}  // namespace

void transpose_bytes(cudaStream_t stream, const void* src, void* dst, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  const int64_t gx = (cols + kTile - 1) / kTile, gy = (rows + kTile - 1) / kTile;
  if (gy > 65535) throw_error("gemm", "fp8 transpose", "more than 65535*32 rows");
  dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy)), block(kTile, 8);
  transpose_u8<<<grid, block, 0, stream>>>(static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), rows, cols);
  check(cudaGetLastError(), "gemm", "fp8 transpose launch");
}

}  // namespace tptune::cudabe
