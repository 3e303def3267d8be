#pragma once
// The step-wide toggles of a plan: the axes a user sets beside the module plan (plan YAML keys, tool options) and the
// search varies. One struct, shared by the three things that carry them:
//   Plan       (plans/language/plan.h)          what the user or the search asked for
//   Candidate  (sim/search/space.h)    one point of the search space
//   StepReport (sim/simulate.h)        what was simulated
// each of which derives from it, so that a new axis is one field here; what remains to touch is where the axis has a
// meaning: where it is parsed and written (plans/language/plan_yaml.cc, tools/plan_options.cc), priced (the lowering,
// the cost model), searched (SearchSpace's list in plans/language/config.h, enumerate_candidates()) and printed
// (reports, exports).
//
// Why a base class and not a member: call sites keep reading `plan.tp_degree`, `candidate.async_tp`,
// `report.seq_len` (a member would make every one of them `plan.toggles.tp_degree`), and the toggles still copy and
// compare as one value through toggles():
//   plan.toggles() = candidate.toggles();        // a candidate's plan: every axis at once
//   report.toggles() = program.plan.toggles();   // what was simulated
// PlanToggles stays an aggregate, so tests write designated initialisers: make_plan({.tp_degree = 4, .async_tp =
// true}) (tests/fixtures.h). The fields are in that order (designated initialisers must follow it).
//
// == compares the toggles only. Plan has its own == (module plan and framework data too); a Candidate or a
// StepReport compared with == compares its toggles only.
//
// What a value means depends a little on who holds it (stated at each field): a Plan's seq_len may be 0 (the config's
// training.seq_len), a Candidate's dp_shard is 0 when tp x dp_replicate does not divide the world, and a StepReport
// holds what the Program ran with (its training's sequence length, local batch and checkpointing).

#include <cstdint>
#include <vector>

#include "plans/language/config.h"
#include "plans/language/context_parallel.h"
#include "plans/language/pipeline_parallel.h"

namespace tptune {

struct PlanToggles {
  int tp_degree = 1;
  // FSDP shards over dp_shard ranks. A Candidate's: world / (tp_degree x dp_replicate), 0 when that is not whole.
  int dp_shard = 1;
  // HSDP (torchtitan's data_parallel_replicate_degree): the mesh is [dp_replicate, dp_shard, tp], tp innermost.
  // Parameters, gradients and optimizer state are sharded over dp_shard and replicated over dp_replicate; FSDP2
  // all-reduces each reduce-scattered gradient shard across the dp_replicate group (plans/lower/lower.cc fsdp_reduce).
  // 1: plain FSDP over dp_shard.
  int dp_replicate = 1;
  Float8Recipe float8 = Float8Recipe::none;
  bool async_tp = false;
  bool loss_parallel = false;
  ActivationCheckpointing activation_checkpointing = ActivationCheckpointing::none;
  // Activation checkpointing on the first `ac_layers` blocks only (layers 0 .. ac_layers-1), the others saving every
  // activation: Megatron-LM's --recompute-method block --recompute-num-layers N. 0: every block (the default).
  // Only with activation_checkpointing selective or full; at most model.n_layers (lower() checks both, naming the
  // key's origin). The lowering splits the block backward in two segments (plans/program/program.h, "Structure").
  int64_t ac_layers = 0;
  int64_t local_batch_size = 1;
  // Microbatches per optimizer step (torchtitan's gradient_accumulation_steps = training.global_batch_size /
  // (local_batch_size x dp_replicate x dp_shard)). The lowering does not read it: a Program is one microbatch's
  // forward and backward plus the optimizer, and the simulator repeats the microbatch (sim/accumulation.h).
  int64_t gradient_accumulation_steps = 1;
  // Tokens per sequence. A Plan's: the length the plan was chosen for (`tp-plan search` with search.seq_lens); 0: the
  // config's training.seq_len. The lowering reads Training::seq_len, not this: the tools set the config's
  // training.seq_len from a plan file that states it (tools/plan_options.cc), and the exports pass it to torchtitan.
  // A Candidate's and a StepReport's: always the length it is lowered and simulated at.
  int64_t seq_len = 0;
  // Context parallelism (plans/language/context_parallel.h): every sequence sharded over cp_degree ranks, attention as
  // a ring of key/value shards. The mesh is [dp_replicate, dp_shard, cp, tp]; FSDP shards over dp_shard x cp. A
  // Candidate's dp_shard is world / (tp x cp x dp_replicate). 1: no CP (the Program is the one without these fields).
  int cp_degree = 1;
  // How K/V travel (torch's _RotateMethod; torchtitan's context_parallel_rotate_method before 0.3): allgather, torch's
  // and torchtitan's default, or alltoall (a ring of cp-1 transfers).
  CpRotate cp_rotate = CpRotate::allgather;
  // torch's head-tail load balancer for causal attention (torchtitan's context_parallel_load_balancer "headtail",
  // the default; off: None).
  bool cp_load_balance = true;
  // Pipeline parallelism (plans/language/pipeline_parallel.h): the layers split into pp_degree x stages-per-rank
  // stages, the local batch into microbatches of pp_microbatch_size, run in pp_schedule's order. The mesh is [pp,
  // dp_replicate, dp_shard, cp, tp]; a Candidate's dp_shard is world / (pp x tp x cp x dp_replicate). 1: no PP (every
  // other pp field is then unused, and nothing prints or writes them).
  int pp_degree = 1;
  PipelineScheduleKind pp_schedule = PipelineScheduleKind::one_f_one_b;
  int64_t pp_microbatch_size = 1;
  int pp_stages_per_rank = 0;  // 0: the schedule's default (default_stages_per_rank)
  int pp_first_stage_less_layers = 1;
  int pp_last_stage_less_layers = 1;
  std::vector<int> pp_split;  // blocks per stage; empty: torchtitan's default split
  // Expert parallelism (plans/language/expert_parallel.h): a mixture-of-experts model's routed experts split over
  // ep_degree ranks of the sparse mesh (pp, dp_replicate, efsdp, ep), efsdp = dp_shard x cp x tp / ep (torchtitan
  // 0.3.0's parallelism.expert_parallel_degree). 1: no EP (a dense model's only value).
  int ep_degree = 1;

  PlanToggles& toggles() { return *this; }
  const PlanToggles& toggles() const { return *this; }
  bool operator==(const PlanToggles&) const = default;
};

}  // namespace tptune
