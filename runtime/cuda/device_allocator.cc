#include "runtime/cuda/device_allocator.h"

#include <fmt/format.h>

#include "plans/util/error.h"
#include "runtime/cuda/cuda_check.h"

namespace tptune::cudabe {

std::shared_ptr<DeviceAllocator> DeviceAllocator::create(std::vector<cudaStream_t> streams) {
  return std::shared_ptr<DeviceAllocator>(new DeviceAllocator(std::move(streams)));
}

size_t DeviceAllocator::rounded(size_t bytes) {
  constexpr size_t small = 512, large = size_t(2) << 20, threshold = size_t(1) << 20;
  if (bytes == 0) bytes = 1;
  if (bytes < threshold) return (bytes + small - 1) / small * small;
  return (bytes + large - 1) / large * large;
}

bool DeviceAllocator::ready(const Block& b) const {
  for (cudaEvent_t e : b.events) {
    cudaError_t s = cudaEventQuery(e);
    if (s == cudaErrorNotReady) return false;
    check(s, "allocate", "cudaEventQuery");
  }
  return true;
}

std::shared_ptr<void> DeviceAllocator::allocate(size_t bytes, const char* what) {
  const size_t size = rounded(bytes);
  // Exact size class first (the common case: the same scratch every step); a larger cached block is not split.
  auto [lo, hi] = free_.equal_range(size);
  for (auto it = lo; it != hi; ++it) {
    if (!ready(it->second)) continue;
    Block b = std::move(it->second);
    free_.erase(it);
    spare_events_.insert(spare_events_.end(), b.events.begin(), b.events.end());
    cached_ -= size;
    in_use_ += size;
    auto self = shared_from_this();
    return std::shared_ptr<void>(b.ptr, [self, size](void* p) { self->release(p, size); });
  }
  void* p = nullptr;
  cudaError_t s = cudaMalloc(&p, size);
  if (s == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear the sticky-free error state of this call
    release_cache();
    s = cudaMalloc(&p, size);
  }
  if (s != cudaSuccess) {
    cudaGetLastError();
    throw Error(fmt::format("cuda backend: {}: cudaMalloc of {} bytes failed: {} ({} bytes in use, {} cached)", what,
                            size, cudaGetErrorString(s), in_use_, cached_));
  }
  ++mallocs_;
  in_use_ += size;
  auto self = shared_from_this();
  return std::shared_ptr<void>(p, [self, size](void* q) { self->release(q, size); });
}

void DeviceAllocator::release(void* ptr, size_t size) {
  Block b{ptr, size, {}};
  // Work already queued on any stream may still use the block: remember where each stream is now. A deleter must
  // not throw; a failing event call leaves the block out of the cache (it is freed at once after a device sync).
  bool ok = true;
  for (cudaStream_t st : streams_) {
    cudaEvent_t e = nullptr;
    if (!spare_events_.empty()) {
      e = spare_events_.back();
      spare_events_.pop_back();
    } else if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
      ok = false;
      break;
    }
    if (cudaEventRecord(e, st) != cudaSuccess) {
      cudaEventDestroy(e);
      ok = false;
      break;
    }
    b.events.push_back(e);
  }
  in_use_ -= size;
  if (!ok) {
    cudaDeviceSynchronize();
    for (cudaEvent_t e : b.events) cudaEventDestroy(e);
    cudaFree(ptr);
    return;
  }
  cached_ += size;
  free_.emplace(size, std::move(b));
}

void DeviceAllocator::release_cache() {
  cudaDeviceSynchronize();
  for (auto& [size, b] : free_) {
    for (cudaEvent_t e : b.events) cudaEventDestroy(e);
    cudaFree(b.ptr);
  }
  free_.clear();
  cached_ = 0;
}

DeviceAllocator::~DeviceAllocator() {
  release_cache();
  for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
}

}  // namespace tptune::cudabe
