#pragma once
// A training step under pipeline parallelism (plans/language/pipeline_parallel.h): each pp rank's stages run the
// schedule's actions (sim/pipeline/schedule.h) on a timeline (sim/pipeline/schedule_sim.h) whose per-stage costs come
// from the ordinary simulator, plus FSDP's and the optimizer's work once per step.
//
// Stage costs: one Program of the whole model lowered at the microbatch (local_batch_size = pp_microbatch_size,
// gradient_accumulation_steps 1) and scheduled once (sim/timeline/timeline.h). Its segments are per layer
// (plans/program/program.h), so a stage's forward is the sum of its layers' block.fwd instances (plus embed.fwd on the
// first stage, and on the last the forward part of the head: the head's time split in the proportion of its forward and
// backward ops' durations), and its backward likewise (block.bwd, embed.bwd, the head's backward part). Each instance
// counts its compute-stream span less its exposed DP time: under PP torchtitan keeps FSDP's gathered parameters through
// the step (torchtitan/distributed/fsdp.py: reshard_after_forward "default" is `not pp_enabled`, "to avoid
// per-microbatch all-gathers"), so no per-microbatch FSDP wait belongs to a stage's cost. Why one whole-model Program
// rather than a Program per stage: the stage boundaries cut no layer, every layer of one model lowers to the same ops
// whatever stage holds it, and one lowering serves every split and schedule (the search's axes); a stage's Program
// would repeat the same segments with fewer instances. What differs per stage is only which segments it holds, which is
// what the sums above select. A dense-first mixture of experts has a block segment per variant (plans/program/program.h
// "Structure"), each with its layer range: an instance counts for the stage of its layer (instance_layer()), so a
// stage's costs are its dense and MoE blocks' (the ep all-to-alls, the router's host sync and the experts' efsdp
// collectives inside them), and its memory terms below are each block's by its variant (its saved tensors, gathered
// parameters, unsharded gradients, backward working set; Model::layer_parameters() for the share of the states). The
// weight-gradient part of a backward (the W of the zero-bubble schedules) is the share of the `.bwd_weight` GEMMs in
// its compute ops' durations.
//
// P2P: one activation (forward) or its gradient (backward) of one microbatch: the block output this rank holds, the
// Program's forward layer-chain tensor (microbatch x seq_len / cp x dim, and / tp under sequence parallelism, whose
// blocks end sequence-sharded: torch's PipelineStage sends each rank's local tensor to the same tp rank of the next
// stage), priced as a p2p on the pp group: over NVLink when the pp group sits in one node (world <= gpus_per_node
// under the mesh order, pp outermost), else over the network (the hops at node boundaries, which every microbatch
// crosses, set the pace).
//
// The step: the schedule's timeline, started after the first stage's exposed FSDP all-gather (the time its forward
// waited on DP in the Program; the other ranks' all-gathers run while they wait for their first activation). torch's
// PipelineStage runs every backward with requires_gradient_sync and reshard_after_backward False and, after a stage's
// last backward, FSDP's post_backward (torch/distributed/pipelining/stage.py, backward_maybe_with_nosync): so each
// stage's gradient reduction (reduce-scatter, HSDP all-reduce) starts after its last backward action, on the DP stream
// in turn, overlapping what the rank computes after it; the part left when the rank's last action ends is exposed.
// That pass repeats for each of the gradient_accumulation_steps; then, once, the gradient norm and the optimizer of the
// rank's layers (and of the embedding and head where it holds them). The step ends when the last rank ends.
//
// Memory per rank, each term as torch (1963fc8, the version of torchtitan's December 2024 benchmark) holds it:
//  - model states: master weights, gradients, AdamW, in the proportion of the rank's parameters to the model's (as
//    memory.h counts them, the sharded fp32 gradients all step);
//  - parameters: its stages' parameters unsharded through the step (torchtitan 9dec370's apply_fsdp,
//    parallelisms/parallelize_llama.py: reshard_after_forward False under PP; the routed experts' efsdp unit alike in
//    0.3.0, distributed/fsdp.py:176-177), at the bytes FSDP's all-gathers produce: the Program's block all-gathers
//    (dp's, and efsdp's for the routed experts; 1 byte for the linear weights with float8 all-gather,
//    enable_fsdp_float8_all_gather, on in its llama3_405b.toml), bf16 for the embedding and the head;
//  - unsharded gradients: torch's stage runs every backward with requires_gradient_sync False (stage.py
//    backward_maybe_with_nosync), so FSDP2's post_backward does not reduce: FSDPParam.to_accumulated_grad_if_needed
//    (_fsdp_param.py) upcasts each unsharded gradient to reduce_dtype, fp32 in torchtitan (mixed_precision_reduce),
//    and accumulate_unsharded_grad_if_needed adds the later microbatches into it: 4 bytes per local element of the
//    stage, from its first backward until its post_backward after the last one (backward_maybe_with_nosync with
//    last_backward);
//  - receive buffers: PipelineStage._prepare_forward_infra allocates one activation buffer per microbatch (stages > 0)
//    and _prepare_backward_infra one gradient buffer per microbatch (stages < last), each the P2P tensor below, kept
//    for the whole run;
//  - per microbatch in flight (from its F to its B, or its W for the zero-bubble schedules, whose I keeps the graph
//    in backward_state): the stage's blocks' saved tensors and, on stages < last, its output (fwd_cache keeps
//    (output, inputs) until backward_one_chunk pops them); the first block's saved input on stages > 0 is the
//    receive buffer, counted once;
//  - kept to the end of the step (clear_runtime_states at the next step() frees them): the last stage's outputs, the
//    logits of every microbatch (forward_one_chunk appends them to output_chunks for merge_output_chunks), and on
//    stages > 0 each microbatch's input gradient (_backward.py stage_backward reads val.grad of the receive buffer
//    and leaves it there);
//  - the working set of the Program's phases (the head's only on the last stage's rank, less its logits, held above).
// The walk along the rank's actions takes the peak of what it holds for microbatches plus its unsharded gradients;
// the working set of the phase then adds to it (memory_from_parts). The report's memory is the rank with the highest
// peak. Bounds, not measurements: a stage's gradients count in full from the start of its first backward, and the
// loss's fp32 tensors of a microbatch whose F and B are apart (interleaved schedules) only in the head's working set.
//
// Throughput: tokens/s per GPU = ga x local_batch_size x seq_len / cp / (tp x pp x step) (torchtitan divides by the
// non-data-parallel degree, cp x tp x pp).

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "plans/language/plan.h"
#include "plans/model/model.h"
#include "plans/program/program.h"
#include "sim/cluster_spec.h"
#include "sim/cost/cost_params.h"
#include "sim/memory.h"
#include "sim/pipeline/schedule_sim.h"
#include "sim/simulate.h"
#include "sim/timeline/timeline.h"

