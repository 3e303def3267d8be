#pragma once
// Memory per GPU for one training step of a Program, derived from the Program's tensors.
//
// Model states (held all step), mixed precision as torchtitan runs it (FSDP2 with bf16 parameters for compute,
// fp32 sharded master copy): per parameter element of the rank's TP shard, sharded again over dp:
//   fp32 master weight 4 B + fp32 gradient 4 B + AdamW exp_avg 4 B + exp_avg_sq 4 B = 16 B / dp.
// Activations saved for backward, per block: every per-layer tensor that block.bwd reads and the forward produced
// (written by block.fwd, or the block's input on the residual chain), unless a recompute op in block.bwd produces
// it again (activation checkpointing); parameters excluded. All L blocks' saved tensors are alive when the backward
// starts. Local shapes and dtypes come from the Program, so sequence parallel (sequence-sharded norms and residuals),
// float8 (1-byte saved inputs) and loss parallel (vocab-sharded logits) show up without special cases.
// Transient, per phase (forward of a block, head, backward of a block): the working set of the segment (the peak, over
// its ops, of the tensors live in it that are neither saved activations nor parameters: gradients, temporaries,
// recomputed activations, logits and their gradient; with CostParams::loss_in_fp32 also torchtitan's fp32 copy of
// the logits and their fp32 gradient, 8 B per logit) plus the unsharded compute copies of parameters in flight
// (CostParams::blocks_in_flight: the block being computed and the prefetched one; the head's own parameters).
// FSDP2's buffers: the all-gather output and the unsharded parameters it is copied into are the blocks_in_flight
// copies above (the prefetched unit's all-gather output while the current unit computes); in backward, the fp32
// reduce-scatter input of one unit (FSDP2 keeps it until the next unit's reduce-scatter is issued).
// Peak = model states + max over phases (saved activations alive then + transient), then the runtime overhead
// (CUDA context, workspaces, NCCL buffers) and allocator fragmentation (CostParams). fits = peak <= capacity.
// allocator_reserved is the caching allocator's share: what torchtitan logs as its memory.
// A dense-first mixture of experts (two block variants, plans/program/program.h "Structure"): each variant's
// parameters count once per layer of it; its blocks save what its own backward reads (saved_per_block x the MoE
// blocks, saved_per_dense_block x the dense ones); the forward's working set is the larger variant's, and the dense
// blocks' backward, which runs last, is a phase of its own (their saved tensors alone, its working set).

#include <string>

#include "plans/program/program.h"
#include "sim/cost/cost_params.h"
#include "sim/gpu_spec.h"

namespace tptune {

struct MemoryReport {
  // Model states, bytes per GPU.
  double master_params = 0;  // fp32 master weights (the local shard)
  double gradients = 0;      // fp32 gradients (sharded)
  double optimizer = 0;      // AdamW exp_avg + exp_avg_sq
  double model_states() const { return master_params + gradients + optimizer; }
  // Activations.
  double saved_per_block = 0;  // saved for backward by one block (one without AC when ac_layers splits them)
  double saved_per_checkpointed_block = 0;  // with ac_layers: by one of the checkpointed blocks
  int checkpointed_blocks = 0;              // with ac_layers: how many (0 otherwise)
  double activations = 0;                   // all blocks: saved_per_block x layers, or each kind x its blocks
  // A dense-first mixture of experts: saved_per_block is a MoE block's, this a dense block's, of dense_blocks (0
  // otherwise).
  double saved_per_dense_block = 0;
  int dense_blocks = 0;
  // Transient at the peak phase.
  std::string peak_phase;       // "forward" | "head" | "backward"
  double working_set = 0;       // gradients, temporaries, recomputed activations, logits
  double params_in_flight = 0;  // unsharded compute copies of parameters
  double logits = 0;            // the logits the loss reads (for reports)
  // Totals.
  double runtime_overhead = 0;  // CUDA context, NCCL buffers, fragmentation
  double peak = 0;
  // What PyTorch's caching allocator holds at the peak: the tensors x (1 + memory_fragmentation), without the CUDA
  // context and NCCL's buffers, which live outside it. torchtitan's logged memory is this figure (its
  // DeviceMemoryMonitor reads torch.cuda.memory_stats()["reserved_bytes.all.peak"], torchtitan/components/metrics.py).
  double allocator_reserved = 0;
  double capacity = 0;
  bool fits = true;
  double headroom() const { return capacity - peak; }  // negative: over by this much
};

MemoryReport memory_model(const Program& p, const GpuSpec& gpu, const CostParams& c);

// memory_model() in two steps: what it reads from the Program, then the peak. A plan's ac_layers = k changes only how
// many blocks are of each kind (blocks = L - k, checkpointed_blocks = k: the segments' ops are the same for every
// k), so the search computes the parts once and the report of each k from them (CandidateEvaluator::sweep_ac_layers,
// sim/search/eval.h):
//   memory_model(p) == memory_from_parts(memory_parts(p, c), gpu, c), bit for bit.
// With ac_layers the peak is the larger of the phases above, the backward of the checkpointed blocks (their own saved
// tensors, its working set) among them.
struct MemoryParts {
  double master_params = 0, gradients = 0, optimizer = 0;  // model states, as in MemoryReport
  double block_params = 0;                                 // one block's parameters (local shard, bf16)
  double head_params = 0, logits = 0;
  // Parameters unsharded through the whole step: with tied embeddings under FSDP (dp_shard > 1) the unit
  // [tok_embeddings, norm, output] is gathered once before the embedding and not resharded after forward
  // (plans/lower/lower.cc), so the head's parameters (the tied table and the norm) are in flight in every phase, not
  // only in the head's. 0 otherwise.
  double resident_params = 0;
  double saved_per_block = 0, saved_per_checkpointed_block = 0;
  int blocks = 0;               // blocks of the first (or only) backward segment
  int checkpointed_blocks = 0;  // of the second (ac_layers), else 0
  double ws_forward = 0, ws_head = 0, ws_backward = 0, ws_checkpointed_backward = 0;  // working sets
  // A dense-first mixture of experts (block variants): blocks and saved_per_block are the MoE blocks' (the first
  // backward segment), these the dense blocks' (the second); 0 otherwise.
  double saved_per_dense_block = 0, ws_dense_backward = 0;
  int dense_blocks = 0;
  // FSDP2's fp32 reduce-scatter input of one unit, alive through the backward phases (dp_shard > 1; memory.cc).
  double fsdp_reduce_scatter_input = 0;
};
MemoryParts memory_parts(const Program& p, const CostParams& c);
MemoryReport memory_from_parts(const MemoryParts& parts, const GpuSpec& gpu, const CostParams& c);

// Bytes of a tensor's local data.
double tensor_bytes(const TensorDesc& t);

}  // namespace tptune
