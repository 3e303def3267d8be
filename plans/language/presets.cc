// Plan presets: the module plans of torchtitan's apply_tp, with and without sequence parallel.
//
// Patterns name every block at once (`layers.*.attention.wq`). A pattern that matches no module of the model (w3 of
// a gelu MLP) is harmless here: the lowering only asks style_for() about modules that exist, and the check that
// refuses such entries in user plans (plans/language/module_names.h) exempts the presets.

#include <fmt/format.h>

#include "plans/language/plan.h"
#include "plans/util/error.h"

namespace tptune {

namespace {

using P = Placement;

ParallelStyle colwise(P input, P output, bool local) {
  ParallelStyle s = ParallelStyle::colwise();
  s.input_layout = input;
  s.output_layout = output;
  s.use_local_output = local;
  return s;
}

ParallelStyle rowwise(P input, P output) {
  ParallelStyle s = ParallelStyle::rowwise();
  s.input_layout = input;
  s.output_layout = output;
  return s;
}

// The vocabulary projection: with loss parallel the logits stay vocab-sharded DTensors (S(-1)) for the
// vocab-parallel cross-entropy; otherwise they are gathered to a plain replicated tensor.
ParallelStyle output_projection(P input, bool loss_parallel) {
  return loss_parallel ? colwise(input, P::S(-1), false) : colwise(input, P::R(), true);
}

// The seed plan: Megatron-style TP without sequence parallel. Activations between blocks are replicated; each
// attention and MLP ends in a rowwise projection whose partial sums are all-reduced to R.
std::vector<PlanEntry> vanilla(bool loss_parallel) {
  const ParallelStyle col = ParallelStyle::colwise();
  const ParallelStyle row = ParallelStyle::rowwise();  // input S(-1) (the colwise outputs), output R
  return {
      {"tok_embeddings", rowwise(P::R(), P::R())},
      {"output", output_projection(P::R(), loss_parallel)},
      {"layers.*.attention.wq", col},
      {"layers.*.attention.wk", col},
      {"layers.*.attention.wv", col},
      {"layers.*.attention.wo", row},
      {"layers.*.feed_forward.w1", col},
      {"layers.*.feed_forward.w2", row},
      {"layers.*.feed_forward.w3", col},
  };
}

// torchtitan's apply_tp: the residual stream is sequence-sharded S(1) outside attention and MLP, so norms run on
// 1/tp of the tokens; each attention/MLP all-gathers its input to R and reduce-scatters its output back to S(1).
std::vector<PlanEntry> sequence_parallel(bool loss_parallel) {
  const ParallelStyle col = ParallelStyle::colwise();
  const ParallelStyle row_to_seq = rowwise(P::S(-1), P::S(1));
  const ParallelStyle sp = ParallelStyle::sequence_parallel();
  const ParallelStyle gather = ParallelStyle::prepare_module_input(P::S(1), P::R());
  return {
      {"tok_embeddings", rowwise(P::R(), P::S(1))},
      {"norm", sp},
      {"output", output_projection(P::S(1), loss_parallel)},
      {"layers.*.attention_norm", sp},
      {"layers.*.attention", gather},
      {"layers.*.attention.wq", col},
      {"layers.*.attention.wk", col},
      {"layers.*.attention.wv", col},
      {"layers.*.attention.wo", row_to_seq},
      {"layers.*.ffn_norm", sp},
      {"layers.*.feed_forward", gather},
      {"layers.*.feed_forward.w1", col},
      {"layers.*.feed_forward.w2", row_to_seq},
      {"layers.*.feed_forward.w3", col},
  };
}

// torchtitan 0.3 (models/llama3/sharding.py + models/common/decoder_sharding.py, spmd_types backend), as DTensor
// styles that give the same collectives. spmd_types' I (invariant) -> R conversion is a no-op forward whose backward
// all-reduces the Partial gradient: DTensor's from_local(R) on a plain tensor, once per module boundary
// (PrepareModuleInput R -> R on attention and feed_forward, and the lm_head's replicated input). With enable_sp the
// boundaries are the seed's S(1) -> R all-gathers and the rowwise outputs reduce-scatter to S(1).
std::vector<PlanEntry> torchtitan_0_3(bool enable_sp) {
  const ParallelStyle col = ParallelStyle::colwise();
  const ParallelStyle sp = ParallelStyle::sequence_parallel();
  const P act = enable_sp ? P::S(1) : P::R();
  const ParallelStyle boundary = ParallelStyle::prepare_module_input(act, P::R());
  const ParallelStyle row_out = rowwise(P::S(-1), act);
  std::vector<PlanEntry> out = {
      // tok_embeddings: weight S(0) (vocab rows), out_src P -> out_dst I (all-reduce) or S(1) (reduce-scatter).
      {"tok_embeddings", rowwise(P::R(), act)},
      // lm_head: weight S(0), input R (the root norm's out_dst), output S(-1) for the vocab-parallel loss.
      {"lm_head", colwise(act, P::S(-1), false)},
      {"layers.*.attention", boundary},
      {"layers.*.attention.wqkv", col},
      {"layers.*.attention.wo", row_out},
      {"layers.*.feed_forward", boundary},
      {"layers.*.feed_forward.w1", col},
      {"layers.*.feed_forward.w2", row_out},
      {"layers.*.feed_forward.w3", col},
  };
  if (enable_sp) {
    out.insert(out.begin() + 1, {"norm", sp});
    out.insert(out.begin() + 3, {"layers.*.attention_norm", sp});
    out.push_back({"layers.*.ffn_norm", sp});
  }
  return out;
}

}  // namespace

void apply_framework(Plan& plan, Framework f) {
  const bool tt = f == Framework::torchtitan_0_3;
  // ChunkedLossWrapper.Config.num_chunks of the llama3 recipes (8); the seed's loss is one cross-entropy.
  if (plan.loss_chunks <= 0) plan.loss_chunks = tt ? 8 : 1;
  plan.framework = f;
  plan.fused_qkv = tt;  // FusedQKVLinear (wqkv) in Llama3Model's default attention
  plan.output_fqn = tt ? "lm_head" : "output";
  plan.fsdp_always = tt;               // parallelize_llama: "Always run apply_fsdp_to_decoder"
  plan.ac_early_stop = !tt;            // FullAC/SelectiveAC: ptd_checkpoint_wrapper(..., early_stop=False)
  plan.ac_saves_reduce_scatter = !tt;  // spmd_types issues c10d reduce-scatters, not _c10d_functional's
  plan.clip_grad_norm = tt;            // Trainer.train_step: dist_utils.clip_grad_norm_(..., max_norm=1.0)
  plan.attention_kernel = tt ? SdpaBackend::flex : SdpaBackend::auto_;  // model_registry(attn_backend="flex")
  if (tt) plan.loss_parallel = true;  // no switch: CrossEntropyLoss runs _LossParallelCrossEntropy under TP
}

void check_framework(const Plan& plan) {
  if (plan.framework != Framework::torchtitan_0_3) return;
  if (plan.float8 == Float8Recipe::tensorwise)
    throw Error(
        fmt::format("{}: float8: torchtitan 0.3's Float8LinearConverter has the recipes rowwise and "
                    "rowwise_with_gw_hp only (no tensorwise, no float8 TP styles)",
                    plan.source));
  if (!plan.loss_parallel && plan.tp_degree > 1)
    throw Error(
        fmt::format("{}: loss_parallel: torchtitan 0.3 always runs the vocab-parallel loss under TP (there "
                    "is no switch)",
                    plan.source));
}

std::vector<std::string> plan_preset_names() { return {"vanilla", "sequence_parallel"}; }

Plan preset_plan(const std::string& name, const Plan& base) {
  Plan p;
  p.family = name;
  p.source = "preset:" + name;
  p.toggles() = base.toggles();
  p.provenance = base.provenance;
  p.stated = base.stated;
  p.loss_chunks = base.loss_chunks;
  apply_framework(p, base.framework);
  const bool tt = base.framework == Framework::torchtitan_0_3;
  if (tt && (name == "vanilla" || name == "sequence_parallel")) {
    p.family = name;
    p.modules = torchtitan_0_3(name == "sequence_parallel");
  } else if (name == "vanilla")
    p.modules = vanilla(base.loss_parallel);
  else if (name == "sequence_parallel")
    p.modules = sequence_parallel(base.loss_parallel);
  else
    throw Error(
        fmt::format("unknown plan preset '{}'; expected one of {}", name, fmt::join(plan_preset_names(), ", ")));
  return p;
}

}  // namespace tptune
