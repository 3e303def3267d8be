// The overrides every Backend declares, stated once: the storage calls, kernels and collectives of runtime/backend.h
// (whose comments are their contract), between Backend::alloc and Backend::recv. Included inside the public section
// of each backend class (runtime/cpu/cpu_backend.h, runtime/cuda/cuda_backend.h), where what that backend does
// differently is said; so no include guard, and nothing else belongs here.
//
//   class CpuBackend final : public Backend {
//    public:
//     ...
//   #include "runtime/backend_overrides.h"
//     ...
//   };
// clang-format off
  Buffer alloc(int64_t numel, Storage storage) override;
  void upload(DevPtr dst, const float* host, int64_t n) override;
  void upload(int32_t* dst, const int32_t* host, int64_t n) override;
  void download(float* host, DevPtr src, int64_t n) override;
  void download(int32_t* host, const int32_t* src, int64_t n) override;
  void fill(DevPtr dst, int64_t n, float value) override;
  void copy2d(DevPtr dst, int64_t dst_ld, DevPtr src, int64_t src_ld, int64_t rows, int64_t cols) override;
  void convert(DevPtr dst, DevPtr src, int64_t n) override;

  void gemm(const GemmArgs& g) override;
  void attention_fwd(const AttentionShape& s, DevPtr q, DevPtr k, DevPtr v, DevPtr o, float* lse) override;
  void attention_bwd(const AttentionShape& s, DevPtr q, DevPtr k, DevPtr v, DevPtr o, const float* lse, DevPtr d_o,
                     DevPtr dq, DevPtr dk, DevPtr dv) override;
  void attention_block_fwd(const kernels::BlockHeads& h, kernels::BlockMask mask, kernels::SeqRows q_rows,
                           kernels::SeqRows kv_rows, DevPtr q, DevPtr k, DevPtr v, DevPtr o, float* lse) override;
  void attention_block_bwd(const kernels::BlockHeads& h, kernels::BlockMask mask, kernels::SeqRows q_rows,
                           kernels::SeqRows kv_rows, DevPtr q, DevPtr k, DevPtr v, DevPtr o, const float* lse,
                           DevPtr d_o, DevPtr dq, DevPtr dk, DevPtr dv) override;
  void attention_merge(const kernels::BlockHeads& h, kernels::SeqRows q_rows, DevPtr o, float* lse, DevPtr o_part,
                       const float* lse_part) override;
  void rmsnorm_fwd(int64_t rows, int64_t dim, double eps, DevPtr x, DevPtr w, DevPtr y, float* rstd) override;
  void rmsnorm_bwd(int64_t rows, int64_t dim, DevPtr x, DevPtr w, const float* rstd, DevPtr dy, DevPtr dx,
                   DevPtr dw) override;
  void layernorm_fwd(int64_t rows, int64_t dim, double eps, DevPtr x, DevPtr w, DevPtr b, DevPtr y, float* mean,
                     float* rstd) override;
  void layernorm_bwd(int64_t rows, int64_t dim, DevPtr x, DevPtr w, const float* mean, const float* rstd, DevPtr dy,
                     DevPtr dx, DevPtr dw, DevPtr db) override;
  void rope_fwd(const RopeShape& s, DevPtr x, DevPtr y) override;
  void rope_bwd(const RopeShape& s, DevPtr dy, DevPtr dx) override;
  void swiglu_fwd(int64_t n, DevPtr a, DevPtr b, DevPtr y) override;
  void swiglu_bwd(int64_t n, DevPtr a, DevPtr b, DevPtr dy, DevPtr da, DevPtr db) override;
  void gelu_fwd(int64_t n, DevPtr a, DevPtr y) override;
  void gelu_bwd(int64_t n, DevPtr a, DevPtr dy, DevPtr da) override;
  void add(int64_t n, DevPtr a, DevPtr b, DevPtr y) override;
  void accumulate(int64_t n, DevPtr a, DevPtr y) override;
  void bias_add(int64_t rows, int64_t n, int split, DevPtr x, DevPtr b, DevPtr y) override;
  void bias_grad(int64_t rows, int64_t n, DevPtr dy, DevPtr db) override;
  void adamw(int64_t n, const AdamWParams& h, float* p, DevPtr g, float* m, float* v) override;
  void embedding_fwd(int64_t tokens, int64_t vocab_local, int64_t dim, int64_t vocab_offset, bool vocab_sharded,
                     const int32_t* ids, DevPtr weight, DevPtr out) override;
  void embedding_bwd(int64_t tokens, int64_t vocab_local, int64_t dim, int64_t vocab_offset, bool vocab_sharded,
                     const int32_t* ids, DevPtr d_out, DevPtr d_weight) override;
  void ce_row_max(int64_t tokens, int64_t vocab_local, DevPtr logits, float* max) override;
  void ce_sum_exp(int64_t tokens, int64_t vocab_local, DevPtr logits, const float* max, float* sumexp) override;
  void ce_target_logit(int64_t tokens, int64_t vocab_local, int64_t vocab_offset, DevPtr logits, const int32_t* targets,
                       float* tlogit) override;
  void ce_loss(int64_t tokens, int64_t mean_over, const float* max, const float* sumexp, const float* tlogit,
               float* loss) override;
  void ce_backward(int64_t tokens, int64_t mean_over, int64_t vocab_local, int64_t vocab_offset, DevPtr logits,
                   const float* max, const float* sumexp, const int32_t* targets, DevPtr d_logits) override;
  void fp8_amax(int64_t n, DevPtr x, float* amax) override;
  void fp8_cast(int64_t n, DType to, DevPtr x, const float* amax, DevPtr xq, float* scale) override;

  RequestPtr all_reduce(Group g, ReduceOp op, DevPtr in, DevPtr out, int64_t n) override;
  RequestPtr all_gather(Group g, DevPtr in, DevPtr out, int64_t n) override;
  RequestPtr reduce_scatter(Group g, ReduceOp op, DevPtr in, DevPtr out, int64_t n) override;
  RequestPtr all_to_all(Group g, DevPtr in, DevPtr out, int64_t n) override;
  RequestPtr send_recv(Group g, DevPtr send, int dst, DevPtr recv, int src, int64_t n) override;
  RequestPtr send(Group g, DevPtr data, int dst, int64_t n, int tag) override;
  RequestPtr recv(Group g, DevPtr data, int src, int64_t n, int tag) override;
// clang-format on
