#include "plans/lower/lower.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <vector>

#include "plans/language/module_names.h"
#include "plans/lower/finish.h"
#include "plans/lower/incremental.h"
#include "plans/lower/input_checks.h"
#include "plans/lower/layers.h"
#include "plans/lower/rewrite/async_tp.h"
#include "plans/util/checked_math.h"
#include "plans/util/error.h"
#include "plans/util/limits.h"

namespace tptune {

using lowering::Emitter;
using lowering::Layers;
using lowering::Value;

namespace {

class Lowerer {
 public:
  // `recycled`: any earlier Program, whose buffers the lowering reuses (Emitter); the result does not depend on it.
  Lowerer(const Model& m, const Training& t, const Plan& plan, Program recycled = {}, bool names = true)
      : m(m),
        tp(plan.tp_degree),
        prog(std::move(recycled)),
        e(prog, plan.tp_degree),
        layers(e, m, prog.training, prog.plan) {
    prog.model = m;
    set_plan(prog, t, plan);
    prog.chains.clear();
    prog.tokens = prog.targets = prog.loss = -1;
    e.names = names;
  }

  // The Program's training and plan fields as lowering `plan` sets them.
  static void set_plan(Program& prog, const Training& t, const Plan& plan) {
    prog.training = t;
    prog.training.local_batch_size = plan.local_batch_size;
    prog.training.activation_checkpointing = plan.activation_checkpointing;
    prog.plan = plan;
    if (plan.tp_degree == 1) {
      // At tp 1 torchtitan does not apply TP: no module styles, no TP collectives.
      prog.plan.modules.clear();
      prog.plan.loss_parallel = false;
      prog.plan.async_tp = false;
    }
    prog.tp = plan.tp_degree;
    // FSDP shards over dp_shard x cp (torchtitan's flattened "fsdp" mesh); the cp ranks split each sequence.
    prog.dp = plan.dp_shard * plan.cp_degree;
    prog.dp_replicate = plan.dp_replicate;
    prog.cp = plan.cp_degree;
    // Expert parallelism: the sparse mesh's ep and efsdp (plans/language/expert_parallel.h; checked by check_inputs).
    prog.ep = plan.ep_degree;
    prog.efsdp = plan.ep_degree > 1 ? prog.dp * plan.tp_degree / plan.ep_degree : prog.dp;
  }

