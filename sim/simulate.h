#pragma once
// A predicted training step: simulate(Program, ClusterSpec, CostParams) -> StepReport.
//
//   ClusterSpec cluster = resolve_cluster(cfg);
//   Program prog = lower(cfg.model, cfg.training, plan);
//   StepReport r = simulate(prog, cluster, default_cost_params());
//   fmt::print("{}", report_text(r));
//
// simulate() = cost_ops (per-op durations) + schedule (the timeline) + memory_model, summarised. It has no hidden
// state (no mutable globals): call it from as many threads as you like. A caller that re-schedules one Program (the
// search trying schedule parameters, or writing a trace) can keep the OpCosts and Timeline and call make_report().
//
// Conventions (torchtitan's, so that the numbers compare with its logs):
//   tokens/s per GPU  = ga x local_batch_size x seq_len / (tp x step time)   (TP ranks share their batch; ga =
//                       gradient_accumulation_steps, the step time that of ga microbatches: sim/accumulation.h)
//   MFU               = tokens/s per GPU x Model::training_flops_per_token(seq_len) / dense bf16 peak of the GPU
//   breakdown         compute (busy compute stream) + exposed TP + exposed DP communication (compute stream idle,
//                     waiting on that stream) = step time; with ga > 1 the non-optimizer part counts ga times
//                     (the extra microbatches' idle compute-stream time beyond their exposed DP time is TP's)
//   per-block         mean compute-stream wall time of one block's forward / backward instance, exposed
//                     communication and (in backward) recompute included
//   parameters        the model's total and one rank's TP and FSDP shard, in elements (plans/lower/parameter_count.h)

#include <functional>
#include <string>
#include <vector>

#include "plans/language/plan_toggles.h"
#include "plans/lower/parameter_count.h"
#include "plans/program/program.h"
#include "sim/cluster_spec.h"
#include "sim/cost/cost_params.h"
#include "sim/memory.h"
#include "sim/pipeline/schedule_sim.h"
#include "sim/timeline/timeline.h"
#include "sim/trust.h"

namespace tptune {

struct OpSummary {
  std::string name;  // "layers.*.attention.wq.fwd" for block ops; "fsdp.all_gather (head)": the segment, when two
                     // reported ops of different segments share a name and a phase
  std::string kind;  // gemm | attention | ... | all_gather(tp) ...
  std::string phase;
  Stream stream = Stream::compute;
  int64_t count = 0;    // instances per step (x gradient_accumulation_steps outside the optimizer)
  double time_us = 0;   // one instance
  double total_us = 0;  // count x time
};

// Pipeline parallelism's figures (sim/pipeline/step.h), for a plan with pp_degree > 1; pp 1 otherwise.
struct PipelineRankReport {
  std::vector<int> stages;          // the stages it holds, ascending
  int layers = 0;                   // their transformer blocks
  double busy_ms = 0, idle_ms = 0;  // in one pass of the schedule (one gradient accumulation step)
  int peak_activations = 0;         // (stage, microbatch) activations held at once, at most
  double activations = 0;           // bytes those hold at the peak
  double peak_memory = 0;           // bytes, the rank's peak (MemoryReport::peak)
  double end_ms = 0;                // when the rank's step ends
};
struct PipelineReport {
  int pp = 1;
  PipelineScheduleKind schedule = PipelineScheduleKind::one_f_one_b;
  int stages_per_rank = 1;
  int64_t microbatches = 1, microbatch_size = 1;
  std::vector<int> stage_layers;       // [stage] blocks
  std::vector<StageCost> stage_costs;  // [stage] one microbatch
  int64_t p2p_bytes = 0;               // one activation (or its gradient) of one microbatch
  double p2p_us = 0;
  bool p2p_network = false;    // the pp hops cross nodes
  double schedule_ms = 0;      // one pass of the schedule (its timeline's step)
  double bubble_fraction = 0;  // mean over ranks of idle / schedule
  double fsdp_exposed_ms = 0;  // the first stage's all-gather wait and the critical rank's unhidden reduction
  double optimizer_ms = 0;     // the critical rank's gradient norm and optimizer, once per step
  int critical_rank = 0;       // the rank that ends last
  std::vector<PipelineRankReport> ranks;
  // Each rank's actions in time order, as the schedule ran them (explain draws them).
  std::vector<std::vector<TimedPipelineAction>> timeline;
};

// What was simulated: the toggles (PlanToggles, plans/language/plan_toggles.h) as the Program ran them (its tp,
// dp_shard and dp_replicate, its training's activation checkpointing, local batch and seq_len, the plan's other
// toggles, the gradient_accumulation_steps applied; shown only when > 1), then the prediction.
struct StepReport : PlanToggles {
  std::string model, gpu, plan;  // plan: family and source
  int nodes = 1, gpus_per_node = 1;
  int64_t n_layers = 0;  // the model's

