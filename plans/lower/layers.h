#pragma once
// The layers of the model as the lowering traces them: each takes Values (plain tensors or DTensors), applies
// the module's parallel style from the plan exactly as torch.distributed.tensor.parallel does, emits the forward
// ops and records their backward on the Emitter's tape. Internal to plans/ (used by lower.cc).

#include <map>
#include <string>
#include <vector>

#include "plans/lower/emitter.h"

namespace tptune::lowering {

class Layers {
 public:
  Layers(Emitter& e, const Model& m, const Training& t, const Plan& plan);

  // `fqn` is the module's full FQN used for plan lookup and errors ("layers.0.attention.wq"); `rel` is the name
  // inside the current scope (layer-relative in blocks: "attention.wq").
  struct Name {
    std::string fqn, rel;
  };
  Name child(const Name& parent, const std::string& leaf) const;

  // A parameter tensor (global shape `full`, sharded over TP on `shard_dim`, -1 replicated).
  TensorId parameter(const Name& n, const std::string& pname, const Shape& full, int shard_dim);

  // PrepareModuleInput (and the input half of any style on a non-leaf module).
  Value module_input(const Name& n, const Value& x);
  // A Linear y = x W^T (+ b when `bias`). Its parameters are sharded as torch's _partition_linear_fn does: colwise
  // weight and bias S(0); rowwise weight S(1), bias Replicate, added once to the Partial output (bias_add divides it
  // by tp, as DTensor's Replicate -> Partial does). Float8 linears keep the bias in high precision, added after the
  // scaled matmul (torchao's Float8Linear).
  Value linear(const Name& n, const Value& x, int64_t in_features, int64_t out_features, bool float8_eligible,
               bool bias = false);
  Value norm(const Name& n, const Value& x);
  Value embedding(const Name& n, const Value& tokens);
  // Rotary embedding, attention core and activations on local heads/features.
  Value rope(const Name& n, const Value& x);
  void attention_core(const Name& n, const Value& q, const Value& k, const Value& v, Value& out);
  // Model::gqa == repeat_kv: each key/value head of x copied to the `rep` query heads of its group
  // (ElementwiseOp::repeat_kv), as torchtitan's repeat_kv does before SDPA; its backward sums each group's gradients
  // (repeat_kv_bwd).
  Value repeat_kv(const Name& n, const Value& x, int64_t rep);
  // Context parallelism (plan.cp_degree > 1): the attention core as torch's ring over the cp group
  // (plans/language/context_parallel.h; plans/lower/ring.cc), on the rope'd q, k and v of this rank's seq/cp tokens
  // with hq query and hkv key/value heads; `out` as attention_core's.
  void ring_attention(const Name& n, const Value& q, const Value& k, const Value& v, int64_t hq, int64_t hkv,
                      Value& out);
  // Tokens of each sequence this rank holds: seq_len / cp (the Program's local_seq_len()).
  int64_t local_seq() const { return t.seq_len / plan.cp_degree; }
  Value swiglu(const Name& n, const Value& a, const Value& b);
  // Qwen3's q/k norm: RMSNorm(head_dim) on each head of x (b, s, heads x head_dim), a weight of head_dim shared by the
  // heads (its gradient a partial sum over tp when the heads are sharded). plans/lower/experts.cc.
  Value head_norm(const Name& n, const Value& x, int64_t head_dim);
  // A mixture-of-experts MLP `n` ("layers.0.moe") on the block's normed input x, as torchtitan 0.3.0 runs it (router,
  // dispatch, grouped GEMMs, combine, shared expert; expert parallelism over plan.ep_degree ranks): returns its output
  // in x's layout. Routed experts' parameters are marked TensorDesc::expert. plans/lower/experts.cc.
  Value moe(const Name& n, const Value& x);
  // Multi-head latent attention `n` ("layers.0.attention", Model::mla) on the attention's input x, as torchtitan
  // 0.3.0's DeepSeek-V3 Attention runs it and its sharding.py shards it: returns the attention core's output (b, s,
  // local heads x v_head_dim), a plain tensor like attention_core's, for the caller's wo. plans/lower/mla.cc.
  Value mla(const Name& n, const Value& x);
  Value gelu(const Name& n, const Value& a);
  Value add(const Name& n, const Value& a, const Value& b);
  // Cross-entropy on the logits (vocab-parallel when they are an S(-1) DTensor). Returns the loss tensor.
  TensorId loss(const Name& n, const Value& logits, TensorId targets);
  // A fused q/k/v projection's output (b, s, groups x (heads per group + 2) x head_dim, local groups) split into
  // contiguous q, k, v (a copy; its backward concatenates the three gradients, another copy).
  void split_qkv(const Name& att, const Value& qkv, Value& q, Value& k, Value& v);
  // ChunkedLossWrapper: the output projection `n` prepares its input once (from_local / redistribution to R), then
  // for each of `chunks` sequence chunks copies the chunk, runs the projection and the loss forward and at once their
  // backward (the weight gradient accumulates; the input gradient is copied into an fp32 accumulator). The
  // accumulated gradient is then the gradient of the prepared input; the caller replays the tape up to
  // `backward_end` (the input preparation and what precedes it), never the chunks again.
  struct Head {
    TensorId loss = -1;
    size_t backward_end = 0;
  };
  Head chunked_head(const Name& n, const Value& x, int64_t in_features, int64_t out_features, TensorId targets,
                    int chunks);
  // Parameters whose gradient is Partial over TP and that no FSDP post-backward reduces (DTensor at dp_shard 1):
  // the optimizer step all-reduces them when it reads them. Parameter -> module (layer-relative name).
  std::map<TensorId, std::string> reduced_at_optimizer;
  // Marks `g` as the final gradient of parameter `p` (role, parameter name, placement and global shape of p).
  void set_param_grad(TensorId p, TensorId g);