  Program run() {
    // Context parallelism: tokens and targets are this cp rank's seq/cp (its head and tail chunks), and so is every
    // token-wise op after them.
    const int64_t b = prog.training.local_batch_size, s = prog.local_seq_len();
    // --- embedding forward ---
    e.begin_segment(SegmentKind::embed_fwd);
    prog.tokens = e.tensor("tokens", {b, s}, DType::fp32, Placement::R(), TensorRole::input);
    prog.targets = e.tensor("targets", {b, s}, DType::fp32, Placement::R(), TensorRole::input);
    size_t embed_tape = e.tape_size();
    Layers::Name emb{"tok_embeddings", "tok_embeddings"};
    size_t mark = fsdp_gather_begin();
    Value tok = e.plain(prog.tokens);
    Value x0 = layers.embedding(emb, tok);
    fsdp_gather_end(mark);
    const int embed_gather = fsdp_op;  // the embedding group's FSDP all-gather (op of segment 0), -1 without FSDP
    Params embed_params = params_since(mark);
    size_t embed_tape_end = e.tape_size();

    // --- the block forward: one template, or one per block variant (dense first blocks of a mixture of experts,
    // plans/program/program.h "Structure"), all reading the one block input tensor ---
    std::vector<Variant> variants = block_variants();
    const bool two = variants.size() > 1;
    TensorId x_in = -1;
    for (size_t v = 0; v < variants.size(); ++v) {
      Variant& b = variants[v];
      e.begin_segment(SegmentKind::block_fwd, b.repeat, false, b.first_layer, b.layer_count);
      e.per_layer = true;
      if (v == 0)
        x_in = e.tensor("input", e.desc(x0.t).local_shape, e.desc(x0.t).dtype, e.desc(x0.t).placement,
                        TensorRole::activation, e.desc(x0.t).global_shape);
      if (two) enter_variant(b, v);
      b.xin = x0.dtensor ? e.dtensor(x_in, x0.pl) : e.plain(x_in, x0.pl);
      b.tape = e.tape_size();
      mark = fsdp_gather_begin(!two || b.moe);  // (the experts' all-gather on efsdp: MoE blocks only)
      b.xout = block(b.xin, b.moe);
      fsdp_gather_end(mark);
      b.params = params_since(mark);
      b.tape_end = e.tape_size();
      const Value &xin = b.xin, &xout = b.xout;
      if (xout.dtensor != xin.dtensor || e.shape(xout) != e.shape(xin) || (xout.dtensor && !xout.pl.same_as(xin.pl, 3)))
        throw ModuleError(
            fmt::format("layers.{}", b.first_layer),
            fmt::format("a block must return what it receives so that blocks stack: it "
                        "receives a {} {} and returns a {} {}",
                        xin.dtensor ? "DTensor " + to_string(xin.pl) : "plain tensor", to_string(e.shape(xin)),
                        xout.dtensor ? "DTensor " + to_string(xout.pl) : "plain tensor", to_string(e.shape(xout))));
      // One block output tensor: the earlier variant's output op writes this variant's (so that one chain links
      // every layer).
      if (v > 0) join(1, variants[v - 1].xout, b.xout, "output");
      leave_variant();
    }
    const Value xin = variants.front().xin, xout = variants.back().xout;

    // --- head: final norm, output, loss, and their backward ---
    e.begin_segment(SegmentKind::head);
    TensorId h_in = e.tensor("norm.input", e.desc(x_in).local_shape, e.desc(x_in).dtype, e.desc(x_in).placement,
                             TensorRole::activation, e.desc(x_in).global_shape);
    prog.chains.push_back({x_in, xout.t, x0.t, h_in, false});
    Value hin = xin.dtensor ? e.dtensor(h_in, xin.pl) : e.plain(h_in, xin.pl);
    size_t head_tape = e.tape_size();
    // Tied embeddings: torchtitan (torchtitan/distributed/fsdp.py apply_fsdp_to_decoder, 0.3) shards tok_embeddings,
    // norm and the output as one FSDP unit, fully_shard([tok_embeddings, norm, lm_head]) with reshard_after_forward
    // only under the "always" policy: its one all-gather (the embedding's, completed below with the head's
    // parameters) runs before the embedding, the parameters stay unsharded through the step (no gather before the
    // head or the embedding backward), and its one reduce-scatter runs after the last backward of the unit, the
    // embedding's.
    const bool tied_unit = m.tie_word_embeddings;
    mark = tied_unit ? layers.params.size() : fsdp_gather_begin();
    Value hn = layers.norm({"norm", "norm"}, hin);
    const Layers::Name out_name{prog.plan.output_fqn, prog.plan.output_fqn};
    size_t head_tape_end = 0;
    if (prog.plan.chunks() > 1) {
      auto head = layers.chunked_head(out_name, hn, m.dim, m.vocab_size, prog.targets, prog.plan.chunks());
      prog.loss = head.loss;
      head_tape_end = head.backward_end;
    }
    Value logits;
    if (prog.plan.chunks() <= 1) logits = layers.linear(out_name, hn, m.dim, m.vocab_size, false);
    if (!tied_unit) fsdp_gather_end(mark);
    Params head_params = params_since(mark);
    if (tied_unit) add_to_gather(0, embed_gather, head_params);
    if (prog.plan.chunks() <= 1) {
      prog.loss = layers.loss({"loss", "loss"}, logits, prog.targets);
      head_tape_end = e.tape_size();
    }
    e.phase = Phase::backward;
    e.run_backward(head_tape, head_tape_end);
    if (!tied_unit) fsdp_reduce(head_params);
    auto g_hin = e.grad(hin);
    if (!g_hin) throw Error("internal: no gradient reaches the last block");

    // --- the block backward (with recompute): the variants in reverse, all reading the one output gradient and
    // writing the one input gradient ---
    TensorId g_out = -1;
    std::optional<Value> g_xin;
    for (size_t r = variants.size(); r-- > 0;) {
      Variant& b = variants[r];
      e.begin_segment(SegmentKind::block_bwd, b.repeat, true, b.first_layer, b.layer_count);
      e.per_layer = true;
      if (r + 1 == variants.size())
        g_out = e.tensor("output.grad", e.desc(g_hin->t).local_shape, e.desc(g_hin->t).dtype,
                         e.desc(g_hin->t).placement, TensorRole::gradient, e.desc(g_hin->t).global_shape);
      if (two) enter_variant(b, r);
      fsdp_gather(b.params);
      e.seed_grad(b.xout, g_hin->dtensor ? e.dtensor(g_out, g_hin->pl) : e.plain(g_out, g_hin->pl));
      e.run_backward(b.tape, b.tape_end);
      auto g = e.grad(b.xin);
      if (!g) throw Error("internal: no gradient reaches the block input");
      fsdp_reduce(b.params);
      if (g_xin)
        join(0, *g, *g_xin, "input gradient");
      else
        g_xin = g;
      leave_variant();
    }

    // --- embedding backward ---
    e.begin_segment(SegmentKind::embed_bwd);
    TensorId g_emb = e.tensor("tok_embeddings.out.grad", e.desc(g_xin->t).local_shape, e.desc(g_xin->t).dtype,
                              e.desc(g_xin->t).placement, TensorRole::gradient, e.desc(g_xin->t).global_shape);
    prog.chains.push_back({g_out, g_xin->t, g_hin->t, g_emb, true});
    if (!tied_unit) fsdp_gather(embed_params);
    e.seed_grad(x0, g_xin->dtensor ? e.dtensor(g_emb, g_xin->pl) : e.plain(g_emb, g_xin->pl));
    e.run_backward(embed_tape, embed_tape_end);
    Params globals = embed_params;
    globals.insert(globals.end(), head_params.begin(), head_params.end());
    fsdp_reduce(tied_unit ? globals : embed_params);

    if (prog.plan.clip_grad_norm) grad_norm(variants, globals);

    // --- optimizer: AdamW on every local shard (each block variant's once per layer of it) ---
    for (size_t v = 0; v < variants.size(); ++v) {
      const Variant& b = variants[v];
      e.begin_segment(SegmentKind::block_optimizer, b.repeat, false, b.first_layer, b.layer_count);
      e.per_layer = true;
      if (two) enter_variant(b, v);
      if (b.moe) tokens_per_expert_all_reduce();
      optimizer(b.params);
      leave_variant();
    }
    e.begin_segment(SegmentKind::optimizer);
    optimizer(globals);
    e.finish();

    return std::move(prog);  // finish_in_place() adds what depends on activation checkpointing
  }

