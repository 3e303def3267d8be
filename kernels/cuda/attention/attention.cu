// The dispatching attention launchers; see attention.h: fp32 runs the reference kernels, bf16 runs cuDNN (or the
// reference kernels when the cache asks for them).
#include <type_traits>

#include "kernels/cuda/attention/attention.h"
#include "kernels/cuda/attention/attention_cudnn.h"

namespace tptune::cuda {

template <class T>
void attention_fwd(cudaStream_t stream, AttentionPlanCache& cache, const AttentionDims& s, const T* q, const T* k,
                   const T* v, T* o, float* lse) {
  if constexpr (std::is_same_v<T, float>)
    attention_fwd_reference(stream, s, q, k, v, o, lse);
  else if (cache.bf16_impl() == AttentionImpl::reference)
    attention_fwd_reference(stream, s, q, k, v, o, lse);
  else
    detail::attention_fwd_cudnn(stream, cache, s, q, k, v, o, lse);
}

template <class T>
void attention_bwd(cudaStream_t stream, AttentionPlanCache& cache, const AttentionDims& s, const T* q, const T* k,
                   const T* v, const T* o, const float* lse, const T* d_o, T* dq, T* dk, T* dv) {
  if constexpr (std::is_same_v<T, float>)
    attention_bwd_reference(stream, s, q, k, v, o, lse, d_o, dq, dk, dv, cache.scratch());
  else if (cache.bf16_impl() == AttentionImpl::reference)
    attention_bwd_reference(stream, s, q, k, v, o, lse, d_o, dq, dk, dv, cache.scratch());
  else
    detail::attention_bwd_cudnn(stream, cache, s, q, k, v, o, lse, d_o, dq, dk, dv);
}

#define TPTUNE_INSTANTIATE(T)                                                                                 \
  template void attention_fwd<T>(cudaStream_t, AttentionPlanCache&, const AttentionDims&, const T*, const T*, \
                                 const T*, T*, float*);                                                       \
  template void attention_bwd<T>(cudaStream_t, AttentionPlanCache&, const AttentionDims&, const T*, const T*, \
                                 const T*, const T*, const float*, const T*, T*, T*, T*);
TPTUNE_INSTANTIATE(float)
TPTUNE_INSTANTIATE(__nv_bfloat16)

}  // namespace tptune::cuda
