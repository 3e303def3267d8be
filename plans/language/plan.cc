#include "plans/language/plan.h"

#include <fmt/format.h>

#include "plans/util/checked_math.h"
#include "plans/util/enum_names.h"
#include "plans/util/error.h"

namespace tptune {

// Framework's enumerators, in declaration order.
constexpr std::string_view kFrameworkNames[] = {"dtensor", "torchtitan-0.3"};
static_assert(std::size(kFrameworkNames) == enum_count(Framework::torchtitan_0_3));

std::string_view to_string(Framework f) { return name_of(kFrameworkNames, f); }

Framework parse_framework(std::string_view s, const std::string& where) {
  return parse_name<Framework>(kFrameworkNames, s, where);
}

// StyleKind's enumerators, in declaration order.
constexpr std::string_view kStyleKindNames[] = {"colwise", "rowwise", "sequence_parallel", "prepare_module_input",
                                                "no_parallel"};
static_assert(std::size(kStyleKindNames) == enum_count(StyleKind::no_parallel));

std::string_view to_string(StyleKind k) { return name_of(kStyleKindNames, k); }

// The defaults of torch.distributed.tensor.parallel's style classes (the shard dims are those of a (b, s, h)
// activation: S(1) is the sequence dim, S(-1) the hidden/feature dim).
ParallelStyle ParallelStyle::colwise() {
  return {StyleKind::colwise, Placement::R(), Placement::R(), Placement::S(-1), true};
}

ParallelStyle ParallelStyle::rowwise() {
  return {StyleKind::rowwise, Placement::S(-1), Placement::S(-1), Placement::R(), true};
}

ParallelStyle ParallelStyle::sequence_parallel() {
  return {StyleKind::sequence_parallel, Placement::S(1), Placement::S(1), Placement::S(1), false};
}

ParallelStyle ParallelStyle::prepare_module_input(Placement input, Placement desired) {
  // No output layout: the module's output is whatever its submodules produce (kept at the default R, unused).
  return {StyleKind::prepare_module_input, input, desired, Placement::R(), false};
}

ParallelStyle ParallelStyle::no_parallel() {
  return {StyleKind::no_parallel, Placement::R(), Placement::R(), Placement::R(), true};
}

ParallelStyle ParallelStyle::defaults(StyleKind k) {
  switch (k) {
    case StyleKind::colwise:
      return colwise();
    case StyleKind::rowwise:
      return rowwise();
    case StyleKind::sequence_parallel:
      return sequence_parallel();
    case StyleKind::prepare_module_input:
    case StyleKind::no_parallel:
      break;
  }
  return no_parallel();
}

std::string to_string(const ParallelStyle& s) {
  const char* local = s.use_local_output ? ", local" : "";
  switch (s.kind) {
    case StyleKind::colwise:
    case StyleKind::rowwise:
    case StyleKind::sequence_parallel:
      return fmt::format("{}(input {}, output {}{})", to_string(s.kind), to_string(s.input_layout),
                         to_string(s.output_layout), local);
    case StyleKind::prepare_module_input:
      return fmt::format("prepare_module_input(input {} -> {}{})", to_string(s.input_layout),
                         to_string(s.desired_input_layout), local);
    case StyleKind::no_parallel:
      return "no_parallel";
  }
  return "?";
}

// Component by component ("layers.*.attention" has three), without splitting into new strings: the lowering asks
// for every module's style.
bool fqn_matches(const std::string& pattern, const std::string& fqn) {
  if (pattern.find('*') == std::string::npos) return pattern == fqn;
  std::string_view p = pattern, f = fqn;
  while (true) {
    const size_t pd = p.find('.'), fd = f.find('.');
    const std::string_view pc = p.substr(0, pd), fc = f.substr(0, fd);
    if (pc != "*" && pc != fc) return false;
    if (pd == std::string_view::npos || fd == std::string_view::npos) return pd == fd;  // as many components
    p.remove_prefix(pd + 1);
    f.remove_prefix(fd + 1);
  }
}

const ParallelStyle* Plan::style_for(const std::string& fqn) const {
  for (auto it = modules.rbegin(); it != modules.rend(); ++it)
    if (fqn_matches(it->pattern, fqn)) return &it->style;
  return nullptr;
}

std::string ac_text(ActivationCheckpointing ac, int64_t ac_layers, int64_t n_layers) {
  const std::string policy(to_string(ac));
  if (ac == ActivationCheckpointing::none || ac_layers <= 0) return policy;
  if (n_layers <= 0) return fmt::format("{} on the first {} block{}", policy, ac_layers, ac_layers == 1 ? "" : "s");
  if (ac_layers >= n_layers) return fmt::format("{} on all {} blocks", policy, n_layers);
  return fmt::format("{} on the first {} of {} blocks", policy, ac_layers, n_layers);
}

int64_t Plan::global_batch_size() const {
  return checked_mul({local_batch_size, dp_shard, dp_replicate, gradient_accumulation_steps},
                     "global batch size (local_batch_size x dp_shard x dp_replicate x gradient_accumulation_steps)");
}

// Two plans are equal when they parallelize the same way: same toggles and the same entries in the same order.
// `family` and `source` are labels for reports, and entry lines are provenance; neither takes part.
bool Plan::operator==(const Plan& o) const {
  return toggles() == o.toggles() && modules == o.modules && framework == o.framework && fused_qkv == o.fused_qkv &&
         output_fqn == o.output_fqn && chunks() == o.chunks() && fsdp_always == o.fsdp_always &&
         ac_early_stop == o.ac_early_stop && ac_saves_reduce_scatter == o.ac_saves_reduce_scatter &&
         clip_grad_norm == o.clip_grad_norm && attention_kernel == o.attention_kernel;
}

void check_parallel_keys(const Plan& plan) {
  auto refuse = [&](const char* key, const std::string& value, const char* degree_key, int degree, const char* option) {
    auto it = plan.provenance.find(key);
    if (it == plan.provenance.end()) return;  // not stated: the default, unused
    auto d = plan.provenance.find(degree_key);
    throw Error(fmt::format("{}: {} {}: needs {} > 1 ({} N, or {} in the plan file); {} is {} ({})", it->second, key,
                            value, degree_key, option, degree_key, degree_key, degree,
                            d != plan.provenance.end() ? d->second : std::string("the default")));
  };
  if (plan.pp_degree <= 1) {
    auto pp = [&](const char* key, const std::string& value) {
      refuse(key, value, "pp_degree", plan.pp_degree, "--pp");
    };
    pp("pp_schedule", std::string(to_string(plan.pp_schedule)));
    pp("pp_microbatch_size", std::to_string(plan.pp_microbatch_size));
    pp("pp_stages_per_rank", std::to_string(plan.pp_stages_per_rank));
    pp("pp_first_stage_less_layers", std::to_string(plan.pp_first_stage_less_layers));
    pp("pp_last_stage_less_layers", std::to_string(plan.pp_last_stage_less_layers));
    pp("pp_split", fmt::format("[{}]", fmt::join(plan.pp_split, ", ")));
  }
  if (plan.cp_degree <= 1) {
    auto cp = [&](const char* key, const std::string& value) {
      refuse(key, value, "cp_degree", plan.cp_degree, "--cp");
    };
    cp("cp_rotate_method", std::string(to_string(plan.cp_rotate)));
    cp("cp_load_balance", plan.cp_load_balance ? "true" : "false");
  }
}

}  // namespace tptune