 private:
  const Model& m;
  const int tp;
  Program prog;
  Emitter e;
  Layers layers;
  int fsdp_op = -1, efsdp_op = -1;

  // A block template of the Program: every block, or one variant of a dense-first mixture of experts' blocks
  // (plans/program/program.h "Structure"): its MLP, its layers (first_layer, layer_count: 0, 0 for every layer) and
  // what its lowering gave (its input and output values, its autograd tape range, its parameters).
  struct Variant {
    bool moe = false;
    int first_layer = 0, layer_count = 0, repeat = 0;
    Value xin, xout;
    size_t tape = 0, tape_end = 0;
    std::vector<TensorId> params;
  };
  std::vector<Variant> block_variants() const {
    const int L = checked_int(m.n_layers, "model.n_layers");
    const int64_t k = m.dense_first_blocks();
    if (k <= 0 || k >= L) {  // one template (every block dense when k = L)
      Variant every;
      every.moe = m.moe.experts > 0 && k <= 0;
      every.repeat = L;
      return {every};
    }
    Variant dense, moe;
    dense.layer_count = dense.repeat = static_cast<int>(k);
    moe.moe = true;
    moe.first_layer = static_cast<int>(k);
    moe.layer_count = moe.repeat = static_cast<int>(L - k);
    return {dense, moe};
  }
  // Per-layer tensors from now on are variant `index`'s (`b`): its layers and its tensor names.
  void enter_variant(const Variant& b, size_t index) {
    e.name_scope(static_cast<int>(index));
    e.first_layer = b.first_layer;
    e.layer_count = b.layer_count;
  }
  void leave_variant() {
    e.per_layer = false;
    e.first_layer = e.layer_count = 0;
  }
  // The block variants share their output (and input gradient) tensor: the ops of the segment `back` segments before
  // the one being emitted (0: that one) that read or write from.t use to.t instead, which every layer has. `what`
  // names it.
  void join(size_t back, Value& from, const Value& to, const char* what) {
    const TensorDesc &a = prog.tensor(from.t), &b = prog.tensor(to.t);
    if (a.local_shape != b.local_shape || a.global_shape != b.global_shape || a.dtype != b.dtype ||
        !(a.placement == b.placement) || from.dtensor != to.dtensor)
      throw Error(fmt::format("internal: the dense and the MoE blocks' {} differ ({} {} vs {} {})", what,
                              to_string(a.local_shape), to_string(a.placement), to_string(b.local_shape),
                              to_string(b.placement)));
    Segment& s = prog.segments.at(e.segment_index() - back);
    for (Op& op : s.ops) {
      std::replace(op.inputs.begin(), op.inputs.end(), from.t, to.t);
      std::replace(op.outputs.begin(), op.outputs.end(), from.t, to.t);
    }
    TensorDesc& shared = prog.tensors[static_cast<size_t>(to.t)];
    shared.first_layer = shared.layer_count = 0;
    from.t = to.t;
  }

