#pragma once
// The steps of resolving a preset's plan on a config that `tp-plan simulate --preset P ...` (tools/plan_options.cc,
// resolve_plan()) and the public record's runs (sim/calibrate/published_predict.h) share, so that a run of the
// record is predicted exactly as simulate predicts it:
//
//   Plan plan = preset_base_plan(cfg, "sequence_parallel", 0);   // the preset before any option
//   plan.tp_degree = 8; ...                                        // the options' values
//   check_parallel_keys(plan);                                     // no pp or cp key without its degree (plan.h)
//   resolve_dp_shard(cfg, plan, "--tp");                           // dp_shard = world / (tp x dp_replicate)
//   resolve_gradient_accumulation(cfg, std::nullopt, plan);        // from the config's training.global_batch_size
//   plan = preset_plan("sequence_parallel", plan);                 // the modules re-derived with the final toggles

#include <cstdint>
#include <optional>
#include <string>

#include "plans/language/config.h"
#include "plans/language/plan.h"

namespace tptune {

// The preset's plan on the config: tp `default_tp` (0: the cluster's gpus_per_node), loss parallel on for
// sequence_parallel (torchtitan's default) and off for vanilla, the config's activation checkpointing and local batch,
// dp_shard 0 (resolve_dp_shard() fills it). Each value's provenance recorded.
Plan preset_base_plan(const Config& cfg, const std::string& preset, int default_tp);
// dp_shard = world / tp (dp_replicate 1) or world / (tp x dp_replicate), with context parallelism world / (tp x cp x
// dp_replicate) (torchtitan's mesh [dp_replicate, dp_shard, cp, tp]), with pipeline parallelism world / (pp x tp x cp x
// dp_replicate) (the mesh [pp, dp_replicate, dp_shard, cp, tp]), when the plan states none (<= 0); tptune::Error
// when that is not whole, the tp named by `tp_label` ("--tp": "--tp 3: does not divide the cluster's 16 GPUs ...").
void resolve_dp_shard(const Config& cfg, Plan& plan, const std::string& tp_label);
// torchtitan's train.py: gradient_accumulation_steps = global_batch_size / (local_batch_size x dp_shard x
// dp_replicate), the global batch `global_option` (--global-batch-size) when given, else the config's
// training.global_batch_size unless the plan states gradient_accumulation_steps (used as is); none: unchanged.
// tptune::Error naming the option or the config's file:line when the quotient is not whole.
void resolve_gradient_accumulation(const Config& cfg, std::optional<int64_t> global_option, Plan& plan);

}  // namespace tptune