  // Every parameter tensor in creation order, and the final gradient of each (set during backward).
  std::vector<TensorId> params;
  std::map<TensorId, TensorId> grad_of;

  // Weight tying (Model::tie_word_embeddings): embedding() sets this to its weight, tok_embeddings.weight, and the
  // output projection (the plan's output_fqn, in linear() or chunked_head()) uses that tensor instead of a weight of
  // its own: one parameter, one placement. The two uses must shard it alike (embedding rowwise = S(0) with output
  // colwise = S(0), or neither parallelized = R), else ModuleError naming the output: torchtitan 0.3's
  // Module._distribute_states refuses "a tied parameter ... referenced by two modules with conflicting sharding
  // configs" instead of redistributing it. The first use's gradient to be finished (the head's, whose backward runs
  // first) is held; the second's adds it (an `accumulate` op, as autograd's AccumulateGrad sums both into .grad) and
  // is the parameter's gradient, before any FSDP reduce-scatter or optimizer step reads it.
  TensorId tied_weight = -1;

  // The last MoE block's router buffers (moe() sets them; -1 before): its tokens-per-expert histogram of the step and
  // its expert_bias, which the optimizer pre-hook all-reduces and updates (plans/lower/lower.cc).
  struct RouterBuffers {
    TensorId counts = -1, expert_bias = -1;
  };
  RouterBuffers router_buffers;

 private:
  Emitter& e;
  const Model& m;
  const Training& t;
  const Plan& plan;
  DType act() const { return t.dtype; }
  bool float8_tensorwise() const { return plan.float8 == Float8Recipe::tensorwise; }
  const ParallelStyle* style(const Name& n) const {
    const ParallelStyle* s = plan.style_for(n.fqn);
    if (s || style_of_.empty()) return s;
    const auto it = style_of_.find(n.fqn);
    return it == style_of_.end() ? nullptr : plan.style_for(it->second);
  }
  // Modules the plan does not name that take another module's style: latent attention's wq_b and wkv_b take wq's
  // (plans/lower/mla.cc). FQN -> FQN.
  std::map<std::string, std::string> style_of_;
  // The style a leaf module (Linear, norm) applies itself: prepare_module_input is applied to `x` here and leaves
  // the leaf unparallelized; no_parallel is no style. nullptr: plain parameters.
  const ParallelStyle* leaf_style(const Name& n, Value& x);
  // Makes the final gradient of parameter `p` from a local gradient `g` that is `partial` over TP.
  void finish_param_grad(const Name& n, TensorId p, TensorId g, bool partial);
  // The weight of Linear `n` (global shape `full`, sharded on `shard_dim`): a new parameter, or tied_weight for the
  // output projection of a tied model (checked to have the same placement).
  TensorId linear_weight(const Name& n, const Shape& full, int shard_dim);
  TensorId tied_first_grad_ = -1;  // the tied weight's first finished gradient, waiting for the second
  // Float8 tensorwise cast of a value (amax, all-reduce(max) if sharded, cast); returns the float8 value.
  Value cast_float8(const Name& n, const Value& x, DType to, const std::string& what);
  TensorId cast_float8_tensor(const Name& n, TensorId x, bool sharded, DType to, const std::string& what,
                              TensorId& scale);
  // torchao's _NoopFwToFloat8BwDynamic, which Float8ColwiseParallel and Float8RowwiseParallel put after the output
  // redistribution: the identity forward; backward casts the arriving gradient to e5m2 (tensorwise, the amax
  // all-reduced over TP when the gradient is sharded), so that the redistribution's backward (the all-gather of a
  // sequence-parallel rowwise output's gradient) moves float8 and its GEMMs take it as it arrives.
  Value cast_gradient_float8(const Name& n, const Value& x);
  void require_plain_or(const Name& n, const Value& x, const char* what) const;
  // Latent attention's replicated pieces (plans/lower/mla.cc): a Linear with a Replicate weight on a replicated
  // input (wq_a, wkv_a), and an RMSNorm over the first `width` features of x (q_norm, kv_norm). Their backward keeps
  // the arriving gradient's placement (a Partial one stays Partial: the norm backward is linear in dy) and makes the
  // weight gradients Partial with it.
  Value latent_linear(const Name& n, const Value& x, int64_t in_features, int64_t out_features);
  Value latent_norm(const Name& n, const Value& x, int64_t width);
};

}  // namespace tptune::lowering