  Value block(const Value& x, bool moe) {
    Layers::Name L{"layers.0", ""};
    auto c = [&](const std::string& leaf) { return layers.child(L, leaf); };
    Value n1 = layers.norm(c("attention_norm"), x);
    Layers::Name att = c("attention");
    Value a_in = layers.module_input(att, n1);
    const int64_t hd = m.head_dim();
    Value q, k, v;
    if (m.mla.kv_lora_rank > 0) {  // multi-head latent attention (plans/lower/mla.cc), then wo as below
      const Value o = layers.mla(att, a_in);
      const Value a =
          layers.linear(layers.child(att, "wo"), o, checked_mul(m.n_heads, m.mla.v_head_dim, "wo width"), m.dim, true);
      return mlp_half(x, a, moe);
    }
    if (prog.plan.fused_qkv) {
      // FusedQKVLinear: one GEMM of the summed width, split into contiguous q, k, v.
      if (m.n_kv_heads % tp != 0)
        throw ModuleError(layers.child(att, "wqkv").fqn,
                          fmt::format("tp {} does not divide the {} kv heads: a fused wqkv's colwise shard must hold "
                                      "whole kv groups",
                                      tp, m.n_kv_heads));
      Value qkv =
          layers.linear(layers.child(att, "wqkv"), a_in, m.dim, (m.n_heads + 2 * m.n_kv_heads) * hd, true, m.qkv_bias);
      layers.split_qkv(att, qkv, q, k, v);
    } else {
      q = layers.linear(layers.child(att, "wq"), a_in, m.dim, m.n_heads * hd, true, m.qkv_bias);
      k = layers.linear(layers.child(att, "wk"), a_in, m.dim, m.n_kv_heads * hd, true, m.qkv_bias);
      v = layers.linear(layers.child(att, "wv"), a_in, m.dim, m.n_kv_heads * hd, true, m.qkv_bias);
    }
    if (m.qk_norm) {  // Qwen3: RMSNorm(head_dim) on each head of q and k, before rope
      q = layers.head_norm(layers.child(att, "q_norm"), q, hd);
      k = layers.head_norm(layers.child(att, "k_norm"), k, hd);
    }
    Value o;
    layers.attention_core(att, q, k, v, o);
    Value a = layers.linear(layers.child(att, "wo"), o, m.n_heads * hd, m.dim, true);
    return mlp_half(x, a, moe);
  }

  // The block after its attention output `a`: the residual, ffn_norm and the MLP (MoE when `moe`, else dense), and
  // its residual.
  Value mlp_half(const Value& x, const Value& a, bool moe) {
    Layers::Name L{"layers.0", ""};
    auto c = [&](const std::string& leaf) { return layers.child(L, leaf); };
    Value h = layers.add(c("attention"), x, a);
    Value n2 = layers.norm(c("ffn_norm"), h);
    if (moe) {  // (returned in the norm's layout; the residual stream may hold its local tensor)
      Value f = layers.moe(c("moe"), n2);
      if (f.dtensor && !h.dtensor) f = e.to_local(f);
      return layers.add(c("moe"), h, f);
    }
    Layers::Name ff = c("feed_forward");
    Value f_in = layers.module_input(ff, n2);
    Value y;
    if (m.mlp == Mlp::swiglu) {
      Value g1 = layers.linear(layers.child(ff, "w1"), f_in, m.dim, m.ffn_dim, true);
      Value g3 = layers.linear(layers.child(ff, "w3"), f_in, m.dim, m.ffn_dim, true);
      y = layers.swiglu(ff, g1, g3);
    } else {
      Value g1 = layers.linear(layers.child(ff, "w1"), f_in, m.dim, m.ffn_dim, true);
      y = layers.gelu(ff, g1);
    }
    Value f = layers.linear(layers.child(ff, "w2"), y, m.ffn_dim, m.dim, true);
    return layers.add(c("feed_forward"), h, f);
  }

  using Params = std::vector<TensorId>;
  Params params_since(size_t mark) const { return Params(layers.params.begin() + mark, layers.params.end()); }
  TensorId grad_tensor_of(TensorId p) const {
    auto it = layers.grad_of.find(p);
    if (it == layers.grad_of.end())
      throw Error(fmt::format("internal: parameter '{}' has no gradient", prog.tensor(p).name));
    return it->second;
  }

