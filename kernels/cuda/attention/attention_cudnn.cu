// cuDNN's fused flash attention (bf16) through the cuDNN 9 backend API; see attention_cudnn.h.
//
// The operation graphs are those cudnn-frontend's SDPA nodes build for cuDNN >= 9.10 (include/cudnn_frontend/node/
// scaled_dot_product_flash_attention.h and utils/attn_score_modifiers.h, v1.12), for our layouts:
// q/o/d_o (b, s, h*d) are the 4-D tensors [b, h, s, d] with strides {s*h*d, d, h*d, 1}; k/v [b, hk, s, d] with
// strides {s*hk*d, d, hk*d, 1}, given to the matmuls transposed (KT, VT: the last two dims and strides swapped);
// the softmax statistics [b, h, s, 1] are our lse (b, h, s). cuDNN recognizes these graphs as its fused flash
// attention (forward: one kernel; backward: one kernel plus the dQ accumulation in the workspace).
//
// Forward:  S = Q KT; S *= scale; causal: S = (row >= col) ? S : -inf (GEN_INDEX, CMP_GE, BINARY_SELECT; cuDNN
//           before 9.10 wants the lowest float instead of -inf); M = rowmax S; E = exp(S - M); Z = rowsum E;
//           Stats = M + log Z; P = E / Z (bf16); O = P V.
// Backward: D = rowsum(dO * O) x 1 (the dropout-free scale), materialized in the workspace; S = scale Q KT;
//           E = exp(mask(S - Stats)) (the probabilities); dV = E^T dO (GQA: per query head, then summed over the
//           group); dS = (dO VT - D) * E * scale; dK = dS^T Q (GQA: summed over the group); dQ = dS K, accumulated
//           in fp32 in the workspace (zeroed first for cuDNN before 9.6, as cudnn-frontend does), then copied to dQ
//           (IDENTITY).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cuda/attention/attention_cudnn.h"
#include "kernels/cuda/device/check.h"

#if defined(TPTUNE_HAVE_CUDNN)
#include "kernels/cuda/attention/cudnn_graph_builder.h"
#endif

namespace tptune::cuda {

#if defined(TPTUNE_HAVE_CUDNN)

namespace {

using cudnn::GraphBuilder;
using cudnn::TensorSpec;

// The UIDs of a graph's real tensors (0 when absent), for the variant pack.
struct Uids {
  int64_t q = 0, k = 0, v = 0, o = 0, stats = 0, d_o = 0, dq = 0, dk = 0, dv = 0, dq_accum = 0;
  int64_t scale = 0, masked_value = 0, one = 0;
  int64_t softmax_sum = 0;  // backward: D = rowsum(dO * O), fp32 in the workspace
};

struct CachedPlan {
  cudnn::Plan plan;
  Uids uids;
  // Backward: the fp32 dQ accumulator and D, placed after the plan's own workspace.
  int64_t dq_accum_bytes = 0, softmax_sum_bytes = 0;
};

using Key = std::tuple<bool /*backward*/, int64_t, int64_t, int64_t, int64_t, int64_t, bool>;

// Layouts of our tensors as cuDNN 4-D tensors.
struct Layout {
  int64_t b, h, hk, s, d;
  TensorSpec q() const { return {{b, h, s, d}, {s * h * d, d, h * d, 1}, CUDNN_DATA_BFLOAT16}; }
  TensorSpec kv() const { return {{b, hk, s, d}, {s * hk * d, d, hk * d, 1}, CUDNN_DATA_BFLOAT16}; }
  TensorSpec kv_t() const { return {{b, hk, d, s}, {s * hk * d, d, 1, hk * d}, CUDNN_DATA_BFLOAT16}; }
  TensorSpec stats() const { return {{b, h, s, 1}, {h * s, s, 1, 1}, CUDNN_DATA_FLOAT}; }
  std::vector<int64_t> scores_dims() const { return {b, h, s, s}; }
  std::vector<int64_t> scores_strides() const { return {h * s * s, s * s, s, 1}; }
  std::vector<int64_t> row_dims() const { return {b, h, s, 1}; }
  std::vector<int64_t> row_strides() const { return {h * s, s, 1, 1}; }
};

// S = scale * Q KT: the shared head of both graphs.
int64_t scaled_scores(GraphBuilder& g, const Layout& l, const Uids& u) {
  const int64_t s = g.virtual_tensor(l.scores_dims(), l.scores_strides());
  g.matmul(u.q, u.k, s);
  const int64_t scaled = g.virtual_like(s);
  g.pointwise(CUDNN_POINTWISE_MUL, s, u.scale, 0, scaled);
  return scaled;
}

// The causal mask (cudnn-frontend's causal_mask: a sliding window with right bound 0, top-left aligned): entries
// with row < col become the pass-by-value `u.masked_value`.
int64_t causal_mask(GraphBuilder& g, int64_t scores, Uids& u) {
  const int64_t row = g.virtual_like(scores, CUDNN_DATA_INT32), col = g.virtual_like(scores, CUDNN_DATA_INT32);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, 0, 0, row, CUDNN_DATA_FLOAT, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, scores, 0, 0, col, CUDNN_DATA_FLOAT, 3);
  const int64_t keep = g.virtual_like(scores, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, col, 0, keep, CUDNN_DATA_BOOLEAN);
  u.masked_value = g.scalar();
  const int64_t masked = g.virtual_like(scores);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, scores, u.masked_value, keep, masked);
  return masked;
}

