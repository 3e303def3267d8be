#pragma once
// Device scratch of a kernel call: temporary memory for the work the call issues on its stream (the norms'
// backward column partial sums, the embedding backward's sort buffers, the reference attention's D, cuDNN's
// workspace).
//
// Who provides it: the CUDA backend hands its caching allocator (runtime/cuda/device_allocator.h), whose blocks are
// reused only after the streams' work that used them has ended and are never given back at a synchronize; so a
// step allocates no device memory after the first, and nothing here calls cudaMalloc / cudaFree (cudaFree
// synchronizes the device, which can deadlock beside NCCL kernels waiting for a peer). An empty ScratchAllocator
// means stream-ordered allocations from the device's default memory pool (cudaMallocAsync / cudaFreeAsync on the
// stream): what the kernels' own tests use, and correct, but that pool returns its memory to the driver at every
// synchronize unless its release threshold is raised.
//
// Contract of an allocator: `bytes` (>= 1) of device memory, 256-byte aligned, usable by work issued on the
// kernel's stream after the call; dropping the returned pointer after the kernel's work was issued must not let
// another user reuse the memory before that work ends. Failure throws (std::runtime_error or tptune::Error).

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <memory>

namespace tptune::cuda {

using ScratchAllocator = std::function<std::shared_ptr<void>(size_t bytes, const char* what)>;

// `bytes` of scratch from `alloc`, or stream-ordered on `stream` from the default pool when `alloc` is empty (freed
// with cudaFreeAsync on `stream` when the last copy of the pointer is dropped). Throws std::runtime_error naming
// `kernel` when the allocation fails.
std::shared_ptr<void> scratch(const ScratchAllocator& alloc, cudaStream_t stream, size_t bytes, const char* kernel);

}  // namespace tptune::cuda