  // FSDP (dp_shard > 1): one all-gather of a module group's parameters on the dp group before its forward (and
  // again before its backward), and one reduce-scatter of its gradients after its backward; bf16, or float8 for
  // the block's linear weights with tensorwise float8 (FSDP float8 all-gather).
  int64_t fsdp_param_bytes(const Params& params) const {
    int64_t bytes = 0;
    for (TensorId p : params) {
      const auto& d = prog.tensor(p);
      bool fp8 = prog.plan.float8 == Float8Recipe::tensorwise && d.per_layer && d.local_shape.size() == 2;
      bytes += numel(d.local_shape) * (fp8 ? 1 : 2);
    }
    return bytes;
  }
  // Expert parallelism: routed experts' parameters are FSDP-sharded over efsdp, in a group of their own (torchtitan's
  // apply_fsdp: fully_shard(moe.experts, mesh=efsdp) inside the block's unit), every other one over dp.
  bool on_efsdp(TensorId p) const { return prog.ep > 1 && prog.tensor(p).expert; }
  bool efsdp_collectives() const { return prog.ep > 1 && prog.efsdp > 1; }
  Params fsdp_part(const Params& params, bool experts) const {
    Params out;
    for (TensorId p : params)
      if (on_efsdp(p) == experts) out.push_back(p);
    return out;
  }
  // The forward all-gather is emitted before the group's ops and completed once its parameters are known; `block`:
  // with the experts' own all-gather on efsdp.
  size_t fsdp_gather_begin(bool block = false) {
    fsdp_op = efsdp_op = -1;
    if (prog.dp > 1)
      fsdp_op = e.op("fsdp", "fsdp.all_gather",
                     CollectiveOp{CollectiveKind::all_gather, Group::dp, ReduceOp::sum, DType::bf16, 0, 0, -1}, {}, {});
    if (block && efsdp_collectives())
      efsdp_op =
          e.op("fsdp", "fsdp.experts.all_gather",
               CollectiveOp{CollectiveKind::all_gather, Group::efsdp, ReduceOp::sum, DType::bf16, 0, 0, -1}, {}, {});
    return layers.params.size();
  }
  void fsdp_gather_end(size_t mark) {
    for (auto [index, experts] : {std::pair{fsdp_op, false}, std::pair{efsdp_op, true}}) {
      if (index < 0) continue;
      Op& op = e.seg().ops[static_cast<size_t>(index)];
      Params ps = params_since(mark);
      if (prog.ep > 1) ps = fsdp_part(ps, experts);
      std::get<CollectiveOp>(op.kind).bytes = fsdp_param_bytes(ps);
      op.outputs.assign(ps.begin(), ps.end());
    }
  }
  // Adds `params` to the FSDP all-gather `op` of segment `segment` (one unit over modules of several segments).
  void add_to_gather(size_t segment, int op, const Params& params) {
    if (op < 0) return;
    Op& g = prog.segments.at(segment).ops.at(static_cast<size_t>(op));
    g.outputs.insert(g.outputs.end(), params.begin(), params.end());
    Params all(g.outputs.begin(), g.outputs.end());
    std::get<CollectiveOp>(g.kind).bytes = fsdp_param_bytes(all);
  }
  void fsdp_gather(const Params& all) {
    const Params params = prog.ep > 1 ? fsdp_part(all, false) : all;
    if (prog.dp > 1)
      e.op("fsdp", "fsdp.all_gather",
           CollectiveOp{CollectiveKind::all_gather, Group::dp, ReduceOp::sum, DType::bf16, fsdp_param_bytes(params), 0,
                        -1},
           {}, params);
    if (!efsdp_collectives()) return;
    const Params experts = fsdp_part(all, true);
    if (!experts.empty())
      e.op("fsdp", "fsdp.experts.all_gather",
           CollectiveOp{CollectiveKind::all_gather, Group::efsdp, ReduceOp::sum, DType::bf16, fsdp_param_bytes(experts),
                        0, -1},
           {}, experts);
  }
  // The gradient reduce-scatter runs in fp32: torchtitan's MixedPrecisionPolicy reduce_dtype is
  // training.mixed_precision_reduce, whose only allowed (and default) value is float32 (2025 and 0.3 alike), so it
  // moves 4 bytes per gradient element, twice the bf16 all-gather of the same parameters.
  // HSDP (dp_replicate > 1): FSDP2's foreach_reduce (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py)
  // reduce-scatters in the shard group, then all-reduces the reduce-scatter output (this rank's gradient shard, still
  // in reduce_dtype, fp32) in the replicate group, on its own all-reduce stream after waiting for the reduce-scatter
  // stream. With dp_shard 1 the reduce-scatter is a local copy and only the all-reduce runs (torchtitan 0.3 always
  // applies fully_shard). Each parameter's dim 0 is padded to a multiple of dp_shard (_get_dim0_padded_size), so the
  // shard of a (d0, rest...) gradient is ceil(d0 / dp_shard) x rest elements.
  // Expert parallelism: the experts' gradients are reduce-scattered over efsdp, a group of their own (their shard
  // then all-reduced over dp_replicate like the others').
  void fsdp_reduce(const Params& all) {
    if (prog.ep > 1) {
      fsdp_reduce_group(fsdp_part(all, false), Group::dp, prog.dp);
      const Params experts = fsdp_part(all, true);
      if (!experts.empty()) fsdp_reduce_group(experts, Group::efsdp, prog.efsdp);
      return;
    }
    fsdp_reduce_group(all, Group::dp, prog.dp);
  }
  void fsdp_reduce_group(const Params& params, Group group, int degree) {
    if (degree <= 1 && prog.dp_replicate <= 1) return;
    std::vector<TensorId> grads;
    int64_t bytes = 0, shard_bytes = 0;
    for (TensorId p : params) {
      grads.push_back(grad_tensor_of(p));
      const Shape& shape = prog.tensor(grads.back()).local_shape;
      const int64_t n = numel(shape);
      bytes += n * 4;
      const int64_t d0 = shape.empty() ? 1 : shape[0];
      if (n > 0) shard_bytes += (d0 + degree - 1) / degree * (n / d0) * 4;
    }
    if (degree > 1)
      e.op("fsdp", group == Group::dp ? "fsdp.reduce_scatter" : "fsdp.experts.reduce_scatter",
           CollectiveOp{CollectiveKind::reduce_scatter, group, ReduceOp::sum, DType::fp32, bytes, -1, 0}, grads, grads);
    if (prog.dp_replicate > 1)
      e.op("fsdp", "fsdp.all_reduce",
           CollectiveOp{CollectiveKind::all_reduce, Group::dp_replicate, ReduceOp::sum, DType::fp32, shard_bytes, -1,
                        -1},
           grads, grads);
  }