namespace tptune {

// The sub-cluster one pp rank's [dp_replicate, dp_shard, cp, tp] mesh runs on: world / pp consecutive ranks, whole
// nodes (world / pp a multiple of gpus_per_node) or part of one (a divisor of it). tptune::Error when the plan's mesh
// is not the world (pp x dp_replicate x dp_shard x cp x tp) or a pp rank's mesh straddles nodes unevenly.
ClusterSpec pipeline_stage_cluster(const Plan& plan, const ClusterSpec& cluster);

// The plan's step under PP (plan.pp_degree > 1): StepReport::pipeline holds the pipeline's figures, the breakdown is
// that of the rank that ends last. tptune::Error (one line naming the plan key's origin) as resolve_pipeline() and
// build_schedule() refuse, or as pipeline_stage_cluster() does.
StepReport simulate_pipeline(const Model& model, const Training& training, const Plan& plan, const ClusterSpec& cluster,
                             const CostParams& c);

// The expensive part of simulate_pipeline(): the microbatch Program (the plan lowered with local_batch_size =
// pp_microbatch_size and gradient_accumulation_steps 1) on one pp rank's cluster (pipeline_stage_cluster()), checked,
// costed and scheduled once, its memory parts and its report. It depends on the plan but for pp_schedule,
// pp_stages_per_rank, local_batch_size and gradient_accumulation_steps (the lowering reads none of them): plans that
// differ only in those share one (the search's pipeline candidates do, sim/search/search.h). tptune::Error as
// pipeline_stage_cluster(), lower() and check_supported() refuse.
struct PipelineProgramCosts {
  ClusterSpec stage_cluster;
  Program program;
  OpCosts costs;
  Timeline timeline;
  MemoryParts parts;
  StepReport report;  // make_report() of the Program: what simulate_pipeline() starts its report from
  // Per segment, what simulate_pipeline() splits its instances' times by: the weight-gradient and forward shares of
  // its compute ops' durations, and its gradient reduction on the DP streams (read per candidate, computed once).
  struct SegmentShares {
    double weight = 0, forward = 0, reduce_us = 0;
  };
  std::vector<SegmentShares> shares;
};
PipelineProgramCosts cost_pipeline_program(const Model& model, const Training& training, const Plan& plan,
                                           const ClusterSpec& cluster, const CostParams& c);

// simulate_pipeline() with the microbatch Program's costs from `program`, which it calls (once) after the plan's own
// checks (resolve_pipeline(), build_schedule(), pipeline_stage_cluster()), so that errors come in the same order; the
// costs it returns must be cost_pipeline_program() of a plan that shares them with `plan` (see above), and outlive the
// call. The result is bit for bit simulate_pipeline(model, training, plan, cluster, c)'s.
StepReport simulate_pipeline(const Model& model, const Training& training, const Plan& plan, const ClusterSpec& cluster,
                             const CostParams& c, const std::function<const PipelineProgramCosts&()>& program);

// Bounds on simulate_pipeline()'s result from the stage costs alone, before the schedule's timeline and the memory walk
// (the search's branch-and-bound, sim/search/bound.h): step time and peak memory at most the report's, tokens/s per
// GPU at least the report's (each with a 1e-9 relative margin for rounding). The step: each rank's actions back to
// back in its list's order from the earliest its first one can start (the forward of microbatch 0 through the stages
// below its lowest one, hops included), and on stage 0's rank also, after each action so placed, the chain of the same
// microbatch that must follow it there (after an F, the forward above and the whole backward; after a B or I, the
// backward below); each rank counted as the step counts it (ga passes after the first stage's FSDP wait, then its
// optimizer), leaving out the exposed gradient reduction and every other idle time.
// The memory: each rank's parts with its receive buffers and, in the unsharded gradients' place, the most one
// microbatch of one of its stages holds at that stage's backward (the walk reaches at least that), nothing else.
// Sound for every schedule; tests/sim/search_bound_test.cc checks both against the simulation.
struct PipelineBound {
  double step_time_us = 0;
  double tokens_per_second_per_gpu = 0;
  double peak_memory = 0;
};

// simulate_pipeline() asking `prune` (when set) with the bound, after the plan's checks and the microbatch Program's
// costs, before the timeline: nullopt when it returns true, else the report, bit for bit simulate_pipeline()'s.
std::optional<StepReport> simulate_pipeline(const Model& model, const Training& training, const Plan& plan,
                                            const ClusterSpec& cluster, const CostParams& c,
                                            const std::function<const PipelineProgramCosts&()>& program,
                                            const std::function<bool(const PipelineBound&)>& prune);

}  // namespace tptune
