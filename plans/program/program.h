#pragma once
// The Program IR: what one TP rank does in one training step.
//
// `lower(Model, Training, Plan)` (plans/lower/lower.h) produces it; the simulator (sim/) costs it and the runtime
// (runtime/) executes it, so a measured op and a predicted op are the same op with the same local shape.
//
// Structure. Transformer blocks are identical, so the Program is a list of Segments in execution order, and the
// two block segments are templates repeated once per layer:
//   embed.fwd   (x1)   token embedding forward
//   block.fwd   (xL)   one block's forward, layers 0..L-1       [+ FSDP parameter all-gather when dp_shard > 1]
//   head        (x1)   final norm, output projection, loss, and their backward
//   block.bwd   (xL)   one block's backward, layers L-1..0      [+ recompute, FSDP all-gather and grad reduce-scatter,
//                                                                  + HSDP all-reduce of the shard when dp_replicate >
//                                                                  1]
//               with a plan's ac_layers = k (0 < k < L): two segments, both of kind block.bwd: layers L-1..k without
//               recompute (x L-k, first_layer k), then layers k-1..0 with it (x k, first_layer 0)
//   embed.bwd   (x1)   embedding backward
//   grad_norm   (x1)   only with Plan::clip_grad_norm: the gradient norm (local norms, all-reduces over tp and dp) and
//                      the clip of every gradient, before any AdamW
//   block.optimizer (xL) AdamW on the block's local parameter shards
//   optimizer   (x1)   data-parallel reduction of non-block gradients, AdamW on every local parameter shard
// A mixture of experts whose first k = model.moe.dense_layers blocks keep a dense MLP (0 < k < L: DeepSeek-V3's
// first_k_dense_replace) has two block templates, one per variant, each a segment with its layer range:
//   embed.fwd, block.fwd [dense, layers 0..k-1], block.fwd [MoE, k..L-1], head, block.bwd [MoE, L-1..k],
//   block.bwd [dense, k-1..0], embed.bwd, [grad_norm], block.optimizer [dense], block.optimizer [MoE], optimizer
// Both forwards read the one block input tensor and write the one block output tensor (so one LayerChain spans
// every layer), both backwards read the one output gradient and write the one input gradient; every other per-layer
// tensor is its variant's, and TensorDesc::first_layer/layer_count say which layers have it. A plan's ac_layers
// split (0 < ac_layers < L) is refused for such a model (one backward segment per variant; plans/lower/lower.cc).
// A model with k = 0 has the one template above.
// Tensors and ops of a repeated segment are layer-relative: tensor "attention.wq.weight" with per_layer=true is
// "layers.N.attention.wq.weight" in layer N; op module "attention.wq" is "layers.N.attention.wq".
// A LayerChain links layers: in layer order (descending when `reverse`), the first layer's `in` is `source`, each
// later layer's `in` is the previous layer's `out`, and the last layer's `out` is `sink`. (The residual stream
// forward; its gradient backward.) `expand()` instantiates every layer into one flat list with global tensor ids.
//
// Dataflow. Ops read `inputs` and write `outputs` (tensor ids); `deps` are the ops of the same segment instance
// that must finish first (the last writer of each input, and for an accumulating op the earlier writer of its
// output). An input with no writer in the segment instance comes from an earlier segment or layer (see expand()).
// Ops run in list order on one rank; collectives are the only ops that may run concurrently with compute.
//
// Local shapes are per rank; `global_shape` and `placement` say what the local data means on the TP mesh.
// Collective `bytes` is the size of the full (unsharded) tensor, the `size` column of nccl-tests.

#include <cstdint>
#include <deque>
#include <string>
#include <variant>
#include <vector>

#include "plans/language/config.h"
#include "plans/language/placement.h"
#include "plans/language/plan.h"
#include "plans/model/dtype.h"
#include "plans/model/model.h"
#include "plans/program/segment_kind.h"