// The value masked scores get: -inf from cuDNN 9.10 on, the lowest float before (cudnn-frontend's
// get_negative_inf_value).
float masked_score_value() {
  return cudnnGetVersion() >= 91000 ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::lowest();
}

// The real tensors both graphs open with, in this order (their UIDs 1 to 4): Q, K (as KT), V laid out as `v` (the
// forward's P V reads it as is, the backward's dO VT transposed) and O.
Uids q_k_v_o(GraphBuilder& g, const Layout& l, const TensorSpec& v) {
  Uids u;
  u.q = g.tensor(l.q());
  u.k = g.tensor(l.kv_t());
  u.v = g.tensor(v);
  u.o = g.tensor(l.q());
  return u;
}

// The forward graph's tensors and operations (build() turns them into a plan).
Uids add_fwd(GraphBuilder& g, const Layout& l, bool causal) {
  Uids u = q_k_v_o(g, l, l.kv());
  u.stats = g.tensor(l.stats());
  u.scale = g.scalar();
  int64_t s = scaled_scores(g, l, u);
  if (causal) s = causal_mask(g, s, u);
  const int64_t m = g.virtual_tensor(l.row_dims(), l.row_strides());
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, s, m);
  const int64_t centered = g.virtual_like(s), e = g.virtual_like(s);
  g.pointwise(CUDNN_POINTWISE_SUB, s, m, 0, centered);
  g.pointwise(CUDNN_POINTWISE_EXP, centered, 0, 0, e);
  const int64_t z = g.virtual_tensor(l.row_dims(), l.row_strides()), log_z = g.virtual_like(z);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, z);
  g.pointwise(CUDNN_POINTWISE_LOG, z, 0, 0, log_z);
  g.pointwise(CUDNN_POINTWISE_ADD, m, log_z, 0, u.stats);
  const int64_t p = g.virtual_like(s, CUDNN_DATA_BFLOAT16);
  g.pointwise(CUDNN_POINTWISE_DIV, e, z, 0, p);
  g.matmul(p, u.v, u.o);
  return u;
}

