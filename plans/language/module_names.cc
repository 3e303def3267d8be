#include "plans/language/module_names.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "plans/util/error.h"

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
  if (m.mla.kv_lora_rank > 0) {  // latent attention (plans/lower/mla.cc): torchtitan's DeepSeek-V3 Attention
    // (wq names the up-projections' default style even with wq_a/wq_b: plans/lower/mla.cc)
    out.push_back("layers.*.attention.wq");
    if (m.mla.q_lora_rank > 0)
      out.insert(out.end(), {"layers.*.attention.wq_a", "layers.*.attention.q_norm", "layers.*.attention.wq_b"});
    out.insert(out.end(), {"layers.*.attention.wkv_a", "layers.*.attention.kv_norm", "layers.*.attention.wkv_b"});
  } else if (framework.fused_qkv)
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

namespace {

// Whether `pattern` can select some layers and not others: its block component (`layers.<i>`) is not `*`.
bool selects_layer_index(std::string_view pattern) {
  const size_t dot = pattern.find('.');
  if (dot == std::string_view::npos) return false;
  const std::string_view first = pattern.substr(0, dot), rest = pattern.substr(dot + 1);
  return (first == "layers" || first == "*") && rest.substr(0, rest.find('.')) != "*";
}

// The index of the entry that decides the style of `fqn` (the last that matches), -1 when none does.
int deciding_entry(const Plan& plan, const std::string& fqn) {
  for (size_t i = plan.modules.size(); i-- > 0;)
    if (fqn_matches(plan.modules[i].pattern, fqn)) return static_cast<int>(i);
  return -1;
}

std::string style_text(const Plan& plan, int entry) {
  return entry < 0 ? std::string("not parallelized (no entry)") : to_string(plan.modules[size_t(entry)].style);
}

}  // namespace

void check_uniform_layers(const Plan& plan, const Model& m) {
  // Entries whose block component is `*` select every layer alike: nothing to compare (the search's plans).
  if (std::none_of(plan.modules.begin(), plan.modules.end(),
                   [](const PlanEntry& e) { return selects_layer_index(e.pattern); }))
    return;
  for (const std::string& name : module_patterns(m)) {
    if (!name.starts_with("layers.*")) continue;
    const std::string rel = name.size() > 8 ? name.substr(9) : "";  // "attention.wq"; "" for the block itself
    auto fqn = [&](int64_t layer) { return fmt::format("layers.{}{}{}", layer, rel.empty() ? "" : ".", rel); };
    const int first = deciding_entry(plan, fqn(0));
    const ParallelStyle* style0 = first < 0 ? nullptr : &plan.modules[size_t(first)].style;
    for (int64_t layer = 1; layer < m.n_layers; ++layer) {
      const int here = deciding_entry(plan, fqn(layer));
      const ParallelStyle* style = here < 0 ? nullptr : &plan.modules[size_t(here)].style;
      if (style == style0 || (style && style0 && *style == *style0)) continue;
      // The entry to blame: the one deciding this layer unless it also matches layer 0 (then layer 0's is the odd
      // one: it matches layer 0 and not this layer).
      const int blame = here >= 0 && !fqn_matches(plan.modules[size_t(here)].pattern, fqn(0)) ? here : first;
      const PlanEntry& e = plan.modules[size_t(blame)];
      const std::string where = e.line > 0 ? fmt::format("{}:{}", plan.source, e.line) : plan.source;
      const std::string what = rel.empty() ? "block" : rel;
      throw Error(
          fmt::format("{}: modules.{}: plans that style some layers differently are not supported: the "
                      "Program repeats one block (layer {}'s {} is {}, layer 0's {})",
                      where, e.pattern, layer, what, style_text(plan, here), style_text(plan, first)));
    }
  }
}

}  // namespace tptune
