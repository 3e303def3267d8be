#pragma once
// The plan-selecting options shared by `tp-plan explain|simulate` and `tp-run verify|profile`:
//   CONFIG [--hf-config FILE] (--preset NAME | --plan FILE) [--framework dtensor|torchtitan-0.3] [--tp N] [--dp-shard
//   N] [--dp-replicate N] [--cp N] [--cp-rotate allgather|alltoall] [--no-cp-load-balance]
//   [--pp N] [--pp-schedule NAME] [--pp-microbatch-size N] [--pp-stages-per-rank N]
//   [--float8 none|tensorwise|rowwise|rowwise_with_gw_hp] [--async-tp] [--loss-parallel | --no-loss-parallel]
//   [--ac none|selective|full] [--ac-layers N] [--local-batch-size N] [--global-batch-size N] [--loss-chunks N]
//   [--compile | --no-compile]
// Precedence, for every value: an option, else what the plan file states, else the config (activation
// checkpointing, local batch size, compile), else the default of a preset: tp the cluster's gpus_per_node (tp-run:
// the MPI world size), dp_replicate 1, cp 1, dp_shard world_size / (tp x cp x dp_replicate), loss parallel on for
// sequence_parallel (torchtitan's default) and off for vanilla (always on for torchtitan-0.3). Plan::provenance records
// where each value came from. gradient_accumulation_steps: --global-batch-size, else what the plan file states, else
// the config's training.global_batch_size, divided by local_batch_size x dp_shard x dp_replicate (an error naming the
// option or the config's file:line when that is not whole), else 1. A plan file that states seq_len (a search's winner
// over search.seq_lens) sets the config's training.seq_len.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "plans/language/config.h"
#include "plans/language/plan.h"
#include "plans/util/output_file.h"