namespace tptune {

using TensorId = int;

enum class Phase { forward, backward, recompute, optimizer };
std::string_view to_string(Phase p);

enum class TensorRole {
  input,       // tokens and targets (int32 stored in the tensor's elements)
  activation,  // forward values
  gradient,    // gradients of activations
  parameter,   // a (shard of a) parameter
  param_grad,  // its gradient
  scale,       // float8 amax / scale scalars, loss statistics
  loss,        // the scalar loss
  optimizer_state,
};

struct TensorDesc {
  std::string name;  // layer-relative when per_layer ("attention.wq.weight"), else a full FQN ("output.weight")
  bool per_layer = false;
  Shape local_shape;
  Shape global_shape;
  DType dtype = DType::bf16;
  Placement placement;  // what the local data means on the TP mesh (for parameters: how they are sharded)
  TensorRole role = TensorRole::activation;
  // For parameters and their gradients: the parameter's relative name ("attention.wq.weight") and the dim of the
  // full parameter that is sharded over TP (-1: replicated). Rank r holds slice r of that dim.
  std::string param;
  int param_shard_dim = -1;
  // A routed expert's parameter, its gradient or optimizer state (plans/lower/experts.cc): with expert parallelism
  // (Program::ep > 1) FSDP shards it over the efsdp group (Program::efsdp), every other parameter over dp.
  bool expert = false;
  // A per-layer tensor of one block variant of a dense-first mixture of experts (see "Structure"): it exists in layers
  // first_layer .. first_layer + layer_count - 1 only. layer_count 0: in every layer the Program holds (every
  // per-layer tensor of a Program with one block template, and the variants' shared block input and output).
  int first_layer = 0;
  int layer_count = 0;
};

// C (m, n) = op(A) (m, k) x op(B) (k, n), op(X) = X^T when trans; [+ C when accumulate]. Row-major, tokens flattened:
// a linear y = x W^T with x (b, s, in) and W (out, in) is m = b*s, n = out, k = in, trans_b.
// inputs: {A, B} or, for float8 operands, {A, B, scale_A, scale_B} (fp32 scalars: real = stored * scale).
// A grouped GEMM (groups > 1: torch._grouped_mm of a mixture of experts' GroupedExperts, one product per local
// expert over that expert's rows, plans/lower/experts.cc): `groups` products of (m, k) x (k, n), m the rows of the
// busiest group (the step waits for it; with float8 operands padded to a multiple of 16 rows, torchao's
// permute_and_pad); A holds groups x m rows, B the groups' weights stacked. A weight gradient (trans_a) is groups
// products of (m, k) = (ffn, rows) x (rows, n).
struct GemmOp {
  int64_t m = 0, n = 0, k = 0;
  DType a_dtype = DType::bf16, b_dtype = DType::bf16, c_dtype = DType::bf16;
  bool trans_a = false, trans_b = false, accumulate = false;
  int64_t groups = 1;
  int64_t flops() const;  // 2*groups*m*n*k, overflow-checked
};

// Causal grouped-query flash attention on local heads. Forward inputs {q, k, v} (b, s, heads*head_dim), outputs
// {o, lse} with lse (b, n_heads, s) fp32. Backward inputs {q, k, v, o, lse, d_o}, outputs {dq, dk, dv}.
// A block of ring attention (context parallelism, plans/language/context_parallel.h) is step `ring_step` of the ring:
// it attends `seq` queries to `kv_seq` keys (0: seq; the costliest rank's block, which the simulator times), causal
// only on the diagonal block (step 0, kv_seq == seq). Which rows a given cp rank uses follows from its rank and the
// step (runtime/ring/schedule.h). Step 0 reads {q, k, v}; a later step reads {q, kv} where kv is the K/V buffer it
// holds (torch.cat of the flattened K and V, see ElementwiseOp::concat): the received (b, s, 2 kv width) buffer, or
// the all-gathered (b, cp s, 2 kv width) one whose rows [j s, (j+1) s) of each batch are cp rank j's buffer.
// Forward outputs {o, lse} of the whole local query (rows the block does not touch: o 0, lse -inf); backward inputs
// {q, k, v | kv, o, lse, d_o} with the merged o and lse, outputs {dq, dkv} (this block's shares, fp32; dkv holds dK
// then dV flattened as the K/V buffer).
struct AttentionOp {
  int64_t batch = 0, seq = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  bool causal = true;
  bool backward = false;
  int64_t kv_seq = 0;
  int ring_step = -1;  // context parallelism: the ring step 0 .. cp-1 this block computes; -1 outside a ring
  // The width of one value head (and of o) when it differs from q's and k's head_dim: multi-head latent attention
  // (q/k nope + rope dims, v v_head_dim; plans/lower/mla.cc). 0: head_dim. Simulated only (tp-run refuses MLA).
  int64_t v_head_dim = 0;
  int64_t keys() const { return kv_seq > 0 ? kv_seq : seq; }
  int64_t v_dim() const { return v_head_dim > 0 ? v_head_dim : head_dim; }
  // FLOPs: forward QK^T 2*b*h*s*kv*d and PV 2*b*h*s*kv*dv = 2*b*h*s*kv*(d + dv), halved by the causal mask (kv = s)
  // to b*h*s*s*(d + dv) (2*b*h*s*s*d when dv = d); backward 2.5x forward.
  int64_t flops() const;
};

// Memory-bound ops. The input/output convention of each fn is fixed (the runtime relies on it):
//   rmsnorm        {x, w} -> {y, rstd}              rmsnorm_bwd    {x, w, rstd, dy} -> {dx, dw}
//   layernorm      {x, w, b} -> {y, mean, rstd}     layernorm_bwd  {x, w, mean, rstd, dy} -> {dx, dw, db}
//   rope           {x} -> {y}  (x (b, s, heads*hd); positions start at `offset` along s: local seq shard)
//   rope_bwd       {dy} -> {dx}
//   swiglu         {a, b} -> {y = silu(a) * b}      swiglu_bwd     {a, b, dy} -> {da, db}
//   gelu           {a} -> {y} (tanh approximation)  gelu_bwd       {a, dy} -> {da}
//   add            {a, b} -> {y = a + b}            accumulate     {a, y} -> {y += a}
//   bias_add       {x, b} -> {y = x + b / bias_split}: x (b, s, n) a linear's output, b (n) its bias broadcast over
//                  tokens; bias_split is tp when x is a Partial sum over TP (a rowwise linear: DTensor redistributes
//                  the Replicate bias to Partial by dividing it, so the reduced output holds it once), else 1
//   bias_grad      {dy} -> {db}: db (n) = the sum of dy (b, s, n) over its tokens
//   slice          {x} -> {y}: this rank's slice of `dim` (R -> S(dim) redistribution)
//   adamw          {p, g, m, v} -> {p, m, v}
//   copy           {x...} -> {y...}: a contiguous copy of views (torchtitan 0.3's fused-wqkv split and concat, the
//                  chunked loss's sequence chunks and gradient accumulator); bytes = read + write. The CPU runtime
//                  does not execute it (tp-run refuses the torchtitan-0.3 family).
//   concat         {x...} -> {y...}: the inputs' elements, each flattened, in order, are the outputs' elements in
//                  order (torch.cat of flattened tensors and its split back, with a dtype conversion when they
//                  differ): ring attention's K/V buffers, its dK/dV split and its fp32 dq cast back.
//   attention_merge {o, lse, block_o, block_lse} -> {o, lse}: ring attention's merge of one block into the running
//                  output (torch's _SDPAMerger, fp32; kernels/cpu/attention_block.h merge_partial)
// Fused ops: only a compiled Program has them (training.compile, implied by async TP):
// plans/lower/rewrite/compile_fusion.h rewrites the eager lowering into the kernels torch.compile (Inductor) generates
// for a block; each replaces the ops named in Op::fused, computes what they computed and stores what they stored (fp32
// inside, as Inductor does):
//   add_rmsnorm    {a, b, w} -> {h = a + b, y, rstd}: the residual add and the RMSNorm of its sum in one pass
//                  (y, rstd as rmsnorm of h); bytes = read a, b, write h, y (4 activations) + w + rstd
//   rmsnorm_bwd_add {x, w, rstd, dy, dres} -> {dx = dres + rmsnorm_bwd's dx, dw}: the norm's backward and the
//                  gradient sum with the residual's gradient; bytes = read x, dy, dres, write dx (4 activations)
//                  + w, dw + rstd
//   rope_qk        {q, k} -> {q', k'}: rope of q and of k in one launch; bytes = both ropes' (2 x (|q| + |k|))
//   rope_qk_bwd    {dq', dk'} -> {dq, dk}
// amax_of >= 0 (any elementwise fn but the optimizer's, compiled Programs only): the op has one more output, last,
// the fp32 scalar max |.| of its output amax_of: a tensorwise float8 amax (CastFp8Op's amax stage, whose
// producer_elementwise says it may fuse) folded into the producer's pass; bytes stay the producer's (+ 4). One amax
// per op: where a second output is cast too (swiglu_bwd's da and db, rope_qk_bwd's dq and dk) that amax stays a
// CastFp8Op of its own with producer_elementwise false (Inductor folds both: not yet matched). A repeated amax of the
// same output (wq, wk and wv casting one input) is computed once: its readers take the folded one.
// Mixture of experts (plans/lower/experts.cc; torchtitan 0.3.0 models/common/moe.py, token_dispatcher.py), executed
// by the CPU runtime (runtime/executor_moe.cc):
//   moe_router     {logits (T, E) fp32, expert_bias (E) fp32} -> {scores (T, K) fp32, expert ids (T, K), counts (E)}:
//                  the score function (softmax or sigmoid), the scores plus expert_bias for the choice only,
//                  node-limited groups, torch.topk, the gathered scores (without the bias) and the tokens-per-expert
//                  histogram (TokenChoiceTopKRouter)
//   moe_router_bwd {logits, d scores} -> {d logits}
//   moe_permute    {x} -> {y}: rows gathered in a new order (the dispatcher's argsort gather of T x K token copies,
//                  rank-major -> expert-major after the dispatch, each group padded when the grouped GEMMs need it)
//   moe_unpermute  {y} -> {x}: the inverse scatter (and the backward of moe_permute, a scatter-add)
//   moe_combine    {expert rows (N, D), scores (N)} -> {y (T, D)}: each row times its score (fp32), scatter-added
//                  into its token (the dispatcher's combine)
//   moe_combine_bwd {d y, expert rows, scores} -> {d rows, d scores}
//   host_sync      {counts} -> {splits}: the dispatcher's .tolist() of the exchanged token counts, a device-to-host
//                  copy the host waits for before it can size the dispatch all-to-all (_sync_token_count_exchange)
//   gate_mul       {a, g} -> {y = a * sigmoid(g)}: Qwen2-MoE's gate on the shared expert; gate_mul_bwd {a, g, dy}
//                  -> {da, dg}
//   moe_bias_update {counts (E), expert_bias (E)} -> {expert_bias}: the aux-loss-free load balancing of the
//                  optimizer pre-hook (torchtitan 0.3.0 components/optimizer/optimizer.py _update_expert_bias), on
//                  the counts summed over the ranks: delta = load_balance_coeff x sign(mean(counts) - counts), then
//                  expert_bias += delta - mean(delta), in place
struct ElementwiseOp {
  enum class Fn {
    rmsnorm,
    rmsnorm_bwd,
    layernorm,
    layernorm_bwd,
    rope,
    rope_bwd,
    swiglu,
    swiglu_bwd,
    gelu,
    gelu_bwd,
    add,
    accumulate,
    bias_add,
    bias_grad,
    slice,
    adamw,
    copy,
    // torch.nn.utils.clip_grad_norm_ (simulator only, like copy): grad_norm is _foreach_norm over every local gradient
    // shard (read once), grad_clip the _foreach_mul_ by the clip coefficient (read and write each shard).
    grad_norm,
    grad_clip,
    attention_merge,
    concat,
    // Model::gqa == repeat_kv: {kv (b, s, h_kv x d)} -> {(b, s, h_q x d)}, kv head g copied to query heads
    // [g r, (g+1) r) (r = h_q / h_kv; torchtitan's repeat_kv: unsqueeze, expand, reshape); its backward sums each group
    // of r heads' gradients back into one.
    repeat_kv,
    repeat_kv_bwd,
    add_rmsnorm,
    rmsnorm_bwd_add,
    rope_qk,
    rope_qk_bwd,
    moe_router,
    moe_router_bwd,
    moe_permute,
    moe_unpermute,
    moe_combine,
    moe_combine_bwd,
    host_sync,
    gate_mul,
    gate_mul_bwd,
    moe_bias_update
  };
  Fn fn = Fn::add;
  int64_t bytes = 0;  // bytes read + written (HBM traffic at the tensors' dtypes)
  int64_t flops = 0;
  int dim = -1;        // slice: the dim (normalized)
  int bias_split = 1;  // bias_add: the bias is divided by it (tp for a Partial output, see bias_add)
  int amax_of = -1;    // compiled: the output whose float8 amax is the op's last output (see "Fused ops")
};
std::string_view to_string(ElementwiseOp::Fn f);

// Embedding lookup of `tokens` ids into a table (vocab_local, dim_local). When vocab_sharded, rank r owns rows
// [r*vocab_local, (r+1)*vocab_local) and ids outside give zero rows (a partial sum over ranks).
// Forward inputs {tokens, weight} -> {out}; backward inputs {tokens, d_out} -> {d_weight}.
struct EmbeddingOp {
  int64_t tokens = 0, vocab_local = 0, dim_local = 0;
  bool vocab_sharded = false;
  bool backward = false;
};

// Cross-entropy (mean over tokens) on logits (tokens, vocab_local); vocab-parallel when vocab_sharded (rank r owns
// columns [r*vocab_local, ...)), the statistics then being all-reduced between stages.
//   row_max      {logits} -> {max}                       (tokens) fp32
//   sum_exp      {logits, max} -> {sumexp}               (tokens) fp32, after max was all-reduced (max)
//   target_logit {logits, targets} -> {tlogit}           (tokens) fp32, 0 for targets outside the shard
//   loss         {max, sumexp, tlogit} -> {loss}         scalar
//   backward     {logits, max, sumexp, targets} -> {d_logits} = (softmax - onehot) / mean_over
// `mean_over` is the token count the loss is a mean over: the tokens of every rank whose gradients FSDP sums,
// tokens x dp_shard x cp x dp_replicate (torchtitan 0.3's trainer divides the local sum by the global token count,
// global_valid_tokens, and FSDP reduces with a sum); 0 means `tokens`. Each rank's loss is then its tokens' share
// and the step's loss is the sum over those ranks.
struct CrossEntropyOp {
  enum class Stage { row_max, sum_exp, target_logit, loss, backward };
  Stage stage = Stage::row_max;
  int64_t tokens = 0, vocab_local = 0;
  bool vocab_sharded = false;
  int64_t mean_over = 0;
  int64_t divisor() const { return mean_over > 0 ? mean_over : tokens; }
};
std::string_view to_string(CrossEntropyOp::Stage s);

// Tensorwise float8 cast. amax: {x} -> {amax} (fp32 scalar; all-reduced (max) over the group when x is sharded).
// cast: {x, amax} -> {xq, scale} as torchao casts (kernels/formulas/float8.h): xq = x * m rounded to nearest even,
// saturating, with m = max_finite(to) / max(amax, 1e-12), and scale = 1 / m (real = stored * scale).
// rowwise (float8 recipe `rowwise`): cast {x} -> {xq, scales} with one scale per row of the last dim, no amax op and
// no collective. Simulated; the CPU runtime refuses it.
struct CastFp8Op {
  enum class Stage { amax, cast };
  Stage stage = Stage::cast;
  DType to = DType::fp8_e4m3;
  int64_t elements = 0;
  bool rowwise = false;
  // Tensorwise amax stage: x is written in the same segment by an elementwise op (a norm, activation, rope or their
  // backward: a kernel torch.compile generates, which can fold the amax reduction into its own pass over x). False
  // when x comes from a GEMM, attention or a collective (library kernels, which inductor does not extend) or from an
  // earlier segment: then the amax is a reduction kernel of its own that reads x once more.
  bool producer_elementwise = false;
};

// tp: the TP group (consecutive ranks). dp: FSDP's shard group (dp_shard x cp ranks, stride tp: torchtitan flattens
// dp_shard and cp into FSDP's mesh). dp_replicate: HSDP's replicate group (dp_replicate ranks, stride tp x dp_shard x
// cp), which all-reduces the reduce-scattered gradient shards. cp: the context-parallel group (cp ranks, stride tp),
// which passes the key/value shards of ring attention (plans/language/context_parallel.h). pp: the pipeline group (pp
// ranks, stride world / pp: the mesh's outermost dim), which passes activations and their gradients between the stage
// Programs (plans/lower/rewrite/pipeline_stage.h) and all-reduces the gradient norm over the stages.
// ep: the expert-parallel group of a mixture of experts (ep consecutive ranks: the innermost axis of torchtitan's
// sparse mesh (pp, dp_replicate, efsdp, ep), plans/language/expert_parallel.h), which exchanges token counts and
// dispatches and combines tokens by all-to-all. efsdp: the routed experts' FSDP group (efsdp ranks, stride ep), their
// all-gathers and gradient reduce-scatters. An all-to-all's `bytes` is the group's whole exchange, ep x one rank's send
// buffer (as an all-gather's is the full tensor; sim/cost/comm_cost.cc prices bytes / ep per rank), so that each rank
// sends bytes / ep, bytes / ep^2 to each peer under balanced routing.
enum class Group { tp, dp, dp_replicate, cp, pp, ep, efsdp };
std::string_view to_string(Group g);
enum class ReduceOp { sum, max };

// A collective on a process group. inputs {x} -> outputs {y}. `bytes` is the full tensor's size (nccl-tests).
// gather_dim / scatter_dim are normalized dims of the local tensors (all-gather concatenates rank slices along
// gather_dim; reduce-scatter leaves rank r with slice r of scatter_dim).
// Async TP ring steps (p2p, ring_step >= 1): see ChunkRef.
// Pipeline transfers (p2p on Group::pp, plans/lower/rewrite/pipeline_stage.h) go one way: a send reads {x} and writes
// nothing, a receive reads nothing and writes {y}; `peer` is the pp rank on the other side and `peer_stage` its stage
// (the stage that sends what a receive gets, or that receives what a send gives). Their `bytes` are this rank's local
// tensor: each tp rank sends its own shard to the same tp rank of the next stage, as torch's PipelineStage does.
struct CollectiveOp {
  CollectiveKind kind = CollectiveKind::all_reduce;
  Group group = Group::tp;
  ReduceOp reduce = ReduceOp::sum;
  DType dtype = DType::bf16;
  int64_t bytes = 0;
  int gather_dim = -1, scatter_dim = -1;
  int peer = -1, peer_stage = -1;
};

// Async TP (micro-pipelined) chunks, along the token dim (dim 1 of (b, s, h), in chunks of s/tp), on rank r.
// pattern all_gather (a sequence-sharded input gathered while matmuls consume it; several matmuls may share it):
//   p2p step 0 copies the local shard (its input) into slot r of the gathered tensor and moves nothing;
//   p2p step j >= 1 sends slot (r-j+1) mod tp to rank r+1 and receives slot (r-j) mod tp from rank r-1;
//   a gemm of step j reads rows of slot (r-j) mod tp of its A operand and writes those rows of its output.
//   The p2p of step j+1 is listed before the gemms of step j, and those gemms depend only on the p2p of step j,
//   so the next slot travels while this one is multiplied.
// pattern reduce_scatter (matmuls whose partial sums are reduce-scattered), on rank r:
//   the gemms of step j compute rows of chunk (r+j+1) mod tp of their A operands into that step's partial tensor
//   (the first writes, the others accumulate); for j >= 1 an add sums the partial with what the p2p of step j-1
//   received; the p2p of step j (j < tp-1) sends that sum to rank r-1 and receives the next step's input from
//   rank r+1. The sum of step tp-1 is chunk r, fully reduced: the reduce-scatter's output tensor.
// Executors must wait for a non-blocking collective when a later op lists it in `deps` (not whenever an op reads a
// tensor it writes: ring steps write disjoint slots of one tensor).
struct ChunkRef {
  enum class Pattern { none, all_gather, reduce_scatter };
  Pattern pattern = Pattern::none;
  int step = 0;
  int count = 0;  // tp
};

using OpKind = std::variant<GemmOp, AttentionOp, ElementwiseOp, EmbeddingOp, CrossEntropyOp, CastFp8Op, CollectiveOp>;
// "gemm", "attention", "elementwise", "embedding", "cross_entropy", "cast_fp8", "collective"
std::string_view kind_name(const OpKind& k);

struct Op {
  int id = 0;          // index in its segment
  std::string module;  // FQN, layer-relative in block segments ("attention.wq")
  std::string name;    // module + what: "attention.wq.fwd", "attention.wq.bwd_input", "attention.fwd.all_gather"
  Phase phase = Phase::forward;
  std::vector<int> deps;
  std::vector<TensorId> inputs, outputs;
  OpKind kind;
  ChunkRef chunk;
  // A fused op of a compiled Program (ElementwiseOp's "Fused ops"): the names of the eager ops it replaces (the norm's
  // own first, then the residual add or gradient sum; both ropes in their order; a folded float8 amax last).
  // Empty for every other op. A profile records the fused kernel once, on this op, with this list (profile_format.h).
  std::vector<std::string> fused;

