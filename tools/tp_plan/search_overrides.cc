#include "tools/tp_plan/search_overrides.h"

#include <fmt/format.h>

#include <algorithm>

#include "plans/language/plan.h"
#include "plans/util/error.h"

namespace tptune::tools {

namespace {

// What the space's key held: "[1, 2, 4, 8] (default)" or "[2, 8] (x.yaml:14)".
std::string was(const SearchSpace& s, const std::string& key, const std::string& value) {
  auto it = s.stated_at.find(key);
  return fmt::format("{} ({})", value, it == s.stated_at.end() ? std::string("default") : it->second);
}

template <class T>
std::string list_text(const std::vector<T>& v) {
  return fmt::format("[{}]", fmt::join(v, ", "));
}

template <class T>
std::string names_text(const std::vector<T>& v) {
  std::vector<std::string> names;
  for (const T& x : v) names.emplace_back(to_string(x));
  return list_text(names);
}

std::string bools_text(const std::vector<bool>& v) {
  std::vector<std::string> names;
  for (bool x : v) names.emplace_back(x ? "true" : "false");
  return list_text(names);
}

// An integer option that narrows one of the space's lists to its value: recorded in `applied` with what the list held,
// then the list replaced.
template <class V, class T>
void narrow_list(std::vector<AppliedOverride>& applied, const SearchSpace& s, const char* option,
                 const std::optional<V>& value, const std::string& key, std::vector<T>& list) {
  if (!value) return;
  applied.push_back({option, std::to_string(*value), "search." + key, was(s, key, list_text(list))});
  list = {*value};
}

bool holds(const std::vector<Float8Recipe>& v, Float8Recipe f) { return std::find(v.begin(), v.end(), f) != v.end(); }

// --framework F: the space's framework, with that framework's defaults for the float8 and loss_parallel lists the
// config does not state; a stated list the framework refuses is an error naming both.
void restrict_framework(SearchSpace& s, const PlanOptions& o, std::vector<AppliedOverride>& applied) {
  const Framework f = parse_framework(*o.framework, "--framework");
  const std::string name(to_string(f));
  const bool tt = f == Framework::torchtitan_0_3;
  applied.push_back({"--framework", name, "search.framework", was(s, "framework", s.framework)});
  if (name == s.framework) return;
  s.framework = name;
  const std::vector<Float8Recipe> recipes = search_float8_recipes(tt);
  if (!o.float8) {
    if (auto it = s.stated_at.find("float8"); it == s.stated_at.end()) {
      s.float8 = recipes;
    } else {
      for (Float8Recipe r : s.float8)
        if (!holds(recipes, r))
          throw Error(fmt::format(
              "--framework {}: {}: search.float8 lists {}, which the {} search does not take (expected {}); give "
              "--float8 too, or edit the list",
              name, it->second, to_string(r), name, names_text(recipes)));
    }
  }
  if (tt) {
    if (auto it = s.stated_at.find("loss_parallel"); it != s.stated_at.end() && !o.loss_parallel)
      throw Error(
          fmt::format("--framework {}: {}: search.loss_parallel: torchtitan 0.3 has no loss-parallel switch "
                      "(always on under TP): leave the key out",
                      name, it->second));
    s.loss_parallel = {true};
  } else if (!s.stated_at.count("loss_parallel")) {
    s.loss_parallel = SearchSpace{}.loss_parallel;
  }
}

}  // namespace

std::vector<AppliedOverride> restrict_search_space(Config& cfg, const PlanOptions& o) {
  if (o.dp_shard)
    throw Error(
        "--dp-shard: not a restriction of the search: each candidate's dp_shard is world / (tp x dp_replicate); "
        "restrict --tp, --dp-replicate or the cluster (--nodes, --gpus-per-node) instead");
  if (o.ac_layers)
    throw Error(
        "--ac-layers: not a restriction of the search: search.ac_layers adds block counts next to every block "
        "(write it in the config's search section); restrict the policy with --ac");
  if (o.loss_chunks)
    throw Error("--loss-chunks: not searched: the search's candidates use their framework's loss chunks");
  if (o.cp_rotate || o.no_cp_load_balance)
    throw Error(
        fmt::format("{}: not searched: the search's context-parallel candidates run torchtitan's defaults "
                    "(allgather, load-balanced); simulate a plan with it instead",
                    o.cp_rotate ? "--cp-rotate" : "--no-cp-load-balance"));
  check_plan_option_ranges(o);
  std::vector<AppliedOverride> applied = apply_config_overrides(cfg, o.overrides);
  SearchSpace& s = cfg.search;
  // Refused as simulate refuses it, before what the framework's lists need.
  const bool to_tt = o.framework ? parse_framework(*o.framework, "--framework") == Framework::torchtitan_0_3
                                 : s.framework == "torchtitan-0.3";
  if (o.no_loss_parallel && to_tt) refuse_no_loss_parallel_under_torchtitan();
  if (o.framework) restrict_framework(s, o, applied);
  const bool tt = s.framework == "torchtitan-0.3";
  if (o.tp) {
    applied.push_back(
        {"--tp", std::to_string(*o.tp), "search.tp_degrees",
         was(s, "tp_degrees",
             s.tp_degrees.empty() ? std::string("divisors of the world size") : list_text(s.tp_degrees))});
    s.tp_degrees = {*o.tp};
  }
  narrow_list(applied, s, "--dp-replicate", o.dp_replicate, "dp_replicate", s.dp_replicate);
  narrow_list(applied, s, "--cp", o.cp, "cp_degrees", s.cp_degrees);
  if (o.ep) {
    if (cfg.model.moe.experts == 0 && *o.ep != 1)
      throw Error(fmt::format("--ep: ep_degree {}: the model has no routed experts (model.moe); expected 1", *o.ep));
    applied.push_back({"--ep", std::to_string(*o.ep), "search.ep_degrees",
                       was(s, "ep_degrees",
                           cfg.model.moe.experts > 0 && !s.stated_at.count("ep_degrees")
                               ? std::string("every degree the sparse mesh allows")
                               : list_text(s.ep_degrees))});
    s.ep_degrees = {*o.ep};
    s.stated_at["ep_degrees"] = "option --ep";  // (given: not replaced by a MoE model's default)
  }
  narrow_list(applied, s, "--pp", o.pp, "pp_degrees", s.pp_degrees);
  if (o.pp_schedule) {
    const PipelineScheduleKind kind = parse_pipeline_schedule(*o.pp_schedule, "--pp-schedule");
    applied.push_back({"--pp-schedule", std::string(to_string(kind)), "search.pp_schedules",
                       was(s, "pp_schedules", names_text(s.pp_schedules))});
    s.pp_schedules = {kind};
  }
  narrow_list(applied, s, "--pp-microbatch-size", o.pp_microbatch_size, "pp_microbatch_sizes", s.pp_microbatch_sizes);
  narrow_list(applied, s, "--pp-stages-per-rank", o.pp_stages_per_rank, "pp_stages_per_rank", s.pp_stages_per_rank);
  if (!o.preset.empty()) {
    (void)preset_plan(o.preset, Plan{});  // the name, checked as simulate checks it
    applied.push_back(
        {"--preset", o.preset, "search.presets",
         was(s, "presets", list_text(s.presets)) +
             (s.plan_files.empty() ? "" : fmt::format(", and no search.plans {}", list_text(s.plan_files)))});
    s.presets = {o.preset};
    s.plan_files.clear();
  }
  if (!o.plan_file.empty()) {
    applied.push_back({"--plan", o.plan_file, "search.plans",
                       was(s, "plans", list_text(s.plan_files)) +
                           (s.presets.empty() ? "" : fmt::format(", and no search.presets {}", list_text(s.presets)))});
    s.plan_files = {o.plan_file};
    s.presets.clear();
  }
  if (o.float8) {
    const Float8Recipe f = parse_float8(*o.float8, "--float8");
    if (tt && f == Float8Recipe::tensorwise)
      throw Error(
          "--float8: torchtitan 0.3's Float8LinearConverter has the recipes rowwise and rowwise_with_gw_hp only (no "
          "tensorwise, no float8 TP styles)");
    if (!holds(search_float8_recipes(tt), f))
      throw Error(
          fmt::format("--float8 {}: the {} search takes {} (search.float8); rowwise_with_gw_hp is torchtitan "
                      "0.3's recipe (--framework torchtitan-0.3)",
                      to_string(f), s.framework, names_text(search_float8_recipes(tt))));
    applied.push_back({"--float8", std::string(to_string(f)), "search.float8", was(s, "float8", names_text(s.float8))});
    s.float8 = {f};
  }
  if (o.async_tp || o.no_async_tp) {
    applied.push_back({o.async_tp ? "--async-tp" : "--no-async-tp", "", "search.async_tp",
                       was(s, "async_tp", bools_text(s.async_tp))});
    s.async_tp = {o.async_tp};
  }
  if (o.loss_parallel || o.no_loss_parallel) {
    applied.push_back({o.loss_parallel ? "--loss-parallel" : "--no-loss-parallel", "", "search.loss_parallel",
                       was(s, "loss_parallel", bools_text(s.loss_parallel))});
    s.loss_parallel = {o.loss_parallel};
  }
  if (o.ac) {
    const ActivationCheckpointing a = parse_activation_checkpointing(*o.ac, "--ac");
    applied.push_back({"--ac", std::string(to_string(a)), "search.activation_checkpointing",
                       was(s, "activation_checkpointing", names_text(s.activation_checkpointing))});
    s.activation_checkpointing = {a};
  }
  if (o.local_batch_size) {
    const bool max = s.max_local_batch_size > 0;
    applied.push_back({"--local-batch-size", std::to_string(*o.local_batch_size),
                       max ? "search.max_local_batch_size" : "search.local_batch_sizes",
                       max ? was(s, "max_local_batch_size", std::to_string(s.max_local_batch_size))
                           : was(s, "local_batch_sizes", list_text(s.local_batch_sizes))});
    s.local_batch_sizes = {*o.local_batch_size};
    s.max_local_batch_size = 0;
  }
  if (o.global_batch_size) {
    if (s.max_local_batch_size > 0)
      throw Error(fmt::format(
          "--global-batch-size: fixes the local batch per dp_shard, but {}: search.max_local_batch_size searches "
          "it; give --local-batch-size too, or search.local_batch_sizes",
          s.stated_at.at("max_local_batch_size")));
    applied.push_back(
        {"--global-batch-size", std::to_string(*o.global_batch_size), "search.global_batch_size",
         was(s, "global_batch_size",
             s.global_batch_size > 0 ? fmt::format("{}{}", s.global_batch_size,
                                                   s.gradient_accumulation ? " with gradient_accumulation" : "")
                                     : std::string("none"))});
    s.global_batch_size = *o.global_batch_size;
    s.gradient_accumulation = true;
  }
  if (o.compile || o.no_compile) {
    const std::string before = cfg.training.compile ? (*cfg.training.compile ? "true" : "false") : "unset";
    applied.push_back(
        {o.compile ? "--compile" : "--no-compile", "", "training.compile", fmt::format("{} ({})", before, cfg.path)});
    cfg.training.compile = o.compile;
  }
  return applied;
}

std::string overrides_text(const std::vector<AppliedOverride>& applied) {
  if (applied.empty()) return {};
  std::string out = "overrides (each replaces the config's value):\n";
  for (const AppliedOverride& a : applied) {
    const std::string option = a.value.empty() ? a.option : a.option + " " + a.value;
    out += fmt::format("  {:<24} {}, was {}\n", option, a.replaces, a.was);
  }
  return out + "\n";
}

}  // namespace tptune::tools