namespace tptune::tools {

// The config values an option replaces, for `tp-plan explain|simulate|search` (add_config_overrides()):
//   [--gpu NAME] [--nodes N] [--gpus-per-node N] [--seq-len N]
// Each replaces the config's cluster.gpu, cluster.nodes, cluster.gpus_per_node or training.seq_len, with the range
// checks of the same YAML key (plans/util/limits.h); --seq-len also replaces search.seq_lens (the search runs at that
// length only) and takes precedence over the seq_len a plan file states.
struct ConfigOverrides {
  std::optional<std::string> gpu;
  std::optional<int> nodes, gpus_per_node;
  std::optional<int64_t> seq_len;
};

// One value an option replaced: option "--tp", value "4", replaces "search.tp_degrees", was "[1, 2, 4, 8] (default)" or
// "[2, 8] (x.yaml:14)". What the search prints and writes into its JSON, so that a saved result says how it was made.
struct AppliedOverride {
  std::string option, value, replaces, was;
};

struct PlanOptions {
  std::string config;
  std::string hf_config;  // --hf-config: a transformers config.json replacing the config's model section
  std::string preset;
  std::string plan_file;
  std::optional<int> tp, dp_shard, dp_replicate;
  std::optional<int> cp;                      // --cp: Plan::cp_degree
  std::optional<int> ep;                      // --ep: Plan::ep_degree (a mixture of experts' expert parallelism)
  std::optional<std::string> cp_rotate;       // --cp-rotate: Plan::cp_rotate
  bool no_cp_load_balance = false;            // --no-cp-load-balance: Plan::cp_load_balance false
  std::optional<int> pp;                      // --pp: Plan::pp_degree
  std::optional<std::string> pp_schedule;     // --pp-schedule: Plan::pp_schedule
  std::optional<int64_t> pp_microbatch_size;  // --pp-microbatch-size: Plan::pp_microbatch_size
  std::optional<int> pp_stages_per_rank;      // --pp-stages-per-rank: Plan::pp_stages_per_rank
  std::optional<std::string> float8, ac;
  std::optional<int64_t> local_batch_size;
  std::optional<int64_t> ac_layers;          // --ac-layers: Plan::ac_layers (0: every block)
  std::optional<int64_t> global_batch_size;  // --global-batch-size: the plan's gradient_accumulation_steps from it
  std::optional<std::string> framework;
  std::optional<int> loss_chunks;
  bool async_tp = false, no_async_tp = false;
  bool loss_parallel = false, no_loss_parallel = false;
  bool compile = false, no_compile = false;
  ConfigOverrides overrides;  // empty unless the command registers add_config_overrides()
};

void add_plan_options(CLI::App* cmd, PlanOptions& o, bool with_dp_shard = true);
// --gpu, --nodes, --gpus-per-node, --seq-len (ConfigOverrides).
void add_config_overrides(CLI::App* cmd, ConfigOverrides& o);
// A `tp-plan` command that reads a config and a plan (explain, simulate, search, check): the subcommand with the plan
// options and the config overrides, both into `o`.
CLI::App* add_plan_command(CLI::App& app, const std::string& name, const std::string& description, PlanOptions& o);
// The config the options name (CONFIG, --hf-config) with o.overrides applied (apply_config_overrides()).
Config load_options_config(const PlanOptions& o);
// Replaces the config's values with the options' (tptune::Error naming the option when a value is out of the key's
// range or conflicts with the config); returns what each replaced, in option order. The GPU name is checked where the
// cluster is resolved (sim/cluster_spec.h: "--gpu: unknown GPU preset ...").
std::vector<AppliedOverride> apply_config_overrides(Config& cfg, const ConfigOverrides& o);
// The options again, as they would be typed (" --gpu h200 --nodes 2"; empty when none), for printed commands.
std::string config_override_args(const ConfigOverrides& o);
// The range checks of the numeric plan options (--tp, --dp-shard, --dp-replicate, --local-batch-size,
// --global-batch-size): "--tp: expected an integer in 1..1048576, got 0". resolve_plan() runs them first.
void check_plan_option_ranges(const PlanOptions& o);
// Throws the error of --no-loss-parallel under torchtitan 0.3 (which has no such switch).
[[noreturn]] void refuse_no_loss_parallel_under_torchtitan();

// CLI11 validators for numeric options, so that a bad value is one short line (CLI11's own NonNegativeNumber states
// its range as a 309-digit number):
//   tp-plan: error: --top: expected an integer in 1..1000000, got 'abc' (see tp-plan --help)
// integer_option: a whole decimal integer in [lo, hi]; number_option: a finite number in [lo, hi].
CLI::Validator integer_option(int64_t lo, int64_t hi);
CLI::Validator number_option(double lo, double hi);
// A whole decimal integer of int64 (the option's range `lo..hi` is only stated: a later check names the option, as
// resolve_plan() does for the plan options), so that 99999999999999999999 is not read as INT64_MAX; `int32`: of int
// (an int option), so that 4294967297 is this message and not CLI11's "Could not convert".
CLI::Validator integer_text(int64_t lo, int64_t hi, bool int32 = false);
// Loads the plan the options name (errors are tptune::Error naming the option or file), and applies --compile /
// --no-compile to cfg.training. `default_tp`: the tp of a preset or plan file that states none (0: the cluster's
// gpus_per_node).
Plan resolve_plan(Config& cfg, const PlanOptions& o, int default_tp = 0);
// The effective values of a run and where each came from ("  local_batch_size      4      config x.yaml"), for the
// text reports.
// `gpu_architecture`: the cluster GPU's (GpuSpec::architecture), which training.sdpa_backend's `auto` resolves by.
std::string effective_values_text(const Config& cfg, const Plan& plan, std::string_view gpu_architecture);
// {"sdpa_backend": {"value": "cudnn", "setting": "auto", "why": "auto: hopper, ..."}} for a JSON output: the attention
// kernel the prediction of `plan` priced (plans/language/backends/sdpa_backend.h); value "device" on the cpu device.
nlohmann::json sdpa_backend_json(const Training& t, const Plan& plan, std::string_view gpu_architecture);

// The files the plan options name (config, --hf-config, --plan), for refuse_overwriting_inputs
// (plans/util/output_file.h).
std::vector<NamedPath> plan_inputs(const PlanOptions& o);

// Writes `j` (indented, with the version stamp of plans/util/version.h) to the file `where`, or to stdout for "-"; the
// file whole or not at all, tptune::Error naming `option` if it cannot (plans/util/output_file.h).
void write_json(const nlohmann::json& j, const std::string& where, const std::string& option = "--json");

}  // namespace tptune::tools
