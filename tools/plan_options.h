#pragma once
// The plan-selecting options shared by `tp-plan explain|simulate` and `tp-run verify|profile`:
//   CONFIG [--hf-config FILE] (--preset NAME | --plan FILE) [--tp N] [--dp-shard N] [--float8 none|tensorwise|rowwise]
//   [--async-tp] [--loss-parallel | --no-loss-parallel] [--ac none|selective|full] [--local-batch-size N]
// A plan file's own values are kept unless an option overrides them. For a preset: tp defaults to the cluster's
// gpus_per_node, dp_shard to world_size / tp, activation checkpointing and local batch size to the config's
// training section, loss parallel to on for sequence_parallel (torchtitan's default) and off for vanilla.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "plans/config.h"
#include "plans/plan.h"

namespace tptune::tools {

struct PlanOptions {
  std::string config;
  std::string hf_config;  // --hf-config: a transformers config.json replacing the config's model section
  std::string preset;
  std::string plan_file;
  std::optional<int> tp, dp_shard;
  std::optional<std::string> float8, ac;
  std::optional<int64_t> local_batch_size;
  bool async_tp = false;
  bool loss_parallel = false, no_loss_parallel = false;
};

void add_plan_options(CLI::App* cmd, PlanOptions& o, bool with_dp_shard = true);
// Loads the plan the options name (errors are tptune::Error naming the option or file).
Plan resolve_plan(const Config& cfg, const PlanOptions& o);

// Writes `j` (indented) to the file `where`, or to stdout for "-"; tptune::Error if it cannot.
void write_json(const nlohmann::json& j, const std::string& where);
// Writes `text` to the file `where`; tptune::Error naming `option` if it cannot.
void write_text(const std::string& text, const std::string& where, const std::string& option);

}  // namespace tptune::tools