// The backward graph's tensors and operations.
Uids add_bwd(GraphBuilder& g, const Layout& l, bool causal) {
  Uids u = q_k_v_o(g, l, l.kv_t());
  u.d_o = g.tensor(l.q());
  u.stats = g.tensor(l.stats());
  u.dq = g.tensor(l.q());
  u.dk = g.tensor(l.kv());
  u.dv = g.tensor(l.kv());
  u.dq_accum = g.tensor({{l.b, l.h, l.s, l.d}, {l.h * l.s * l.d, l.s * l.d, l.d, 1}, CUDNN_DATA_FLOAT});
  u.softmax_sum = g.tensor(l.stats());
  u.scale = g.scalar();
  u.one = g.scalar();

  // D = rowsum(dO * O), times 1 (no dropout), into the workspace.
  const int64_t d_o_o = g.virtual_tensor({l.b, l.h, l.s, l.d}, {l.h * l.s * l.d, l.s * l.d, l.h * l.d, 1});
  g.pointwise(CUDNN_POINTWISE_MUL, u.d_o, u.o, 0, d_o_o);
  const int64_t d_sum = g.virtual_tensor(l.row_dims(), l.row_strides());
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, d_o_o, d_sum);
  g.pointwise(CUDNN_POINTWISE_MUL, d_sum, u.one, 0, u.softmax_sum);

  // E = exp(mask(S - Stats)): the probabilities.
  const int64_t s = scaled_scores(g, l, u);
  int64_t centered = g.virtual_like(s);
  g.pointwise(CUDNN_POINTWISE_SUB, s, u.stats, 0, centered);
  if (causal) centered = causal_mask(g, centered, u);
  const int64_t e = g.virtual_like(s);
  g.pointwise(CUDNN_POINTWISE_EXP, centered, 0, 0, e);

  // Transposed [b, h, s_kv, s_q] views of a score-shaped tensor, in bf16, for the E^T dO and dS^T Q products.
  const std::vector<int64_t> t_strides = {l.h * l.s * l.s, l.s * l.s, 1, l.s};
  const bool gqa = l.h != l.hk;
  const std::vector<int64_t> per_head_dims = {l.b, l.h, l.s, l.d},
                             per_head_strides = {l.h * l.s * l.d, l.s * l.d, l.d, 1};
  // out = lhs x rhs, summed over each kv head's query heads when GQA.
  auto product_into = [&](int64_t lhs, int64_t rhs, int64_t out) {
    if (!gqa) {
      g.matmul(lhs, rhs, out);
      return;
    }
    const int64_t per_head = g.virtual_tensor(per_head_dims, per_head_strides, CUDNN_DATA_BFLOAT16);
    g.matmul(lhs, rhs, per_head);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, per_head, out);
  };
  const int64_t e_t = g.virtual_tensor(l.scores_dims(), t_strides, CUDNN_DATA_BFLOAT16);
  g.reshape(e, e_t);
  product_into(e_t, u.d_o, u.dv);

  // dS = (dO VT - D) * E * scale.
  const int64_t dp = g.virtual_tensor(l.scores_dims(), l.scores_strides());
  g.matmul(u.d_o, u.v, dp);
  const int64_t dp2 = g.virtual_like(s), dp3 = g.virtual_like(s), ds = g.virtual_like(s);
  g.pointwise(CUDNN_POINTWISE_SUB, dp, u.softmax_sum, 0, dp2);
  g.pointwise(CUDNN_POINTWISE_MUL, dp2, e, 0, dp3);
  g.pointwise(CUDNN_POINTWISE_MUL, dp3, u.scale, 0, ds);
  const int64_t ds_t = g.virtual_tensor(l.scores_dims(), t_strides, CUDNN_DATA_BFLOAT16);
  g.reshape(ds, ds_t);
  product_into(ds_t, u.q, u.dk);

  // dQ = dS K (K as the un-transposed view of KT), accumulated in fp32, then copied out.
  const TensorSpec kt = l.kv_t();
  const int64_t k = g.virtual_tensor({kt.dims[0], kt.dims[1], kt.dims[3], kt.dims[2]},
                                     {kt.strides[0], kt.strides[1], kt.strides[3], kt.strides[2]});
  g.reshape(u.k, k);
  g.matmul(ds, k, u.dq_accum);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, u.dq_accum, 0, 0, u.dq);
  return u;
}

CachedPlan build_fwd(cudnnHandle_t handle, const Layout& l, bool causal) {
  GraphBuilder g(handle, "attention_fwd (cuDNN)");
  const Uids u = add_fwd(g, l, causal);
  return {g.build(), u, 0, 0};
}

CachedPlan build_bwd(cudnnHandle_t handle, const Layout& l, bool causal) {
  GraphBuilder g(handle, "attention_bwd (cuDNN)");
  const Uids u = add_bwd(g, l, causal);
  return {g.build(), u, l.b * l.h * l.s * l.d * int64_t(sizeof(float)), l.b * l.h * l.s * int64_t(sizeof(float))};
}

void check_shape(const AttentionDims& s, const char* kernel) {
  require(s.batch > 0 && s.seq > 0 && s.n_heads > 0 && s.n_kv_heads > 0 && s.head_dim > 0, kernel,
          "dims must be positive");
  require(s.n_heads % s.n_kv_heads == 0, kernel, "n_heads must be a multiple of n_kv_heads");
  require(s.head_dim % 8 == 0 && s.head_dim <= 256, kernel,
          "cuDNN fused attention needs head_dim a multiple of 8 and at most 256, got " + std::to_string(s.head_dim));
}

}  // namespace