  double step_time_ms = 0;
  double tokens_per_second_per_gpu = 0;
  double mfu = 0;  // fraction (0.45 = 45%)
  double compute_ms = 0, exposed_tp_comm_ms = 0, exposed_dp_comm_ms = 0;
  double tp_comm_busy_ms = 0, dp_comm_busy_ms = 0;  // communication stream busy time (overlapped or not)
  double dp_replicate_comm_busy_ms = 0;             // HSDP's replicate all-reduce stream
  double cp_comm_busy_ms = 0;  // context parallelism's ring transfers (their exposed part counts as TP's)
  double ep_comm_busy_ms = 0;  // a mixture of experts' all-to-alls (their exposed part counts as TP's)
  double block_forward_ms = 0, block_backward_ms = 0;
  ParameterCount parameters;  // the model's, and one rank's after TP and FSDP sharding (plans/lower/parameter_count.h)
  MemoryReport memory;
  PipelineReport pipeline;         // pp 1: no pipeline
  std::vector<OpSummary> top_ops;  // by total time, longest first
  // How far to trust it (sim/trust.h): from the cluster's device spec; a caller that applied a --calibration file
  // replaces it (prediction_trust(gpu, file)).
  PredictionTrust trust;
};

StepReport simulate(const Program& p, const ClusterSpec& cluster, const CostParams& c);
StepReport make_report(const Program& p, const ClusterSpec& cluster, const CostParams& c, const OpCosts& costs,
                       const Timeline& timeline, size_t top_ops = 12);
// The same, with the Program's memory_model() already computed (the search computes it first, to prune on it).
// `gradient_accumulation_steps` 0: the Program's plan's; the search passes its candidate's, so that Programs it
// shares between candidates (lowered at ga 1) need not carry it.
StepReport make_report(const Program& p, const ClusterSpec& cluster, const OpCosts& costs, const Timeline& timeline,
                       const MemoryReport& memory, size_t top_ops = 12, int64_t gradient_accumulation_steps = 0);
// The `top_ops` ops of `p` with the most time per step, longest first, as StepReport::top_ops lists them: op `op` of
// segment `seg` runs runs(seg, op) times per step (0: not reported), each for its duration in `costs`. make_report()
// counts every instance (x gradient_accumulation_steps outside the optimizer); a pipeline's report those of one pp
// rank's stages (sim/pipeline/step.h).
std::vector<OpSummary> top_op_summaries(const Program& p, const OpCosts& costs, size_t top_ops,
                                        const std::function<double(size_t seg, size_t op)>& runs);
// Throws tptune::Error when the plan uses float8 and the GPU has none ("float8 tensorwise: ... has no float8 ..."), or
// when the plan's mesh [pp, dp_replicate, dp_shard, cp, tp] needs more GPUs than `cluster` has, naming each degree
// above 1 ("tp 1 x dp_shard 4 x cp 2 = 8 GPUs, but the cluster has 4 (1 nodes x 4): lower dp_shard (option
// --dp-shard)"). `cluster` is the whole cluster, also for a pipeline's microbatch Program (pp counts in).
void check_supported(const Program& p, const ClusterSpec& cluster);

}  // namespace tptune
