#pragma once
// A caching device allocator: no cudaMalloc per op. Freed blocks go to a free list per rounded size and are handed
// out again; cudaMalloc runs only when no cached block fits (and, on out-of-memory, once more after the cache was
// released back to the driver).
//
// Rounding: sizes round up to 512 bytes below 1 MiB and to 2 MiB blocks above (a step reallocates the same
// scratch sizes over and over, so the free lists hit after the first step; the rounding bounds the waste at
// ~1/2 of a small block and 2 MiB of a large one).
// Stream safety: a block freed while work on the backend's streams may still read it must not be reused before
// that work ends. `free` records one event on each of the streams given to the allocator; `allocate` takes a
// cached block only after its events completed (cudaEventQuery), else it looks further or allocates. Blocks are
// freed by dropping the shared_ptr that `allocate` returns (Buffer owns it).
// Not thread-safe: one allocator per backend, used from the thread that runs the executor.

#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <memory>
#include <vector>

namespace tptune::cudabe {

class DeviceAllocator : public std::enable_shared_from_this<DeviceAllocator> {
 public:
  static std::shared_ptr<DeviceAllocator> create(std::vector<cudaStream_t> streams);
  ~DeviceAllocator();

  // `bytes` of device memory (at least 1), 256-byte aligned (cudaMalloc's alignment). Throws tptune::Error naming
  // `what` on out-of-memory, with the bytes in use and cached.
  std::shared_ptr<void> allocate(size_t bytes, const char* what);

  size_t bytes_in_use() const { return in_use_; }
  size_t bytes_cached() const { return cached_; }
  size_t cuda_mallocs() const { return mallocs_; }  // cudaMalloc calls so far (tests: the cache is hit)

  static size_t rounded(size_t bytes);

 private:
  explicit DeviceAllocator(std::vector<cudaStream_t> streams) : streams_(std::move(streams)) {}
  struct Block {
    void* ptr = nullptr;
    size_t bytes = 0;
    std::vector<cudaEvent_t> events;  // recorded at free, one per stream
  };
  void release(void* ptr, size_t bytes);
  bool ready(const Block& b) const;
  void release_cache();

  std::vector<cudaStream_t> streams_;
  std::multimap<size_t, Block> free_;  // by rounded size
  std::vector<cudaEvent_t> spare_events_;
  size_t in_use_ = 0, cached_ = 0, mallocs_ = 0;
};

}  // namespace tptune::cudabe
