#pragma once
// `tp-plan explain`: the collectives a Program issues, per block and per step, as text and JSON.
//
// JSON (`explain_json`):
//   {"tp_degree": 8, "dp_shard": 1, "plan": "...", "parameters": {"per_gpu": 1004015616, "total": 8030261248},
//    "collectives": [{"phase": "forward", "module": "layers.0.attention.wo", "op": "reduce_scatter",
//                     "tensor": "layers.0.attention.wo.out", "dtype": "bf16", "global_shape": [1, 8192, 4096],
//                     "bytes": 67108864, "group": "tp"}, ...],
//    "per_block": {"forward": {"all_reduce": 0, "all_gather": 2, "reduce_scatter": 2, "all_to_all": 0}, "backward":
//    ...}, "per_step": {"tp": {"count": N, "bytes": B}, "dp": {...}},
//    "tptune": {"version": "0.1.0", "git_hash": "1a2b3c4"}}   (plans/util/version.h's stamp)
// `parameters` counts elements: the model's total, and what one GPU holds (its TP shard, chunked over dp_shard by
// FSDP; plans/lower/parameter_count.h).
// HSDP plans (dp_replicate > 1) add "dp_replicate": N after dp_shard and per_step "dp_replicate": {...}: the fp32
// all-reduces of the gradient shards, tensor "gradient shards", group "dp_replicate".
// `collectives` lists every collective of the step in program order, every layer, full FQNs; `bytes` is the full
// tensor's size (nccl-tests' `size`). per_block counts one block's TP collectives; recompute counts as backward.
// A plan with ac_layers = k (0 < k < n_layers) adds "ac_layers": k to "plan", and "per_checkpointed_block":
// {"backward": {...}}: the TP collectives of the backward of one of the checkpointed blocks 0 .. k-1 (recompute
// included); per_block's backward is then that of the blocks k .. L-1, which recompute nothing.
// A dense-first mixture of experts (model.moe.dense_layers = k, two block variants: plans/program/program.h
// "Structure") adds "per_dense_block": the TP collectives of one of the dense blocks 0 .. k-1; per_block is then that
// of one MoE block (k .. L-1).

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "plans/lower/rewrite/pipeline_stage.h"
#include "plans/program/program.h"

namespace tptune {

struct CollectiveRecord {
  Phase phase = Phase::forward;
  std::string module;  // full FQN ("layers.3.attention.wo"); "fsdp" for data-parallel parameter traffic
  std::string name;    // op name
  std::string tensor;  // the tensor it communicates, full FQN ("layers.3.attention_norm.out"); "parameters" for FSDP
  CollectiveKind kind = CollectiveKind::all_reduce;
  ReduceOp reduce = ReduceOp::sum;
  DType dtype = DType::bf16;
  Shape global_shape;
  int64_t bytes = 0;
  Group group = Group::tp;
};

// Every collective of the step, every layer instantiated, in program order.
std::vector<CollectiveRecord> step_collectives(const Program& p);
// The collectives of one block template (layer 0 names): forward, backward (recompute included), then those the
// optimizer step issues per block (Partial gradients all-reduced there when no FSDP wraps the model). With a plan's
// ac_layers = k splitting the block backward (plans/program/program.h), the backward is that of the blocks without
// recompute and the names are layer k's. With block variants (a dense-first mixture of experts) those of a MoE block
// (layer k's names).
std::vector<CollectiveRecord> block_collectives(const Program& p);
// With block variants: the collectives of one dense block (forward, backward, optimizer; layer 0 names). Empty
// otherwise.
std::vector<CollectiveRecord> dense_block_collectives(const Program& p);
// With block variants: the dense blocks' forward segment (the first block.fwd), else null.
const Segment* dense_block_forward(const Program& p);
// With ac_layers = k splitting the block backward: the collectives of the checkpointed blocks' backward (recompute
// included; layer 0 names). Empty otherwise.
std::vector<CollectiveRecord> checkpointed_block_collectives(const Program& p);
// The second block.bwd segment (the checkpointed blocks 0 .. k-1) when ac_layers splits the block backward, else null.
const Segment* checkpointed_block_backward(const Program& p);

// A pipeline's transfers: every pp.* op of its stage Programs (plans/lower/rewrite/pipeline_stage.h), in stage and
// Program order. `stages[s]` is stage s's Program, `spans` the layout it was lowered with. JSON
// (pipeline_transfers_json), a list of
//   {"stage": 0, "pp_rank": 0, "op": "pp.send_fwd", "phase": "forward", "tensor": "pp.send_fwd.activation",
//    "dtype": "bf16", "local_shape": [1, 1024, 4096], "bytes": 8388608, "to": {"stage": 1, "pp_rank": 1}}
// ("from" for a receive); bytes are this tp rank's shard, what one transfer of one microbatch moves.
struct TransferRecord {
  int stage = 0, pp_rank = 0;
  std::string op, tensor;
  Phase phase = Phase::forward;
  DType dtype = DType::bf16;
  Shape local_shape;
  int64_t bytes = 0;
  bool send = false;
  int peer_stage = 0, peer_rank = 0;
};
std::vector<TransferRecord> pipeline_transfers(const std::vector<Program>& stages,
                                               const std::vector<PipelineStageSpan>& spans);
// One row per transfer, after a line saying what the rows are.
std::string pipeline_transfers_text(const std::vector<TransferRecord>& transfers);
nlohmann::json pipeline_transfers_json(const std::vector<TransferRecord>& transfers);

// Writes the JSON document above to `out` one collective at a time: memory stays one block's records plus the
// output stream, whatever the layer count. explain_json parses what it writes (for tests and small programs).
// `extra`: members a caller adds (an object; tp-plan explain's "trust", sim/trust.h), after per_step.
void write_explain_json(const Program& p, std::ostream& out, const nlohmann::json& extra = nlohmann::json::object());
nlohmann::json explain_json(const Program& p);
std::string explain_text(const Program& p);

}  // namespace tptune