  bool is_collective() const { return std::holds_alternative<CollectiveOp>(kind); }
};

struct Segment {
  SegmentKind kind = SegmentKind::embed_fwd;
  int repeat = 1;        // n_layers for block segments (layer_count when set)
  bool reverse = false;  // block.bwd runs layers L-1 .. 0
  std::vector<Op> ops;
  // A block segment that covers part of the layers: layers first_layer .. first_layer + layer_count - 1 (a plan's
  // ac_layers splits the block backward; a dense-first mixture of experts has a segment per block variant: see
  // "Structure"). layer_count 0: every layer of the model.
  int first_layer = 0;
  int layer_count = 0;
};

struct LayerChain {
  TensorId in = -1, out = -1;       // per-layer tensors
  TensorId source = -1, sink = -1;  // global tensors
  bool reverse = false;
};

struct Program {
  Model model;
  Training training;  // local_batch_size and activation_checkpointing as the plan sets them
  Plan plan;
  int tp = 1;
  // FSDP's shard group, dp_shard x cp (Plan::dp_shard x Plan::cp_degree): parameters, gradients and optimizer state
  // are sharded over it.
  int dp = 1;
  int dp_replicate = 1;  // HSDP replicas (Plan::dp_replicate); the mesh is [dp_replicate, dp_shard, cp, tp]
  // Context parallelism (Plan::cp_degree): the Program is one cp rank's, holding seq_len / cp tokens of each sequence
  // (training.seq_len stays the whole sequence's length).
  int cp = 1;
  // Expert parallelism (Plan::ep_degree; plans/language/expert_parallel.h): routed experts split over ep ranks and
  // FSDP-sharded over efsdp = dp x tp / ep ranks. ep 1: efsdp is dp (experts shard like every parameter).
  int ep = 1;
  int efsdp = 1;
  // The FSDP degree of a parameter (or its gradient, optimizer state): efsdp for a routed expert's under EP, else dp.
  int fsdp_degree(const TensorDesc& t) const { return t.expert && ep > 1 ? efsdp : dp; }
  // Pipeline parallelism: the stage this Program is (plans/lower/rewrite/pipeline_stage.h) and the blocks it holds,
  // layers first_layer .. first_layer + layer_count - 1 by their global numbers. A Program of the whole model (what
  // lower() returns) is stage -1 of 1 and holds every block (layer_count -1).
  struct Stage {
    int index = -1;
    int count = 1;
    int first_layer = 0;
    int layer_count = -1;
  };
  Stage stage;
  // Tensors live in a deque: appending never moves the existing ones, so a `const TensorDesc&` taken before the
  // lowering adds a tensor stays valid after it (holding such references across appends once read freed memory
  // and changed predictions). Index with TensorId; never erase or insert in the middle.
  std::deque<TensorDesc> tensors;
  std::vector<Segment> segments;
  std::vector<LayerChain> chains;
  TensorId tokens = -1, targets = -1, loss = -1;