struct AttentionPlanCache::Impl {
  cudnnHandle_t handle = nullptr;
  std::map<Key, CachedPlan> plans;
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;

  Impl() { cudnn::check(cudnnCreate(&handle), "attention (cuDNN)", "cudnnCreate"); }
  ~Impl() {
    if (workspace) cudaFree(workspace);
    plans.clear();  // plans before the handle they were built with
    if (handle) cudnnDestroy(handle);
  }

  const CachedPlan& plan(bool backward, const AttentionDims& s) {
    const Key key{backward, s.batch, s.seq, s.n_heads, s.n_kv_heads, s.head_dim, s.causal};
    auto it = plans.find(key);
    if (it == plans.end()) {
      const Layout l{s.batch, s.n_heads, s.n_kv_heads, s.seq, s.head_dim};
      it = plans.emplace(key, backward ? build_bwd(handle, l, s.causal) : build_fwd(handle, l, s.causal)).first;
    }
    return it->second;
  }

  // A workspace of at least `bytes` (grown, never shrunk; cudaFree synchronizes, so no running plan loses it).
  char* workspace_of(int64_t bytes, const char* kernel) {
    if (bytes > workspace_bytes) {
      if (workspace) check_cuda(cudaFree(workspace), kernel, "cudaFree (workspace)");
      workspace = nullptr;
      workspace_bytes = 0;
      check_cuda(cudaMalloc(&workspace, size_t(bytes)), kernel, "cudaMalloc (workspace)");
      workspace_bytes = bytes;
    }
    return static_cast<char*>(workspace);
  }

  // `alloc` (the backend's caching allocator) gives this call's workspace, held until the execution was issued;
  // without one, the cache's own grown workspace.
  void execute(cudaStream_t stream, const ScratchAllocator& alloc, const CachedPlan& p,
               const std::vector<std::pair<int64_t, void*>>& tensors, const char* kernel) {
    const auto aligned = [](int64_t bytes) { return (bytes + 255) / 256 * 256; };
    const int64_t plan_ws = aligned(p.plan.workspace_bytes), dq_ws = aligned(p.dq_accum_bytes);
    const int64_t ws_bytes = std::max<int64_t>(plan_ws + dq_ws + p.softmax_sum_bytes, 1);
    const std::shared_ptr<void> call_ws = alloc ? cuda::scratch(alloc, stream, size_t(ws_bytes), kernel) : nullptr;
    char* ws = call_ws ? static_cast<char*>(call_ws.get()) : workspace_of(ws_bytes, kernel);
    std::vector<int64_t> uids;
    std::vector<void*> ptrs;
    for (const auto& [uid, ptr] : tensors) {
      if (uid == 0) continue;
      uids.push_back(uid);
      ptrs.push_back(ptr);
    }
    if (p.dq_accum_bytes > 0) {
      if (cudnnGetVersion() < 90600)  // later versions zero it themselves (cudnn-frontend)
        check_cuda(cudaMemsetAsync(ws + plan_ws, 0, size_t(p.dq_accum_bytes), stream), kernel,
                   "cudaMemsetAsync (dQ accumulator)");
      uids.push_back(p.uids.dq_accum);
      ptrs.push_back(ws + plan_ws);
    }
    if (p.softmax_sum_bytes > 0) {
      uids.push_back(p.uids.softmax_sum);
      ptrs.push_back(ws + plan_ws + dq_ws);
    }
    cudnn::check(cudnnSetStream(handle, stream), kernel, "cudnnSetStream");
    cudnn::Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, kernel);
    void* ws_ptr = ws;
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, int64_t(uids.size()), uids.data());
    pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, int64_t(ptrs.size()), ptrs.data());
    pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws_ptr);
    pack.finalize();
    cudnn::check(cudnnBackendExecute(handle, p.plan.plan->get(), pack.get()), kernel, "cudnnBackendExecute");
  }
};

int64_t cudnn_version() { return int64_t(cudnnGetVersion()); }

