#pragma once
// The Program of one pipeline stage: what a pp rank runs for that stage of one microbatch, with its point-to-point
// transfers on the pp group (plans/program/program.h, SegmentKind pp_*), as torch's PipelineStage runs a stage
// (torch/distributed/pipelining/stage.py: forward_one_chunk and backward_one_chunk between the ops of
// get_fwd_recv_ops / get_fwd_send_ops / get_bwd_recv_ops / get_bwd_send_ops).
//
// A stage is taken from the Program of the whole model lowered at the microbatch (`microbatch`: lower() of
// pipeline_microbatch_plan(), plans/language/pipeline_parallel.h), never lowered on its own: every block lowers to the
// same ops whatever stage holds it, so the stage's ops are the microbatch Program's, one for one (same segments, op
// ids, names and tensors), and a profile of a stage matches the simulator's ops. Stage s of S with blocks [first, first
// + layers), in Program order:
//   pp.recv_fwd       s > 0: receive the activation entering block `first` from stage s-1 (the forward layer chain's
//                     source, tensor "pp.recv_fwd.activation")
//   embed.fwd         s = 0
//   block.fwd         its blocks (first_layer, layer_count); none when the stage holds no block
//   pp.send_fwd       s < S-1: send the activation leaving its last block (the chain's sink, "pp.send_fwd.activation")
//   head              s = S-1: final norm, output, loss and their backward
//   pp.recv_bwd       s < S-1: receive the gradient of that output from stage s+1 ("pp.recv_bwd.gradient", the
//                     backward chain's source)
//   block.bwd         its blocks (each of the microbatch Program's block.bwd segments cut to them: ac_layers)
//   pp.send_bwd       s > 0: send the gradient of its input to stage s-1 ("pp.send_bwd.gradient", the chain's sink)
//   embed.bwd         s = 0
//   grad_norm         with Plan::clip_grad_norm: the norm of the stage's gradients, then (torchtitan's
//                     clip_grad_norm_ with its pp_mesh, torchtitan/distributed/utils.py) total_norm ** 2 all-reduced
//                     (sum) over the pp group, a 4-byte fp32 scalar, before the clip
//   block.optimizer   its blocks
//   optimizer         the ops of its non-block parameters (the embedding's on stage 0; the final norm's and the
//                     output's on the last stage)
// Tensors are the microbatch Program's that these ops (and the layer chains) use, renumbered, plus the four transfer
// tensors above (the chain tensor's local shape, dtype and placement: this tp rank's shard, which torch's
// PipelineStage sends to the same tp rank of the next stage). Transfers are CollectiveOp p2p on Group::pp with the
// peer's pp rank and stage; a peer on the same rank (a V schedule's middle, stages pp-1 and pp) is still a transfer:
// torch hands the tensor over without communication there, and the runtime copies it.
//
// A mixture of experts (plans/lower/experts.cc) is cut the same way: its ops are per block (the ep all-to-alls, the
// router's host sync, the efsdp gathers and reductions of the routed experts, the optimizer pre-hook's all-reduces of
// tokens_per_expert in block.optimizer), so a stage keeps its blocks' and no other. torchtitan 0.3.0 assigns blocks to
// stages without regard to their kind (distributed/pipeline_parallel.py:366-476, _generate_llm_fqn_per_model_part:
// "layers.N" by count, the embedding and the head weighted as input_weight/output_weight blocks), and the
// load-balancing pre-hook sums the tokens_per_expert of the MoE blocks of the rank's own model parts over tp (EP on)
// and the loss mesh (dp_replicate x dp_shard x cp, distributed/parallel_dims.py:396), never over pp; a rank whose
// stages hold no MoE block returns before any collective (components/optimizer/optimizer.py:448-486). (That hook
// stacks the rank's blocks' counts into one all-reduce per group; the lowering prices one per block and mesh dim, as
// a DTensor Partial -> Replicate does: plans/lower/lower.cc, unchanged here.) A dense-first model (DeepSeek-V3's
// first_k_dense_replace) has a block segment per variant, each with its layer range (plans/program/program.h
// "Structure"): a stage takes each segment whose range meets its blocks, cut to the intersection, and each variant's
// per-layer tensor keeps that intersection as its TensorDesc::first_layer/layer_count, so a stage may hold dense blocks
// only, MoE blocks only, or both.
//
// FSDP as torchtitan runs it under PP (torchtitan/distributed/fsdp.py: reshard_after_forward is `not pp_enabled`, for
// the routed experts' efsdp unit as for the block's, fsdp.py:176-177 and 237-300 in 0.3.0): the stage's parameters are
// gathered in its forward and kept, so its backward segments have none of the microbatch Program's re-gathers; the
// forward gathers and the gradient reductions it keeps run once per step in torch (the first microbatch's forward;
// after the last microbatch's backward, PipelineStage's post_backward), as the simulator prices them
// (sim/pipeline/step.h). Tied embeddings never reach here (resolve_pipeline refuses them).

#include <cstdint>
#include <vector>

#include "plans/language/pipeline_parallel.h"
#include "plans/program/program.h"

namespace tptune {

// One stage of a pipeline: its blocks (first_layer .. first_layer + layers - 1) and the pp rank that holds it.
struct PipelineStageSpan {
  int first_layer = 0, layers = 0;
  int rank = 0;
};

// The pp rank of stage `stage` of `num_stages` under a placement (torch's generate_stage_to_rank_mapping): single and
// looped, stage % pp; V, rank r holds r and 2pp-1-r.
int pipeline_stage_rank(StagePlacement placement, int pp, int num_stages, int stage);

// Whether `op` is one of FSDP's backward re-gathers of a block's parameters (an all-gather on dp, or on efsdp for the
// routed experts under EP, issued in the backward with no input), which a stage under PP leaves out (see above).
bool is_fsdp_regather(const Op& op);

// The stages of `split` under the placement of `schedule`, in stage order.
std::vector<PipelineStageSpan> pipeline_stage_spans(const PipelineSplit& split, PipelineScheduleKind schedule);

// The tensor one microbatch passes between stages: the forward layer chain's block output of `microbatch` (local
// shape microbatch x seq_len / cp x dim, over tp too under sequence parallelism); tptune::Error when the Program has no
// forward chain.
const TensorDesc& pipeline_boundary_tensor(const Program& microbatch);
// Its local bytes: what each transfer moves (overflow-checked).
int64_t pipeline_transfer_bytes(const Program& microbatch);

// The Program of stage `stage` of `stages` (see above). `microbatch` is a Program of the whole model (stage -1);
// `stages` must be consecutive blocks covering the model (checked: tptune::Error naming the stage), except with
// `check_cover` false, which only checks that each stage's blocks exist (tests plant wrong boundaries through it).
Program lower_pipeline_stage(const Program& microbatch, const std::vector<PipelineStageSpan>& stages, int stage,
                             bool check_cover = true);

}  // namespace tptune
