// Plan presets: the module plans of torchtitan's apply_tp, with and without sequence parallel.
//
// Patterns name every block at once (`layers.*.attention.wq`). A pattern that matches no module of the model (w3 of
// a gelu MLP) is harmless here: the lowering only asks style_for() about modules that exist, and the check that
// refuses such entries in user plans (plans/module_names.h) exempts the presets.

#include <fmt/format.h>

#include "plans/error.h"
#include "plans/plan.h"

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

}  // namespace

std::vector<std::string> plan_preset_names() { return {"vanilla", "sequence_parallel"}; }

Plan preset_plan(const std::string& name, const Plan& base) {
  Plan p;
  p.family = name;
  p.source = "preset:" + name;
  p.tp_degree = base.tp_degree;
  p.dp_shard = base.dp_shard;
  p.float8 = base.float8;
  p.async_tp = base.async_tp;
  p.loss_parallel = base.loss_parallel;
  p.activation_checkpointing = base.activation_checkpointing;
  p.local_batch_size = base.local_batch_size;
  if (name == "vanilla")
    p.modules = vanilla(base.loss_parallel);
  else if (name == "sequence_parallel")
    p.modules = sequence_parallel(base.loss_parallel);
  else
    throw Error(
        fmt::format("unknown plan preset '{}'; expected one of {}", name, fmt::join(plan_preset_names(), ", ")));
  return p;
}

}  // namespace tptune
