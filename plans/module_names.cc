#include "plans/module_names.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "plans/error.h"

namespace tptune {

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t dot; (dot = s.find('.', start)) != std::string::npos; start = dot + 1)
    out.push_back(s.substr(start, dot - start));
  out.push_back(s.substr(start));
  return out;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// A pattern component against a module-pattern component: `*` in the module pattern is a layer index.
bool component_matches(const std::string& p, const std::string& module, int64_t n_layers) {
  if (p == "*") return true;
  if (module != "*") return p == module;
  int64_t layer = -1;
  const auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), layer);
  return ec == std::errc() && end == p.data() + p.size() && layer >= 0 && layer < n_layers && (p == "0" || p[0] != '0');
}

}  // namespace

std::vector<std::string> module_patterns(const Model& m) { return module_patterns(m, Plan{}); }

std::vector<std::string> module_patterns(const Model& m, const Plan& framework) {
  std::vector<std::string> out = {"tok_embeddings", "layers", "layers.*", "layers.*.attention_norm",
                                  "layers.*.attention"};
  if (framework.fused_qkv)
    out.push_back("layers.*.attention.wqkv");
  else
    out.insert(out.end(), {"layers.*.attention.wq", "layers.*.attention.wk", "layers.*.attention.wv"});
  out.insert(out.end(), {"layers.*.attention.wo", "layers.*.ffn_norm", "layers.*.feed_forward",
                         "layers.*.feed_forward.w1", "layers.*.feed_forward.w2"});
  if (m.mlp == Mlp::swiglu) out.push_back("layers.*.feed_forward.w3");
  out.push_back("norm");
  out.push_back(framework.output_fqn);
  return out;
}

bool matches_some_module(const std::string& pattern, const Model& m) { return matches_some_module(pattern, m, Plan{}); }

bool matches_some_module(const std::string& pattern, const Model& m, const Plan& framework) {
  const auto p = split(pattern);
  for (const auto& name : module_patterns(m, framework)) {
    const auto c = split(name);
    if (c.size() != p.size()) continue;
    bool ok = true;
    for (size_t i = 0; i < c.size() && ok; ++i) ok = component_matches(p[i], c[i], m.n_layers);
    if (ok) return true;
  }
  return false;
}

std::vector<std::string> nearest_modules(const std::string& pattern, const Model& m, size_t max) {
  return nearest_modules(pattern, m, Plan{}, max);
}

std::vector<std::string> nearest_modules(const std::string& pattern, const Model& m, const Plan& framework,
                                         size_t max) {
  const std::string last = split(pattern).back();
  std::vector<std::pair<size_t, std::string>> scored;
  for (const auto& name : module_patterns(m, framework)) {
    if (name == "layers" || name == "layers.*") continue;  // containers: never what a typo meant
    const size_t d = std::min(edit_distance(pattern, name), edit_distance(last, split(name).back()));
    // Close: at most a third of the name's letters differ (and at least 1, so that "wqq" finds "wq").
    if (d <= std::max<size_t>(1, std::min(last.size(), split(name).back().size()) / 3)) scored.emplace_back(d, name);
  }
  std::stable_sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (const auto& [d, name] : scored)
    if (out.size() < max && d == scored.front().first) out.push_back(name);
  return out;
}

Plan without_unmatched_modules(Plan plan, const Model& m) {
  const Plan names = plan;  // the framework data (fused_qkv, output_fqn) the entries are matched against
  std::erase_if(plan.modules, [&](const PlanEntry& e) { return !matches_some_module(e.pattern, m, names); });
  return plan;
}

void check_plan_modules(const Plan& plan, const Model& m) {
  if (plan.source.starts_with("preset:")) return;
  for (const PlanEntry& e : plan.modules) {
    if (matches_some_module(e.pattern, m, plan)) continue;
    const std::string where = e.line > 0 ? fmt::format("{}:{}", plan.source, e.line) : plan.source;
    std::string hint;
    Model swiglu = m;
    swiglu.mlp = Mlp::swiglu;
    const auto near = nearest_modules(e.pattern, m, plan);
    Plan other;  // the other framework's names
    apply_framework(other, plan.fused_qkv ? Framework::dtensor : Framework::torchtitan_0_3);
    if (m.mlp == Mlp::gelu && matches_some_module(e.pattern, swiglu, plan))
      hint = "this model's MLP is gelu (feed_forward has w1 and w2 only); remove the entry";
    else if (matches_some_module(e.pattern, m, other))
      hint = plan.fused_qkv ? "the plan is framework: torchtitan-0.3, whose model has one fused attention.wqkv and "
                              "lm_head (not wq, wk, wv and output)"
                            : "attention.wqkv and lm_head are torchtitan 0.3's names; state framework: "
                              "torchtitan-0.3, or name the DTensor model's attention.wq, wk, wv and output";
    else if (!near.empty())
      hint = fmt::format("did you mean {}?", fmt::join(near, " or "));
    else
      hint = fmt::format("the model's modules are {} (`*` or a layer index below {} for the block)",
                         fmt::join(module_patterns(m, plan), ", "), m.n_layers);
    throw Error(fmt::format("{}: modules.{}: matches no module of the model; {}", where, e.pattern, hint));
  }
}

}  // namespace tptune