  // torchtitan's gradient clipping, before the optimizer step (torchtitan/distributed/utils.py clip_grad_norm_,
  // called by Trainer.train_step with max_norm = training.max_norm, 1.0 by default, foreach=True):
  //   torch.nn.utils.get_total_norm(grads, 2.0, foreach=True)  (torch/nn/utils/clip_grad.py _get_total_norm):
  //       torch._foreach_norm over the local gradient shards, one norm per gradient, placed _NormPartial on every mesh
  //       dim the gradients are sharded on (Replicate on HSDP's dp_replicate); torch.stack of them (n_grads fp32), and
  //       linalg.vector_norm of the stack, whose DTensor rule first redistributes the stack to Replicate: per
  //       _NormPartial mesh dim one all_reduce(SUM) of the n_grads squared norms, dp_shard's dim first (mesh order
  //       [dp_replicate, dp_shard, tp]), then tp's;
  //   total_norm.full_tensor(): already replicated, no collective;
  //   torch.nn.utils.clip_grads_with_norm_: clip_coef = clamp(max_norm / (total + 1e-6), max=1), then
  //       torch._foreach_mul_(grads, clip_coef) on every local shard (always, clipped or not).
  // Checked on torch 2.15.0 with a fake process group of 8 ranks, mesh [dp_shard 2, tp 4], 4 gradients placed
  // (S(0), S(0)), (S(0), S(1)), (S(0), R), (S(0), S(0)): funcol.all_reduce of a (4,) fp32 tensor on mesh dim 0, then
  // on mesh dim 1; on [dp_replicate 2, dp_shard 2, tp 2] the same two (none on dp_replicate); on [tp 8] one.
  // Ops (one segment "grad_norm", once per step, after every gradient is reduced): grad_norm.local reads every local
  // gradient shard once (fp32 under FSDP's reduce_dtype: 4 B per element; 2 flops), the all-reduces of 4 B per
  // gradient, grad_norm.clip reads and writes every shard (8 B per element). They read the embedding's and head's
  // gradients (the last reduced), so they run after the backward; block gradients are counted in the bytes (a
  // non-repeated segment cannot name per-layer tensors), and the compute stream runs them before any AdamW.
  // (Each block variant's gradients once per layer of it.)
  void grad_norm(const std::vector<Variant>& variants, const Params& globals) {
    e.begin_segment(SegmentKind::grad_norm);
    e.phase = Phase::optimizer;
    int64_t elems = 0, n_grads = 0;
    for (const Variant& b : variants) {
      int64_t one = 0;  // one block's
      for (TensorId p : b.params)
        one = checked_add(one, numel(prog.tensor(p).local_shape) / prog.fsdp_degree(prog.tensor(p)), "gradients");
      elems = checked_add(elems, checked_mul(one, b.repeat, "gradients"), "gradients");
      n_grads =
          checked_add(n_grads, checked_mul(static_cast<int64_t>(b.params.size()), b.repeat, "gradients"), "gradients");
    }
    for (TensorId p : globals) elems = checked_add(elems, numel(prog.tensor(p).local_shape) / prog.dp, "gradients");
    // One norm per gradient: the blocks' per layer, then the embedding's and the head's.
    n_grads = checked_add(n_grads, static_cast<int64_t>(globals.size()), "gradients");
    Params grads;
    for (TensorId p : globals) grads.push_back(grad_tensor_of(p));
    const Shape norms{n_grads}, scalar{1};
    TensorId norm = e.tensor("grad_norm.norms", norms, DType::fp32, Placement::P(), TensorRole::scale, norms);
    e.op("grad_norm", "grad_norm.local",
         ElementwiseOp{ElementwiseOp::Fn::grad_norm, checked_mul(elems, 4, "gradient bytes"), 2 * elems}, grads,
         {norm});
    if (prog.dp > 1)
      norm = e.collective("grad_norm", "dp", CollectiveKind::all_reduce, Group::dp, ReduceOp::sum, norm, norms, norms,
                          DType::fp32, TensorRole::scale);
    if (tp > 1)
      norm = e.collective("grad_norm", "tp", CollectiveKind::all_reduce, Group::tp, ReduceOp::sum, norm, norms, norms,
                          DType::fp32, TensorRole::scale);
    TensorId coef = e.tensor("grad_norm.clip_coef", scalar, DType::fp32, Placement::R(), TensorRole::scale, scalar);
    grads.insert(grads.begin(), norm);
    e.op("grad_norm", "grad_norm.clip",
         ElementwiseOp{ElementwiseOp::Fn::grad_clip, checked_mul(elems, 8, "gradient bytes"), elems}, grads, {coef});
  }

