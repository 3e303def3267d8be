#pragma once
// The plan options of `tp-plan search` (those of explain and simulate, tools/plan_options.h) as restrictions of the
// config's search space, without editing the YAML.
//
// Each option replaces one key of the config's `search:` section with exactly its value, as if the YAML said so:
//   --tp N                  search.tp_degrees: [N]        --dp-replicate N     search.dp_replicate: [N]
//   --cp N                  search.cp_degrees: [N]        --ep N               search.ep_degrees: [N] (a dense
//                                                                                  model: 1 only)
//   --pp N                  search.pp_degrees: [N]        --pp-schedule S      search.pp_schedules: [S]
//   --pp-microbatch-size B  search.pp_microbatch_sizes: [B]
//   --pp-stages-per-rank N  search.pp_stages_per_rank: [N]
//   --preset NAME           search.presets: [NAME], no plan files
//   --plan FILE             search.plans: [FILE], no presets
//   --framework F           search.framework: F (and the framework's float8 and loss_parallel defaults when the
//                           config does not list them; a list the framework refuses is an error naming its line)
//   --float8 R              search.float8: [R]            --async-tp | --no-async-tp   search.async_tp: [true|false]
//   --loss-parallel | --no-loss-parallel                  search.loss_parallel: [true|false]
//   --ac P                  search.activation_checkpointing: [P]
//   --local-batch-size N    search.local_batch_sizes: [N] (and no max_local_batch_size)
//   --global-batch-size G   search.global_batch_size: G with gradient_accumulation: true (as simulate: each
//                           candidate accumulates G / (local batch x dp) microbatches, pruned when not whole)
//   --compile | --no-compile  training.compile
// and the config overrides (--gpu, --nodes, --gpus-per-node, --seq-len: apply_config_overrides()) replace the
// cluster and training values as they do for simulate.
//
// A value the config's list does not hold is searched all the same (the option replaces the list, it does not
// intersect it): `--tp 4` searches tp 4 whether or not search.tp_degrees lists it, and the AppliedOverride says
// what the list was. Values the search cannot take are errors naming the option: those simulate refuses (the same
// checks, the same text), those the search's YAML key refuses (--float8 rowwise_with_gw_hp with the dtensor presets,
// whose search.float8 has none, tensorwise and rowwise), and the options that are not a restriction of the space:
// --dp-shard (world / (tp x dp_replicate) for every candidate), --ac-layers (search.ac_layers adds block counts next
// to every block; a search of the first N blocks only is not expressible), --loss-chunks, --cp-rotate and
// --no-cp-load-balance (not searched: CP candidates run torchtitan's defaults).
#include <string>
#include <vector>

#include "plans/language/config.h"
#include "tools/plan_options.h"

namespace tptune::tools {

// Applies the options to `cfg` (its search section, cluster and training) and returns what each replaced, the config
// overrides first; tptune::Error naming the option on a value the search cannot take.
std::vector<AppliedOverride> restrict_search_space(Config& cfg, const PlanOptions& o);

// "overrides (each replaces the config's value):\n  --tp 4   search.tp_degrees, was [1, 2, 4, 8] (default)\n\n"
// (a blank line ends it); empty when none applied.
std::string overrides_text(const std::vector<AppliedOverride>& applied);

}  // namespace tptune::tools
