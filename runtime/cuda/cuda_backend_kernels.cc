// CudaBackend: the kernels of the Program, dispatched on the storage of their first operand to the launchers of
// kernels/cuda/ (every other operand must have that storage; statistics are fp32, ids int32).
#include <fmt/format.h>

#include <algorithm>
#include <span>
#include <vector>

#include "kernels/cuda/adamw.h"
#include "kernels/cuda/attention/attention.h"
#include "kernels/cuda/bias.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/float8.h"
#include "kernels/cuda/norms.h"
#include "kernels/cuda/rope.h"
#include "plans/util/error.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_dispatch.h"

namespace tptune {

namespace cudabe {
void unsupported_storage(const char* call, Storage s, const char* expected) {
  throw Error(fmt::format("cuda backend: {}: {} storage, expected {}", call, to_string(s), expected));
}
}  // namespace cudabe

using cudabe::as;
using cudabe::floating;
#define T_OF(tag) typename decltype(tag)::type

namespace {
kernels::AttentionDims dims(const AttentionShape& s) {
  return {s.batch, s.seq, s.n_heads, s.n_kv_heads, s.head_dim, s.causal};
}
cuda::RopeDims rope_dims(const RopeShape& s) { return {s.batch, s.seq, s.heads, s.head_dim, s.offset, s.theta}; }
}  // namespace

void CudaBackend::attention_fwd(const AttentionShape& s, DevPtr q, DevPtr k, DevPtr v, DevPtr o, float* lse) {
  constexpr const char* c = "attention_fwd";
  floating(q, c, [&](auto t) {
    using T = T_OF(t);
    cuda::attention_fwd<T>(compute_, *attention_, dims(s), as<T>(q, c), as<T>(k, c), as<T>(v, c), as<T>(o, c), lse);
  });
}

void CudaBackend::attention_bwd(const AttentionShape& s, DevPtr q, DevPtr k, DevPtr v, DevPtr o, const float* lse,
                                DevPtr d_o, DevPtr dq, DevPtr dk, DevPtr dv) {
  constexpr const char* c = "attention_bwd";
  floating(q, c, [&](auto t) {
    using T = T_OF(t);
    cuda::attention_bwd<T>(compute_, *attention_, dims(s), as<T>(q, c), as<T>(k, c), as<T>(v, c), as<T>(o, c), lse,
                           as<T>(d_o, c), as<T>(dq, c), as<T>(dk, c), as<T>(dv, c));
  });
}

namespace {
[[noreturn]] void no_ring_attention(const char* call) {
  throw Error(
      fmt::format("cuda backend: {}: ring attention (context parallelism) runs on the CPU backend only "
                  "(tp-run --backend cpu)",
                  call));
}
void require_mean_over_tokens(const char* call, int64_t tokens, int64_t mean_over) {
  if (mean_over != tokens)
    throw Error(
        fmt::format("cuda backend: {}: a loss divided by {} tokens where the rank holds {} (FSDP or context "
                    "parallelism over ranks) runs on the CPU backend only (tp-run --backend cpu)",
                    call, mean_over, tokens));
}
}  // namespace

void CudaBackend::attention_block_fwd(const kernels::BlockHeads&, kernels::BlockMask, kernels::SeqRows,
                                      kernels::SeqRows, DevPtr, DevPtr, DevPtr, DevPtr, float*) {
  no_ring_attention("attention_block_fwd");
}
void CudaBackend::attention_block_bwd(const kernels::BlockHeads&, kernels::BlockMask, kernels::SeqRows,
                                      kernels::SeqRows, DevPtr, DevPtr, DevPtr, DevPtr, const float*, DevPtr, DevPtr,
                                      DevPtr, DevPtr) {
  no_ring_attention("attention_block_bwd");
}
void CudaBackend::attention_merge(const kernels::BlockHeads&, kernels::SeqRows, DevPtr, float*, DevPtr, const float*) {
  no_ring_attention("attention_merge");
}

void CudaBackend::rmsnorm_fwd(int64_t rows, int64_t dim, double eps, DevPtr x, DevPtr w, DevPtr y, float* rstd) {
  constexpr const char* c = "rmsnorm_fwd";
  floating(x, c, [&](auto t) {
    using T = T_OF(t);
    cuda::rmsnorm_fwd<T>(compute_, rows, dim, eps, as<T>(x, c), as<T>(w, c), as<T>(y, c), rstd);
  });
}

void CudaBackend::rmsnorm_bwd(int64_t rows, int64_t dim, DevPtr x, DevPtr w, const float* rstd, DevPtr dy, DevPtr dx,
                              DevPtr dw) {
  constexpr const char* c = "rmsnorm_bwd";
  floating(x, c, [&](auto t) {
    using T = T_OF(t);
    cuda::rmsnorm_bwd<T>(compute_, rows, dim, as<T>(x, c), as<T>(w, c), rstd, as<T>(dy, c), as<T>(dx, c), as<T>(dw, c),
                         scratch_);
  });
}

void CudaBackend::add_rmsnorm_fwd(int64_t rows, int64_t dim, double eps, DevPtr a, DevPtr b, DevPtr w, DevPtr h,
                                  DevPtr y, float* rstd) {
  constexpr const char* c = "add_rmsnorm_fwd";
  floating(a, c, [&](auto t) {
    using T = T_OF(t);
    cuda::add_rmsnorm_fwd<T>(compute_, rows, dim, eps, as<T>(a, c), as<T>(b, c), as<T>(w, c), as<T>(h, c), as<T>(y, c),
                             rstd);
  });
}

void CudaBackend::rmsnorm_bwd_add(int64_t rows, int64_t dim, DevPtr x, DevPtr w, const float* rstd, DevPtr dy,
                                  DevPtr dres, DevPtr dx, DevPtr dw) {
  constexpr const char* c = "rmsnorm_bwd_add";
  floating(x, c, [&](auto t) {
    using T = T_OF(t);
    cuda::rmsnorm_bwd_add<T>(compute_, rows, dim, as<T>(x, c), as<T>(w, c), rstd, as<T>(dy, c), as<T>(dres, c),
                             as<T>(dx, c), as<T>(dw, c), scratch_);
  });
}

void CudaBackend::layernorm_fwd(int64_t rows, int64_t dim, double eps, DevPtr x, DevPtr w, DevPtr b, DevPtr y,
                                float* mean, float* rstd) {
  constexpr const char* c = "layernorm_fwd";
  floating(x, c, [&](auto t) {
    using T = T_OF(t);
    cuda::layernorm_fwd<T>(compute_, rows, dim, eps, as<T>(x, c), as<T>(w, c), as<T>(b, c), as<T>(y, c), mean, rstd);
  });
}

void CudaBackend::layernorm_bwd(int64_t rows, int64_t dim, DevPtr x, DevPtr w, const float* mean, const float* rstd,
                                DevPtr dy, DevPtr dx, DevPtr dw, DevPtr db) {
  constexpr const char* c = "layernorm_bwd";
  floating(x, c, [&](auto t) {
    using T = T_OF(t);
    cuda::layernorm_bwd<T>(compute_, rows, dim, as<T>(x, c), as<T>(w, c), mean, rstd, as<T>(dy, c), as<T>(dx, c),
                           as<T>(dw, c), as<T>(db, c), scratch_);
  });
}

void CudaBackend::rope_fwd(const RopeShape& s, DevPtr x, DevPtr y) {
  floating(x, "rope_fwd", [&](auto t) {
    using T = T_OF(t);
    cuda::rope_fwd<T>(compute_, rope_dims(s), as<T>(x, "rope_fwd"), as<T>(y, "rope_fwd"));
  });
}

void CudaBackend::rope_qk_fwd(const RopeShape& qs, const RopeShape& ks, DevPtr q, DevPtr k, DevPtr qo, DevPtr ko) {
  constexpr const char* c = "rope_qk_fwd";
  floating(q, c, [&](auto t) {
    using T = T_OF(t);
    cuda::rope_qk_fwd<T>(compute_, rope_dims(qs), rope_dims(ks), as<T>(q, c), as<T>(k, c), as<T>(qo, c), as<T>(ko, c));
  });
}

void CudaBackend::rope_qk_bwd(const RopeShape& qs, const RopeShape& ks, DevPtr dq, DevPtr dk, DevPtr dqo, DevPtr dko) {
  constexpr const char* c = "rope_qk_bwd";
  floating(dq, c, [&](auto t) {
    using T = T_OF(t);
    cuda::rope_qk_bwd<T>(compute_, rope_dims(qs), rope_dims(ks), as<T>(dq, c), as<T>(dk, c), as<T>(dqo, c),
                         as<T>(dko, c));
  });
}

void CudaBackend::rope_bwd(const RopeShape& s, DevPtr dy, DevPtr dx) {
  floating(dy, "rope_bwd", [&](auto t) {
    using T = T_OF(t);
    cuda::rope_bwd<T>(compute_, rope_dims(s), as<T>(dy, "rope_bwd"), as<T>(dx, "rope_bwd"));
  });
}

void CudaBackend::swiglu_fwd(int64_t n, DevPtr a, DevPtr b, DevPtr y) {
  constexpr const char* c = "swiglu_fwd";
  floating(a, c, [&](auto t) {
    using T = T_OF(t);
    cuda::swiglu_fwd<T>(compute_, n, as<T>(a, c), as<T>(b, c), as<T>(y, c));
  });
}

void CudaBackend::swiglu_bwd(int64_t n, DevPtr a, DevPtr b, DevPtr dy, DevPtr da, DevPtr db) {
  constexpr const char* c = "swiglu_bwd";
  floating(a, c, [&](auto t) {
    using T = T_OF(t);
    cuda::swiglu_bwd<T>(compute_, n, as<T>(a, c), as<T>(b, c), as<T>(dy, c), as<T>(da, c), as<T>(db, c));
  });
}

void CudaBackend::gelu_fwd(int64_t n, DevPtr a, DevPtr y) {
  floating(a, "gelu_fwd", [&](auto t) {
    using T = T_OF(t);
    cuda::gelu_fwd<T>(compute_, n, as<T>(a, "gelu_fwd"), as<T>(y, "gelu_fwd"));
  });
}

void CudaBackend::gelu_bwd(int64_t n, DevPtr a, DevPtr dy, DevPtr da) {
  constexpr const char* c = "gelu_bwd";
  floating(a, c, [&](auto t) {
    using T = T_OF(t);
    cuda::gelu_bwd<T>(compute_, n, as<T>(a, c), as<T>(dy, c), as<T>(da, c));
  });
}

void CudaBackend::add(int64_t n, DevPtr a, DevPtr b, DevPtr y) {
  floating(a, "add", [&](auto t) {
    using T = T_OF(t);
    cuda::add<T>(compute_, n, as<T>(a, "add"), as<T>(b, "add"), as<T>(y, "add"));
  });
}

void CudaBackend::accumulate(int64_t n, DevPtr a, DevPtr y) {
  floating(a, "accumulate", [&](auto t) {
    using T = T_OF(t);
    cuda::accumulate<T>(compute_, n, as<T>(a, "accumulate"), as<T>(y, "accumulate"));
  });
}

void CudaBackend::bias_add(int64_t rows, int64_t n, int split, DevPtr x, DevPtr b, DevPtr y) {
  constexpr const char* c = "bias_add";
  floating(x, c, [&](auto t) {
    using T = T_OF(t);
    cuda::bias_add<T>(compute_, rows, n, split, as<T>(x, c), as<T>(b, c), as<T>(y, c));
  });
}

void CudaBackend::bias_grad(int64_t rows, int64_t n, DevPtr dy, DevPtr db) {
  constexpr const char* c = "bias_grad";
  floating(dy, c, [&](auto t) {
    using T = T_OF(t);
    cuda::bias_grad<T>(compute_, rows, n, as<T>(dy, c), as<T>(db, c));
  });
}

void CudaBackend::adamw(int64_t n, const AdamWParams& h, float* p, DevPtr g, float* m, float* v) {
  kernels::AdamWConfig c;
  c.lr = h.lr, c.beta1 = h.beta1, c.beta2 = h.beta2, c.eps = h.eps, c.weight_decay = h.weight_decay;
  floating(g, "adamw", [&](auto t) {
    using T = T_OF(t);
    const cuda::AdamWTensor<T> one{p, as<T>(g, "adamw"), m, v, n};
    cuda::adamw<T>(compute_, std::span<const cuda::AdamWTensor<T>>(&one, 1), c, h.step);
  });
}

void CudaBackend::adamw_multi(const std::vector<AdamWTensorRef>& tensors, const AdamWParams& h) {
  kernels::AdamWConfig c;
  c.lr = h.lr, c.beta1 = h.beta1, c.beta2 = h.beta2, c.eps = h.eps, c.weight_decay = h.weight_decay;
  // One group per gradient storage, in the order each storage first appears; the tensors of a group in their order.
  std::vector<Storage> storages;
  for (const AdamWTensorRef& t : tensors)
    if (std::find(storages.begin(), storages.end(), t.g.storage) == storages.end()) storages.push_back(t.g.storage);
  for (const Storage storage : storages) {
    const AdamWTensorRef* first = nullptr;
    for (const AdamWTensorRef& t : tensors)
      if (t.g.storage == storage && first == nullptr) first = &t;
    floating(first->g, "adamw", [&](auto tag) {
      using T = T_OF(tag);
      std::vector<cuda::AdamWTensor<T>> group;
      for (const AdamWTensorRef& t : tensors)
        if (t.g.storage == storage) group.push_back({t.p, as<T>(t.g, "adamw"), t.m, t.v, t.n});
      cuda::adamw<T>(compute_, std::span<const cuda::AdamWTensor<T>>(group.data(), group.size()), c, h.step);
    });
  }
}

void CudaBackend::embedding_fwd(int64_t tokens, int64_t vocab_local, int64_t dim, int64_t vocab_offset,
                                bool vocab_sharded, const int32_t* ids, DevPtr weight, DevPtr out) {
  constexpr const char* c = "embedding_fwd";
  floating(weight, c, [&](auto t) {
    using T = T_OF(t);
    cuda::embedding_fwd<T>(compute_, tokens, vocab_local, dim, vocab_offset, vocab_sharded, ids, as<T>(weight, c),
                           as<T>(out, c));
  });
}

void CudaBackend::embedding_bwd(int64_t tokens, int64_t vocab_local, int64_t dim, int64_t vocab_offset,
                                bool vocab_sharded, const int32_t* ids, DevPtr d_out, DevPtr d_weight) {
  constexpr const char* c = "embedding_bwd";
  floating(d_out, c, [&](auto t) {
    using T = T_OF(t);
    cuda::embedding_bwd<T>(compute_, tokens, vocab_local, dim, vocab_offset, vocab_sharded, ids, as<T>(d_out, c),
                           as<T>(d_weight, c), scratch_);
  });
}

void CudaBackend::ce_row_max(int64_t tokens, int64_t vocab_local, DevPtr logits, float* max) {
  floating(logits, "ce_row_max", [&](auto t) {
    using T = T_OF(t);
    cuda::ce_row_max<T>(compute_, tokens, vocab_local, as<T>(logits, "ce_row_max"), max);
  });
}

void CudaBackend::ce_sum_exp(int64_t tokens, int64_t vocab_local, DevPtr logits, const float* max, float* sumexp) {
  floating(logits, "ce_sum_exp", [&](auto t) {
    using T = T_OF(t);
    cuda::ce_sum_exp<T>(compute_, tokens, vocab_local, as<T>(logits, "ce_sum_exp"), max, sumexp);
  });
}

void CudaBackend::ce_target_logit(int64_t tokens, int64_t vocab_local, int64_t vocab_offset, DevPtr logits,
                                  const int32_t* targets, float* tlogit) {
  floating(logits, "ce_target_logit", [&](auto t) {
    using T = T_OF(t);
    cuda::ce_target_logit<T>(compute_, tokens, vocab_local, vocab_offset, as<T>(logits, "ce_target_logit"), targets,
                             tlogit);
  });
}

void CudaBackend::ce_loss(int64_t tokens, int64_t mean_over, const float* max, const float* sumexp, const float* tlogit,
                          float* loss) {
  require_mean_over_tokens("ce_loss", tokens, mean_over);
  cuda::ce_loss(compute_, tokens, max, sumexp, tlogit, loss);
}

void CudaBackend::ce_backward(int64_t tokens, int64_t mean_over, int64_t vocab_local, int64_t vocab_offset,
                              DevPtr logits, const float* max, const float* sumexp, const int32_t* targets,
                              DevPtr d_logits) {
  constexpr const char* c = "ce_backward";
  require_mean_over_tokens(c, tokens, mean_over);
  floating(logits, c, [&](auto t) {
    using T = T_OF(t);
    cuda::ce_backward<T>(compute_, tokens, vocab_local, vocab_offset, as<T>(logits, c), max, sumexp, targets,
                         as<T>(d_logits, c));
  });
}

void CudaBackend::fp8_amax(int64_t n, DevPtr x, float* amax) {
  floating(x, "fp8_amax", [&](auto t) {
    using T = T_OF(t);
    cuda::fp8_amax<T>(compute_, n, as<T>(x, "fp8_amax"), amax);
  });
}

void CudaBackend::fp8_cast(int64_t n, DType to, DevPtr x, const float* amax, DevPtr xq, float* scale) {
  if (xq.storage != storage_for(to))
    throw Error(fmt::format("cuda backend: fp8_cast to {} into {} storage", to_string(to), to_string(xq.storage)));
  floating(x, "fp8_cast", [&](auto t) {
    using T = T_OF(t);
    const T* in = as<T>(x, "fp8_cast");
    if (to == DType::fp8_e4m3)
      cuda::fp8_cast<T, __nv_fp8_e4m3>(compute_, n, in, amax, static_cast<__nv_fp8_e4m3*>(xq.ptr), scale);
    else
      cuda::fp8_cast<T, __nv_fp8_e5m2>(compute_, n, in, amax, static_cast<__nv_fp8_e5m2*>(xq.ptr), scale);
  });
}

#undef T_OF

}  // namespace tptune