  // The optimizer pre-hook of a mixture of experts (torchtitan 0.3.0's MoE load balancing, components/optimizer/
  // optimizer.py _update_expert_bias): the block's tokens_per_expert histogram (experts fp32, each rank's tokens),
  // summed over the ranks that saw other tokens: tp when EP splits the router's tokens over it, then the loss mesh
  // (dp_replicate x dp_shard x cp; here one all-reduce per mesh dim, as a DTensor Partial -> Replicate redistribution
  // does); then the aux-loss-free expert_bias update on the sum. torchtitan stacks every MoE block's histogram into
  // one all-reduce; a Program's block segments repeat one block's ops, so each block all-reduces its own (the same
  // bytes, in one collective launch per block instead of one per step).
  void tokens_per_expert_all_reduce() {
    e.phase = Phase::optimizer;
    const int64_t E = m.moe.experts;
    const Shape s{E};
    const Layers::RouterBuffers buffers = layers.router_buffers;
    if (buffers.counts < 0 || buffers.expert_bias < 0) throw Error("tokens_per_expert: no MoE router was lowered");
    TensorId t = buffers.counts;
    if (prog.ep > 1 && tp > 1)
      t = e.collective("moe", "tokens_per_expert.tp", CollectiveKind::all_reduce, Group::tp, ReduceOp::sum, t, s, s,
                       DType::fp32, TensorRole::scale);
    if (prog.dp_replicate > 1)
      t = e.collective("moe", "tokens_per_expert.dp_replicate", CollectiveKind::all_reduce, Group::dp_replicate,
                       ReduceOp::sum, t, s, s, DType::fp32, TensorRole::scale);
    if (prog.dp > 1)
      t = e.collective("moe", "tokens_per_expert.dp", CollectiveKind::all_reduce, Group::dp, ReduceOp::sum, t, s, s,
                       DType::fp32, TensorRole::scale);
    // Reads the sum and the bias, writes the bias (fp32): the sign, the two means and the add.
    e.op("moe.router", e.cat("moe.router", ".expert_bias.update"),
         ElementwiseOp{ElementwiseOp::Fn::moe_bias_update, checked_mul(E, 12, "expert_bias bytes"), 4 * E},
         {t, buffers.expert_bias}, {buffers.expert_bias});
  }

