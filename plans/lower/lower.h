#pragma once
// Lowering: Model x Training x Plan -> the per-rank Program of one training step (plans/program/program.h).
//
// The lowering follows DTensor's rules (plans/language/placement.h) rather than a table per preset, so hand-written
// plans lower correctly too. It traces the model the way torch would run it under `parallelize_module`:
//  * every module's style prepares its input (plain tensor -> DTensor.from_local(input_layout); float8 styles cast to
//    e4m3 here; redistribution to the desired layout), runs the local computation with DTensor's placement rules for
//    linear/embedding/norm, and prepares its output (redistribution to output_layout; to_local when
//    use_local_output);
//  * autograd is replayed in reverse: every from_local is its own autograd node that redistributes the arriving
//    gradient back to its declared layout; the backward of a redistribution src -> dst moves the gradient back to
//    src (R for a P source); the gradient of a replicated DTensor consumed by a local product arrives as P;
//    gradients of replicated parameters that arrive as P (sequence-parallel norms) are all-reduced;
//  * float8 tensorwise: input, weight and grad-output casts with an all-reduce(max) of the amax whenever the cast
//    tensor is sharded; loss parallel: vocab-parallel cross-entropy with all-reduces over [batch, seq];
//  * activation checkpointing adds recompute ops to the block backward (full: the whole forward; selective:
//    torchtitan's op policy — matmul outputs are saved except every second one, attention and reduce-scatter
//    outputs are saved, everything else including all-gathers is recomputed); with the plan's ac_layers = k only
//    to the first k blocks: the block backward is then two segments (plans/program/program.h);
//  * async TP rewrites all-gathers that feed matmuls and matmuls that feed reduce-scatters into tp-chunk rings;
//  * dp_shard > 1 adds FSDP parameter all-gathers and gradient reduce-scatters on the dp group.
//  * dp_replicate > 1 (HSDP) adds, after each gradient reduce-scatter, an fp32 all-reduce of this rank's gradient
//    shard on the dp_replicate group (one per FSDP module group: embedding, each block, head).
//
// Like DTensor, it trusts declared layouts of plain tensors (from_local with run_check=False): a wrong declaration
// whose shapes still compose lowers fine and computes the wrong function; `tp-run verify` catches that. What it
// refuses, with the module FQN and the placements or sizes involved: a TP degree that does not divide a sharded
// dim (heads, kv heads, ffn_dim, vocab, the sequence), shapes that do not compose, DTensors meeting plain tensors,
// loss_parallel without vocab-sharded logits (or the reverse), async TP without sequence-parallel collectives.

#include "plans/program/program.h"

namespace tptune {

// One training step of `plan` for `model` under `training`: the per-rank Program (plans/program/program.h). Throws
// tptune::Error, with the module FQN and the placements or sizes involved, for what it refuses (above).
// The search lowers its candidates through the incremental API in plans/lower/incremental.h instead; its Programs
// equal this one's field for field.
Program lower(const Model& model, const Training& training, const Plan& plan);

}  // namespace tptune