  const TensorDesc& tensor(TensorId id) const { return tensors.at(static_cast<size_t>(id)); }
  const Segment* segment(SegmentKind kind) const;  // the first segment of that kind, or nullptr
  // Tokens of each sequence this rank holds: seq_len / cp.
  int64_t local_seq_len() const { return training.seq_len / cp; }
  // Tokens this rank computes per microbatch: local_batch_size x seq_len / cp (a TP group shares them).
  int64_t tokens_per_rank() const { return training.local_batch_size * local_seq_len(); }
  // The blocks the Program holds: stage.first_layer and stage.layer_count, or 0 and model.n_layers for the whole model.
  int first_layer() const { return stage.layer_count < 0 ? 0 : stage.first_layer; }
  int layer_count() const { return stage.layer_count < 0 ? static_cast<int>(model.n_layers) : stage.layer_count; }
  // The copies of tensor `t` in a step: 1 for a global tensor, else its layers (TensorDesc::layer_count, or
  // layer_count() when 0).
  int copies(const TensorDesc& t) const { return !t.per_layer ? 1 : t.layer_count > 0 ? t.layer_count : layer_count(); }
};

// expand()'s rule: a segment is instantiated once per layer when it repeats or is a block segment.
bool is_per_layer_segment(const Segment& s);
// Instances of a segment: its layers (layer_count, or the Program's layer_count()) for per-layer segments, else 1.
int segment_instances(const Program& p, const Segment& s);
// The layer of instance `i` of segment `s`: first_layer + i, or counting down from its last layer when reverse
// (-1 outside per-layer segments).
int instance_layer(const Program& p, const Segment& s, int i);
// The instance of `s` that runs layer `layer`, -1 when `s` does not cover it.
int layer_instance(const Program& p, const Segment& s, int layer);

// One op of the expanded step: every layer instantiated, tensor ids global, deps global.
struct FlatTensor {
  std::string fqn;  // "layers.3.attention.wq.weight"
  TensorId template_id = -1;
  int layer = -1;
};
struct FlatOp {
  const Op* op = nullptr;            // the template op
  int layer = -1;                    // -1 outside blocks
  std::string module;                // full FQN
  std::string name;                  // full FQN name
  std::vector<int> inputs, outputs;  // flat tensor ids
  std::vector<int> deps;             // flat op ids (dataflow across segments and layers included)
};
struct FlatProgram {
  std::vector<FlatTensor> tensors;
  std::vector<FlatOp> ops;
};
// Instantiates every layer the Program holds (Program::first_layer() .. + layer_count()). Layer chains alias tensors
// across layers (a chain over no layer makes its sink its source); other per-layer tensors get one flat tensor per
// layer; global tensors one each.
FlatProgram expand(const Program& p);

// The full FQN of a layer-relative name in layer `layer` ("layers.3." + name); `name` itself when layer < 0.
std::string layer_fqn(int layer, const std::string& name);

}  // namespace tptune