namespace detail {

int64_t attention_graph_self_check(const AttentionDims& s, bool backward) {
  const char* kernel = backward ? "attention_bwd (cuDNN graph check)" : "attention_fwd (cuDNN graph check)";
  check_shape(s, kernel);
  GraphBuilder g(nullptr, kernel);
  const Layout l{s.batch, s.n_heads, s.n_kv_heads, s.seq, s.head_dim};
  backward ? add_bwd(g, l, s.causal) : add_fwd(g, l, s.causal);
  g.finalize_graph();
  return g.operation_count();
}

void attention_fwd_cudnn(cudaStream_t stream, AttentionPlanCache& cache, const AttentionDims& s, const __nv_bfloat16* q,
                         const __nv_bfloat16* k, const __nv_bfloat16* v, __nv_bfloat16* o, float* lse) {
  const char* kernel = "attention_fwd (cuDNN)";
  check_shape(s, kernel);
  auto& impl = cache.impl();
  const CachedPlan& p = impl.plan(false, s);
  // Pass-by-value scalars: host memory read when cudnnBackendExecute runs.
  float scale = float(1.0 / std::sqrt(double(s.head_dim))), masked = masked_score_value();
  impl.execute(stream, cache.scratch(), p,
               {{p.uids.q, const_cast<__nv_bfloat16*>(q)},
                {p.uids.k, const_cast<__nv_bfloat16*>(k)},
                {p.uids.v, const_cast<__nv_bfloat16*>(v)},
                {p.uids.o, o},
                {p.uids.stats, lse},
                {p.uids.scale, &scale},
                {p.uids.masked_value, &masked}},
               kernel);
}

void attention_bwd_cudnn(cudaStream_t stream, AttentionPlanCache& cache, const AttentionDims& s, const __nv_bfloat16* q,
                         const __nv_bfloat16* k, const __nv_bfloat16* v, const __nv_bfloat16* o, const float* lse,
                         const __nv_bfloat16* d_o, __nv_bfloat16* dq, __nv_bfloat16* dk, __nv_bfloat16* dv) {
  const char* kernel = "attention_bwd (cuDNN)";
  check_shape(s, kernel);
  auto& impl = cache.impl();
  const CachedPlan& p = impl.plan(true, s);
  float scale = float(1.0 / std::sqrt(double(s.head_dim))), masked = masked_score_value(), one = 1.0f;
  impl.execute(stream, cache.scratch(), p,
               {{p.uids.q, const_cast<__nv_bfloat16*>(q)},
                {p.uids.k, const_cast<__nv_bfloat16*>(k)},
                {p.uids.v, const_cast<__nv_bfloat16*>(v)},
                {p.uids.o, const_cast<__nv_bfloat16*>(o)},
                {p.uids.stats, const_cast<float*>(lse)},
                {p.uids.d_o, const_cast<__nv_bfloat16*>(d_o)},
                {p.uids.dq, dq},
                {p.uids.dk, dk},
                {p.uids.dv, dv},
                {p.uids.scale, &scale},
                {p.uids.masked_value, &masked},
                {p.uids.one, &one}},
               kernel);
}

}  // namespace detail

#else  // built without cuDNN: the cache exists (the runtime holds one either way), bf16 attention throws.

struct AttentionPlanCache::Impl {};
int64_t cudnn_version() { return 0; }

namespace detail {
int64_t attention_graph_self_check(const AttentionDims&, bool) {
  throw std::runtime_error("cuda kernel attention (cuDNN graph check): built without cuDNN");
}
void attention_fwd_cudnn(cudaStream_t, AttentionPlanCache&, const AttentionDims&, const __nv_bfloat16*,
                         const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*, float*) {
  throw std::runtime_error(
      "cuda kernel attention_fwd (bf16): built without cuDNN (cudnn_graph.h / libcudnn not found)");
}
void attention_bwd_cudnn(cudaStream_t, AttentionPlanCache&, const AttentionDims&, const __nv_bfloat16*,
                         const __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, const float*,
                         const __nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*) {
  throw std::runtime_error(
      "cuda kernel attention_bwd (bf16): built without cuDNN (cudnn_graph.h / libcudnn not found)");
}
}  // namespace detail

#endif

// The cache, with or without cuDNN (its Impl above): made empty, its Impl on first use.
AttentionPlanCache::AttentionPlanCache(AttentionImpl bf16, ScratchAllocator scratch)
    : bf16_(bf16), scratch_(std::move(scratch)) {}
AttentionPlanCache::~AttentionPlanCache() = default;
AttentionPlanCache::Impl& AttentionPlanCache::impl() {
  if (!impl_) impl_ = std::make_unique<Impl>();
  return *impl_;
}

}  // namespace tptune::cuda
