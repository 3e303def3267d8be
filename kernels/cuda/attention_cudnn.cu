// cuDNN fused attention; see attention_cudnn.h. (Work in progress: the operation graph lands in the next commit;
// until then the bf16 entry points throw.)
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/check.h"

namespace tptune::cuda {

struct AttentionPlanCache::Impl {};

AttentionPlanCache::AttentionPlanCache() = default;
AttentionPlanCache::~AttentionPlanCache() = default;
AttentionPlanCache::Impl& AttentionPlanCache::impl() {
  if (!impl_) impl_ = std::make_unique<Impl>();
  return *impl_;
}

namespace detail {

void attention_fwd_cudnn(cudaStream_t, AttentionPlanCache&, const AttentionDims&, const __nv_bfloat16*,
                         const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*, float*) {
  throw std::runtime_error("cuda kernel attention_fwd (bf16): the cuDNN graph is not implemented yet");
}
void attention_bwd_cudnn(cudaStream_t, AttentionPlanCache&, const AttentionDims&, const __nv_bfloat16*,
                         const __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, const float*,
                         const __nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*) {
  throw std::runtime_error("cuda kernel attention_bwd (bf16): the cuDNN graph is not implemented yet");
}

}  // namespace detail
}  // namespace tptune::cuda
