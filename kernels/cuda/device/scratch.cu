#include <algorithm>

#include "kernels/cuda/device/check.h"
#include "kernels/cuda/device/scratch.h"

namespace tptune::cuda {

std::shared_ptr<void> scratch(const ScratchAllocator& alloc, cudaStream_t stream, size_t bytes, const char* kernel) {
  bytes = std::max<size_t>(bytes, 1);
  if (alloc) return alloc(bytes, kernel);
  void* p = nullptr;
  check_cuda(cudaMallocAsync(&p, bytes, stream), kernel, "cudaMallocAsync (scratch)");
  // A deleter cannot throw; a failing cudaFreeAsync leaves the error for the next checked call to report.
  return std::shared_ptr<void>(p, [stream](void* q) { cudaFreeAsync(q, stream); });
}

}  // namespace tptune::cuda
