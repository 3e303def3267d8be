#include "plans/program/program_identity.h"

#include <fmt/format.h>

#include <vector>

#include "plans/language/module_names.h"
#include "plans/util/error.h"
#include "plans/util/yaml_util.h"

namespace tptune {

nlohmann::json program_identity(const Program& p) {
  const Model& m = p.model;
  const Plan& plan = p.plan;
  nlohmann::json id = {{"model",
                        {{"name", m.name},
                         {"dim", m.dim},
                         {"n_layers", m.n_layers},
                         {"n_heads", m.n_heads},
                         {"n_kv_heads", m.n_kv_heads},
                         {"ffn_dim", m.ffn_dim},
                         {"vocab_size", m.vocab_size},
                         {"mlp", std::string(to_string(m.mlp))},
                         {"norm", std::string(to_string(m.norm))}}},
                       {"training",
                        {{"seq_len", p.training.seq_len},
                         {"local_batch_size", p.training.local_batch_size},
                         {"dtype", std::string(to_string(p.training.dtype))},
                         {"activation_checkpointing", std::string(to_string(p.training.activation_checkpointing))}}},
                       {"plan",
                        {{"family", plan.family},
                         {"source", plan.source},
                         {"tp_degree", plan.tp_degree},
                         {"float8", std::string(to_string(plan.float8))},
                         {"async_tp", plan.async_tp},
                         {"loss_parallel", plan.loss_parallel}}},
                       {"tp", p.tp},
                       {"dp", p.dp}};
  // A head_dim of its own, q/k/v biases, tied embeddings and repeated kv heads only when the model has them, so that
  // the identity of every other model (and the profiles written before them) reads as it did.
  if (m.explicit_head_dim > 0) id["model"]["head_dim"] = m.explicit_head_dim;
  if (m.qkv_bias) id["model"]["qkv_bias"] = true;
  if (m.tie_word_embeddings) id["model"]["tie_word_embeddings"] = true;
  if (m.gqa != Gqa::enable_gqa) id["model"]["gqa"] = std::string(to_string(m.gqa));
  // Likewise the mode for compiled Programs (training.compile, implied by async TP: the fused kernels of
  // plans/lower/rewrite/compile_fusion.h ran); a profile without it ran the eager kernels.
  if (p.training.compiled(p.plan.async_tp)) id["training"]["compile"] = true;
  // Likewise context parallelism only for CP Programs (their dp is FSDP's dp_shard x cp).
  if (p.cp > 1) {
    id["cp"] = p.cp;
    id["plan"]["cp_rotate_method"] = std::string(to_string(plan.cp_rotate));
    id["plan"]["cp_load_balance"] = plan.cp_load_balance;
  }
  return id;
}

namespace {

// A value as the message shows it: strings bare, the rest as JSON, at most 40 characters.
std::string value_text(const nlohmann::json& v) {
  return yaml::shown(v.is_string() ? v.get<std::string>() : v.dump(), 40);
}

}  // namespace

void check_same_program(const nlohmann::json& profiled, const Program& p, const std::string& name,
                        std::string_view lowered_from) {
  const std::string other = lowered_from.empty() ? "simulated" : std::string(lowered_from);
  if (!profiled.is_object())
    throw Error(
        fmt::format("{}: program: expected the profiled model, training and plan (tp-run profile writes them)", name));
  const nlohmann::json mine = program_identity(p);
  std::vector<std::string> diffs;
  auto compare = [&](const std::string& key, const nlohmann::json& want, const nlohmann::json* got) {
    if (got == nullptr)
      diffs.push_back(fmt::format("{} missing (profile) vs {} ({})", key, value_text(want), other));
    else if (*got != want)
      diffs.push_back(fmt::format("{} {} (profile) vs {} ({})", key, value_text(*got), value_text(want), other));
  };
  for (const auto& [section, fields] : mine.items()) {
    if (!fields.is_object()) {
      compare(section, fields, profiled.contains(section) ? &profiled[section] : nullptr);
      continue;
    }
    const nlohmann::json* theirs =
        profiled.contains(section) && profiled[section].is_object() ? &profiled[section] : nullptr;
    for (const auto& [key, want] : fields.items()) {
      if (key == "name" || key == "family" || key == "source") continue;
      compare(section + "." + key, want, theirs && theirs->contains(key) ? &(*theirs)[key] : nullptr);
    }
  }
  // The model features written only when present: a profile that has one the simulated model lacks differs too.
  if (profiled.contains("training") && profiled["training"].is_object() && profiled["training"].contains("compile") &&
      !mine["training"].contains("compile"))
    diffs.push_back(
        fmt::format("training.compile {} (profile) vs false ({})", value_text(profiled["training"]["compile"]), other));
  if (profiled.contains("model") && profiled["model"].is_object())
    for (const char* key : {"head_dim", "qkv_bias", "tie_word_embeddings", "gqa"})
      if (profiled["model"].contains(key) && !mine["model"].contains(key))
        diffs.push_back(
            fmt::format("model.{} {} (profile) vs none ({})", key, value_text(profiled["model"][key]), other));
  // The module styles of the profiled plan (tp-run profile writes the resolved plan) against the simulated one's. At
  // tp 1 no style applies (torchtitan does not apply TP; the lowered Program's plan has none, its plan_yaml may).
  if (diffs.empty() && p.plan.tp_degree > 1 && profiled.contains("plan_yaml") && profiled["plan_yaml"].is_string()) {
    Plan theirs;
    try {
      theirs = load_plan_string(profiled["plan_yaml"].get<std::string>(), name + " (program.plan_yaml)");
    } catch (const Error& e) {
      throw Error(fmt::format("{}: program.plan_yaml: {}", name, e.what()));
    }
    if (theirs.framework != p.plan.framework)
      diffs.push_back(fmt::format("plan.framework {} (profile) vs {} ({})", to_string(theirs.framework),
                                  to_string(p.plan.framework), other));
    for (std::string fqn : module_patterns(p.model)) {
      if (fqn.starts_with("layers.*")) fqn.replace(7, 1, "0");
      const ParallelStyle* a = theirs.style_for(fqn);
      const ParallelStyle* b = p.plan.style_for(fqn);
      if (a == nullptr && b == nullptr) continue;
      if (a != nullptr && b != nullptr && *a == *b) continue;
      diffs.push_back(fmt::format("{} {} (profile) vs {} ({})", fqn, a ? to_string(*a) : "not parallelized",
                                  b ? to_string(*b) : "not parallelized", other));
    }
  }
  if (diffs.empty()) return;
  // tp-run profiles one data-parallel replica (dp 1): the usual difference on a cluster larger than the TP group.
  const bool dp_only = diffs.size() == 1 && diffs.front().starts_with("dp ");
  const std::string hint = dp_only ? "tp-run profiles one data-parallel replica: simulate with --dp-shard 1"
                                   : "profile the simulated config and plan (tp-run profile CONFIG --plan ...)";
  const size_t shown_diffs = std::min<size_t>(diffs.size(), 4);
  const std::string listed =
      fmt::format("{}{}", fmt::join(diffs.begin(), diffs.begin() + static_cast<long>(shown_diffs), ", "),
                  diffs.size() > shown_diffs ? fmt::format(" and {} more", diffs.size() - shown_diffs) : "");
  if (!lowered_from.empty())
    throw Error(fmt::format("{}: program: the profiled model, training or plan is not the one {} lowers to: {}", name,
                            lowered_from, listed));
  throw Error(fmt::format("{}: a profile of another model or plan: {}; {}", name, listed, hint));
}

}  // namespace tptune
