// Kernel scratch routing (kernels/cuda/device/scratch.h), on the host: with an allocator given, scratch() takes the
// memory from it and calls no CUDA allocation; the attention cache keeps the allocator it was made with, for cuDNN's
// workspace and the reference backward's D. (The CUDA backend passes its caching allocator; on a device,
// tests/runtime/cuda/cuda_backend_test.cc checks that a second norm backward then allocates nothing.)
#include <catch2/catch.hpp>
#include <vector>

#include "kernels/cuda/attention/attention.h"
#include "kernels/cuda/device/scratch.h"

using namespace tptune::cuda;

TEST_CASE("kernel scratch comes from the allocator given, sized at least one byte", "[kernels][scratch]") {
  std::vector<std::pair<size_t, std::string>> calls;
  int released = 0;
  ScratchAllocator alloc = [&](size_t bytes, const char* what) {
    calls.emplace_back(bytes, what);
    return std::shared_ptr<void>(new char[bytes], [&](void* p) {
      ++released;
      delete[] static_cast<char*>(p);
    });
  };
  {
    auto a = scratch(alloc, nullptr, 4096, "rmsnorm_bwd");
    auto b = scratch(alloc, nullptr, 0, "embedding_bwd");  // an empty request still gets a valid block
    CHECK(a != nullptr);
    CHECK(b != nullptr);
  }
  REQUIRE(calls.size() == 2);
  CHECK(calls[0] == std::pair<size_t, std::string>{4096, "rmsnorm_bwd"});
  CHECK(calls[1] == std::pair<size_t, std::string>{1, "embedding_bwd"});
  CHECK(released == 2);  // dropped at the end of the call: the backend's allocator then delays reuse by events

  AttentionPlanCache cache(AttentionImpl::reference, alloc);
  REQUIRE(cache.scratch());
  cache.scratch()(64, "attention_bwd_reference");
  CHECK(calls.back().second == "attention_bwd_reference");
  CHECK_FALSE(AttentionPlanCache().scratch());  // the kernels' tests: stream-ordered scratch from the default pool
}