  void optimizer(const Params& params) {
    e.phase = Phase::optimizer;
    for (TensorId p : params) {
      TensorId g = grad_tensor_of(p);
      if (auto it = layers.reduced_at_optimizer.find(p); it != layers.reduced_at_optimizer.end()) {
        // DTensor without FSDP: the Partial gradient is all-reduced where the optimizer step reads it
        // (Partial -> Replicate redistribution of the grad in the foreach AdamW/clip_grad_norm_ ops).
        const TensorDesc gd = prog.tensor(g);
        g = e.collective(it->second, "optimizer_step", CollectiveKind::all_reduce, Group::tp, ReduceOp::sum, g,
                         gd.local_shape, gd.global_shape, gd.dtype, TensorRole::param_grad);
        layers.set_param_grad(p, g);
      }
      const TensorDesc pd = prog.tensor(p);
      TensorId mom = e.tensor(pd.name + ".exp_avg", pd.local_shape, DType::fp32, pd.placement,
                              TensorRole::optimizer_state, pd.global_shape);
      TensorId var = e.tensor(pd.name + ".exp_avg_sq", pd.local_shape, DType::fp32, pd.placement,
                              TensorRole::optimizer_state, pd.global_shape);
      if (pd.expert)
        prog.tensors[static_cast<size_t>(mom)].expert = prog.tensors[static_cast<size_t>(var)].expert = true;
      // FSDP shards the optimizer over dp. Per element: read fp32 master p, g, m, v (16 B), write p, m, v (12 B).
      int64_t elems = numel(pd.local_shape) / prog.fsdp_degree(pd);
      ElementwiseOp op{ElementwiseOp::Fn::adamw, 28 * elems, 12 * elems};
      std::string mod = pd.name.substr(0, pd.name.rfind('.'));
      e.op(mod, pd.name + ".adamw", op, {p, g, mom, var}, {p, mom, var});
    }
  }
};

}  // namespace

namespace {
// UnfinishedProgram::id: distinct over the process (the search's worker threads each lower their own).
uint64_t next_unfinished_id() {
  static std::atomic<uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}
}  // namespace

Program lower(const Model& model, const Training& training, const Plan& plan) {
  return finish_lowering(lower_unfinished(model, training, plan), plan.activation_checkpointing);
}

UnfinishedProgram lower_unfinished(const Model& model, const Training& training, const Plan& plan, Program recycled,
                                   bool names) {
  check_inputs(model, training, plan);
  Lowerer l(model, training, plan, std::move(recycled), names);
  UnfinishedProgram u{l.run()};
  u.id = next_unfinished_id();
  return u;
}

Program finish_lowering(UnfinishedProgram p, ActivationCheckpointing ac) {
  lowering::finish_in_place(p.prog, ac, &p);
  return std::move(p.prog);
}

void prepare_async_tp(UnfinishedProgram& u) {
  if (u.prog.plan.async_tp && u.prog.tp > 1 && !u.forward) {
    u.forward = u.prog.segments[1];
    u.rewrote = rewrite_async_tp(u.prog, 0, 3);
    u.id = next_unfinished_id();
  }
  if (!u.deps_prepared) {
    lowering::prepare_deps(u.prog);
    u.deps_prepared = true;
    u.id = next_unfinished_id();
  }
}

UnfinishedProgram unfinished_with_async_tp(UnfinishedProgram sibling, const Model& model, const Training& training,
                                           const Plan& plan) {
  check_inputs(model, training, plan);  // what lower_unfinished(model, training, plan) throws
  if (sibling.forward) return lower_unfinished(model, training, plan);  // prepared for async TP: not a sibling
  Program& p = sibling.prog;
  Plan want = plan;  // but async TP and the policy (finish_lowering() sets it), as the sibling was lowered
  want.async_tp = p.plan.async_tp;
  want.activation_checkpointing = p.plan.activation_checkpointing;
  want.ac_layers = p.plan.ac_layers;
  Program expect;
  Lowerer::set_plan(expect, training, want);
  const bool same = p.model == model && p.training.seq_len == expect.training.seq_len &&
                    p.training.dtype == expect.training.dtype && p.training.compile == expect.training.compile &&
                    p.training.local_batch_size == expect.training.local_batch_size && p.plan == expect.plan &&
                    p.plan.family == expect.plan.family && p.plan.source == expect.plan.source &&
                    p.plan.provenance == expect.plan.provenance && p.plan.stated == expect.plan.stated &&
                    p.tp == expect.tp && p.dp == expect.dp && p.dp_replicate == expect.dp_replicate &&
                    p.cp == expect.cp;
  if (!same) return lower_unfinished(model, training, plan);  // not a sibling: lower it
  Lowerer::set_plan(p, training, plan);
  sibling.deps_prepared = false;  // prepared without async TP: with it, finishing changes more segments
  sibling.id = next_unfinished_id();
  return sibling;
}

}  // namespace tptune
