#pragma once
// cuDNN's fused flash attention for bf16 (private to kernels/cuda/; the public entry points are attention_fwd/bwd of
// attention.h). Implemented in attention_cudnn.cu with the cuDNN 9 backend API (cudnn_graph.h); each (shape,
// direction) builds one operation graph, finalizes the first engine configuration cuDNN's heuristics offer that
// supports it, and caches the execution plan in the AttentionPlanCache. Throws std::runtime_error naming the
// kernel and cuDNN's status and message when no engine supports the graph, or when built without cuDNN.

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/attention/attention.h"

namespace tptune::cuda::detail {

void attention_fwd_cudnn(cudaStream_t stream, AttentionPlanCache& cache, const AttentionDims& s, const __nv_bfloat16* q,
                         const __nv_bfloat16* k, const __nv_bfloat16* v, __nv_bfloat16* o, float* lse);
void attention_bwd_cudnn(cudaStream_t stream, AttentionPlanCache& cache, const AttentionDims& s, const __nv_bfloat16* q,
                         const __nv_bfloat16* k, const __nv_bfloat16* v, const __nv_bfloat16* o, const float* lse,
                         const __nv_bfloat16* d_o, __nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv);

// Builds the forward (or backward) operation graph for `s` and finalizes every tensor and operation descriptor and
// the operation graph, without a device or a cuDNN handle: cuDNN checks each operation's tensors (ranks, dims,
// broadcasting, types) when it finalizes it. Returns the number of operations. Engine selection and the plan need a
// device and are not checked. For the host tests (tests/kernels/cuda/attention_graph_host_test.cc).
int64_t attention_graph_self_check(const AttentionDims& s, bool backward);

}  // namespace tptune::cuda::detail
