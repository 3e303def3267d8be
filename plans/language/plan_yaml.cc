// Plan YAML I/O: load_plan / load_plan_string check every key; plan_to_yaml writes the canonical form.
//
// Which keys each style takes follows the constructors of torch.distributed.tensor.parallel:
//   colwise, rowwise        input_layouts, output_layouts, use_local_output
//   sequence_parallel       use_local_output           (the sequence dim is the model's, 1)
//   prepare_module_input    input_layouts, desired_input_layouts (both required), use_local_output
//   no_parallel             nothing
// The desired input of colwise (R) and rowwise (S(-1); R for an Embedding) is fixed by the style, so it is not a key.
// A layout is a placement (parse_placement), or a list whose first entry is the placement of the module's first
// input and whose other entries are None (torchtitan writes `input_layouts=(Shard(1), None)` for attention, whose
// second input, freqs_cis, is not a DTensor).

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "plans/language/backends/spmd_backend.h"
#include "plans/language/plan.h"
#include "plans/util/error.h"
#include "plans/util/output_file.h"
#include "plans/util/yaml_util.h"

namespace tptune {

namespace {

// The plan keys that carry a value of the Plan (a file that states one overrides the config's; Plan::stated records
// which). The top level also allows `family`, `spmd_backend` and `modules`.
constexpr std::string_view kPlanValueKeys[] = {"tp_degree",
                                               "dp_shard",
                                               "dp_replicate",
                                               "cp_degree",
                                               "cp_rotate_method",
                                               "cp_load_balance",
                                               "ep_degree",
                                               "pp_degree",
                                               "pp_schedule",
                                               "pp_microbatch_size",
                                               "pp_stages_per_rank",
                                               "pp_first_stage_less_layers",
                                               "pp_last_stage_less_layers",
                                               "pp_split",
                                               "float8",
                                               "async_tp",
                                               "loss_parallel",
                                               "activation_checkpointing",
                                               "ac_layers",
                                               "local_batch_size",
                                               "gradient_accumulation_steps",
                                               "seq_len",
                                               "framework",
                                               "loss_chunks"};

using yaml::YamlDoc;

const std::vector<std::string>& style_names() {
  static const std::vector<std::string> names = {"colwise", "rowwise", "sequence_parallel", "prepare_module_input",
                                                 "no_parallel"};
  return names;
}

StyleKind parse_style_kind(const std::string& s) {
  for (auto k : {StyleKind::colwise, StyleKind::rowwise, StyleKind::sequence_parallel, StyleKind::prepare_module_input,
                 StyleKind::no_parallel})
    if (to_string(k) == s) return k;
  return StyleKind::no_parallel;  // unreachable: callers check the name with YamlDoc::choice
}

// The keys (besides `style`) a style takes.
std::vector<std::string_view> style_keys(StyleKind k) {
  switch (k) {
    case StyleKind::colwise:
    case StyleKind::rowwise:
      return {"input_layouts", "output_layouts", "use_local_output"};
    case StyleKind::sequence_parallel:
      return {"use_local_output"};
    case StyleKind::prepare_module_input:
      return {"input_layouts", "desired_input_layouts", "use_local_output"};
    case StyleKind::no_parallel:
      return {};
  }
  return {};
}

bool is_none(const YAML::Node& n) { return n.IsNull() || (n.IsScalar() && n.Scalar() == "None"); }

Placement read_layout(const YamlDoc& doc, const YAML::Node& n, const std::string& key) {
  constexpr const char* expected = "a layout (R, S(d), P) or a list [layout, None, ...]";
  if (yaml::is_scalar(n)) return parse_placement(n.Scalar(), doc.where(n, key));
  if (!n.IsSequence() || n.size() == 0 || !yaml::is_scalar(n[0]) || is_none(n[0])) doc.fail(n, key, expected);
  for (size_t i = 1; i < n.size(); ++i)
    if (!is_none(n[i]))
      doc.fail_msg(n[i], key,
                   fmt::format("expected None for input {} (only the first input of a module has a layout), got {}", i,
                               yaml::describe(n[i])));
  return parse_placement(n[0].Scalar(), doc.where(n[0], key));
}

// A module pattern: dot-separated names, each a word ([A-Za-z0-9_]+) or `*` (one whole component).
bool valid_pattern(const std::string& p) {
  if (p.empty()) return false;
  size_t start = 0;
  while (start <= p.size()) {
    size_t dot = p.find('.', start);
    if (dot == std::string::npos) dot = p.size();
    const std::string_view c(p.data() + start, dot - start);
    if (c.empty()) return false;
    if (c != "*")
      for (char ch : c)
        if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_')) return false;
    start = dot + 1;
  }
  return true;
}

ParallelStyle read_style(const YamlDoc& doc, const YAML::Node& n, const std::string& key) {
  if (yaml::is_scalar(n)) {  // bare style name
    const StyleKind k = parse_style_kind(doc.choice(n, key + ".style", style_names()));
    if (k == StyleKind::prepare_module_input)
      doc.fail_msg(n, key, "prepare_module_input needs input_layouts and desired_input_layouts; write it as a map");
    return ParallelStyle::defaults(k);
  }
  if (!n.IsMap()) doc.fail(n, key, "a style name or a map {style: ..., <layouts>}");
  doc.check_map(n, key, {"style", "input_layouts", "desired_input_layouts", "output_layouts", "use_local_output"});
  if (!n["style"].IsDefined())
    doc.fail_msg(n, key + ".style", fmt::format("missing; expected one of {}", fmt::join(style_names(), ", ")));
  const StyleKind kind = parse_style_kind(doc.choice(n["style"], key + ".style", style_names()));
  const auto takes = style_keys(kind);
  for (auto it = n.begin(); it != n.end(); ++it) {
    const std::string k = it->first.Scalar();
    if (k == "style" || std::find(takes.begin(), takes.end(), k) != takes.end()) continue;
    doc.fail_msg(it->first, key + "." + k,
                 takes.empty()
                     ? fmt::format("{} takes no layouts or options", to_string(kind))
                     : fmt::format("{} does not take {}; it takes {}", to_string(kind), k, fmt::join(takes, ", ")));
  }

  ParallelStyle s = ParallelStyle::defaults(kind);
  if (kind == StyleKind::prepare_module_input) {
    for (const char* k : {"input_layouts", "desired_input_layouts"})
      if (!n[k].IsDefined()) doc.fail_msg(n, key + "." + k, "missing; prepare_module_input needs both layouts");
    s = ParallelStyle::prepare_module_input(Placement::R(), Placement::R());  // both read below
  }
  // colwise and rowwise redistribute the declared input to the layout they compute on, which the style fixes; only
  // prepare_module_input has a desired layout of its own.
  if (n["input_layouts"].IsDefined()) s.input_layout = read_layout(doc, n["input_layouts"], key + ".input_layouts");
  if (n["desired_input_layouts"].IsDefined())
    s.desired_input_layout = read_layout(doc, n["desired_input_layouts"], key + ".desired_input_layouts");
  if (n["output_layouts"].IsDefined()) s.output_layout = read_layout(doc, n["output_layouts"], key + ".output_layouts");
  if (n["use_local_output"].IsDefined())
    s.use_local_output = doc.boolean(n["use_local_output"], key + ".use_local_output");
  return s;
}

Plan load(const std::string& text, const std::string& name) {
  const YamlDoc doc(name);
  const YAML::Node root = yaml::parse(text, name);
  if (!root.IsDefined() || !root.IsMap())
    throw Error(fmt::format("{}: expected a plan (a map with tp_degree, ..., modules), got {}", doc.at(root),
                            yaml::describe(root)));
  std::vector<std::string_view> allowed{"family"};
  allowed.insert(allowed.end(), std::begin(kPlanValueKeys), std::end(kPlanValueKeys));
  allowed.insert(allowed.end(), {"spmd_backend", "modules"});
  doc.check_map(root, "", allowed);
  if (root["spmd_backend"].IsDefined()) read_spmd_backend(doc, root["spmd_backend"], "spmd_backend");
  Plan p;
  p.source = name;
  auto small_positive = [&](const char* k) { return static_cast<int>(doc.integer_in(root[k], k, limits::degree)); };
  if (root["family"].IsDefined()) p.family = doc.string(root["family"], "family");
  if (root["tp_degree"].IsDefined()) p.tp_degree = small_positive("tp_degree");
  if (root["dp_shard"].IsDefined()) p.dp_shard = small_positive("dp_shard");
  if (root["dp_replicate"].IsDefined()) p.dp_replicate = small_positive("dp_replicate");
  if (root["cp_degree"].IsDefined()) p.cp_degree = small_positive("cp_degree");
  if (root["cp_rotate_method"].IsDefined())
    p.cp_rotate = parse_cp_rotate(doc.choice(root["cp_rotate_method"], "cp_rotate_method", {"allgather", "alltoall"}),
                                  doc.where(root["cp_rotate_method"], "cp_rotate_method"));
  if (root["cp_load_balance"].IsDefined()) p.cp_load_balance = doc.boolean(root["cp_load_balance"], "cp_load_balance");
  if (root["ep_degree"].IsDefined()) p.ep_degree = small_positive("ep_degree");
  if (root["pp_degree"].IsDefined()) p.pp_degree = small_positive("pp_degree");
  if (root["pp_schedule"].IsDefined())
    p.pp_schedule = parse_pipeline_schedule(doc.string(root["pp_schedule"], "pp_schedule"),
                                            doc.where(root["pp_schedule"], "pp_schedule"));
  if (root["pp_microbatch_size"].IsDefined())
    p.pp_microbatch_size = doc.integer_in(root["pp_microbatch_size"], "pp_microbatch_size", limits::local_batch_size);
  auto layer_count = [&](const char* k, limits::IntRange r) { return static_cast<int>(doc.integer_in(root[k], k, r)); };
  if (root["pp_stages_per_rank"].IsDefined())
    p.pp_stages_per_rank = layer_count("pp_stages_per_rank", limits::n_layers);
  if (root["pp_first_stage_less_layers"].IsDefined())
    p.pp_first_stage_less_layers = layer_count("pp_first_stage_less_layers", {0, limits::n_layers.hi});
  if (root["pp_last_stage_less_layers"].IsDefined())
    p.pp_last_stage_less_layers = layer_count("pp_last_stage_less_layers", {0, limits::n_layers.hi});
  if (root["pp_split"].IsDefined())
    p.pp_split = doc.list(root["pp_split"], "pp_split", [&](const YAML::Node& n, const std::string& k) {
      return static_cast<int>(doc.integer_in(n, k, {0, limits::n_layers.hi}));
    });
  if (root["float8"].IsDefined())
    p.float8 =
        parse_float8(doc.choice(root["float8"], "float8", {"none", "tensorwise", "rowwise", "rowwise_with_gw_hp"}),
                     doc.where(root["float8"], "float8"));
  if (root["async_tp"].IsDefined()) p.async_tp = doc.boolean(root["async_tp"], "async_tp");
  if (root["loss_parallel"].IsDefined()) p.loss_parallel = doc.boolean(root["loss_parallel"], "loss_parallel");
  if (root["activation_checkpointing"].IsDefined())
    p.activation_checkpointing = parse_activation_checkpointing(
        doc.choice(root["activation_checkpointing"], "activation_checkpointing", {"none", "selective", "full"}),
        doc.where(root["activation_checkpointing"], "activation_checkpointing"));
  // The model's n_layers bounds it too; lower() checks that (and the policy), naming this line through provenance.
  if (root["ac_layers"].IsDefined()) p.ac_layers = doc.integer_in(root["ac_layers"], "ac_layers", limits::n_layers);
  if (root["local_batch_size"].IsDefined())
    p.local_batch_size = doc.integer_in(root["local_batch_size"], "local_batch_size", limits::local_batch_size);
  if (root["gradient_accumulation_steps"].IsDefined())
    p.gradient_accumulation_steps = doc.integer_in(root["gradient_accumulation_steps"], "gradient_accumulation_steps",
                                                   limits::gradient_accumulation_steps);
  if (root["seq_len"].IsDefined()) p.seq_len = doc.integer_in(root["seq_len"], "seq_len", limits::seq_len);
  Framework framework = Framework::dtensor;
  if (root["framework"].IsDefined())
    framework = parse_framework(doc.choice(root["framework"], "framework", {"dtensor", "torchtitan-0.3"}),
                                doc.where(root["framework"], "framework"));
  if (root["loss_chunks"].IsDefined()) {
    const int64_t c = doc.positive_integer(root["loss_chunks"], "loss_chunks");
    if (c > 4096) doc.fail(root["loss_chunks"], "loss_chunks", "a positive integer up to 4096");
    p.loss_chunks = static_cast<int>(c);
  }
  if (framework == Framework::torchtitan_0_3 && root["loss_parallel"].IsDefined() && !p.loss_parallel)
    doc.fail_msg(root["loss_parallel"], "loss_parallel",
                 "torchtitan 0.3 always runs the vocab-parallel loss under TP: expected true or no key");
  apply_framework(p, framework);
  // What the file states, with its line, so that tools take every other value from the config (and say so).
  for (std::string_view key : kPlanValueKeys) {
    const std::string k(key);
    if (root[k].IsDefined()) {
      p.stated.insert(k);
      p.provenance[k] = fmt::format("plan {}:{}", name, root[k].Mark().line + 1);
    }
  }
  check_parallel_keys(p);  // pp keys without pp_degree > 1, cp keys without cp_degree > 1 (plan.h)

  const YAML::Node modules = root["modules"];
  if (!modules.IsDefined() || modules.IsNull()) return p;  // no entries: nothing is parallelized
  doc.require_map(modules, "modules");
  std::vector<std::string> seen;
  for (auto it = modules.begin(); it != modules.end(); ++it) {
    const YAML::Node k = it->first;
    if (!yaml::is_scalar(k) || !valid_pattern(k.Scalar()))
      doc.fail(k, "modules", "a module FQN pattern (dot-separated names; '*' stands for one whole name)");
    PlanEntry e;
    e.pattern = k.Scalar();
    const std::string key = "modules." + e.pattern;
    if (std::find(seen.begin(), seen.end(), e.pattern) != seen.end()) doc.fail_msg(k, key, "duplicate pattern");
    seen.push_back(e.pattern);
    e.line = k.Mark().line + 1;
    e.style = read_style(doc, it->second, key);
    p.modules.push_back(std::move(e));
  }
  return p;
}

bool is_yaml_keyword(const std::string& s) {
  for (const char* w : {"true", "false", "yes", "no", "on", "off", "null", "none", "y", "n"}) {
    if (s.size() != std::char_traits<char>::length(w)) continue;
    bool eq = true;
    for (size_t i = 0; i < s.size(); ++i) eq = eq && std::tolower(static_cast<unsigned char>(s[i])) == w[i];
    if (eq) return true;
  }
  return false;
}

// A scalar as YAML: plain when it is a simple word that YAML reads back as the same string, else double-quoted.
std::string scalar(const std::string& s) {
  bool plain = !s.empty() && (std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_') && !is_yaml_keyword(s);
  for (char c : s)
    plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '*' || c == '-');
  if (plain) return s;
  std::string q = "\"";
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {  // control characters as YAML escapes, so that the text reads back the same
      q += fmt::format("\\x{:02x}", u);
      continue;
    }
    if (c == '"' || c == '\\') q += '\\';
    q += c;
  }
  return q + '"';
}

std::string style_yaml(const ParallelStyle& s) {
  std::vector<std::string> parts = {fmt::format("style: {}", to_string(s.kind))};
  for (auto k : style_keys(s.kind)) {
    if (k == "input_layouts") parts.push_back(fmt::format("input_layouts: {}", to_string(s.input_layout)));
    if (k == "desired_input_layouts")
      parts.push_back(fmt::format("desired_input_layouts: {}", to_string(s.desired_input_layout)));
    if (k == "output_layouts") parts.push_back(fmt::format("output_layouts: {}", to_string(s.output_layout)));
    if (k == "use_local_output") parts.push_back(fmt::format("use_local_output: {}", s.use_local_output));
  }
  return fmt::format("{{{}}}", fmt::join(parts, ", "));
}

}  // namespace

Plan load_plan(const std::string& path) { return load(yaml::read_file(path, "plan"), path); }

Plan load_plan_string(const std::string& yaml, const std::string& name) { return load(yaml, name); }

std::string plan_to_yaml(const Plan& plan) {
  std::string out;
  out += "# tptune TP plan (canonical form, see plans/plan.h). Styles: colwise, rowwise, sequence_parallel,\n";
  out += "# prepare_module_input, no_parallel. Layouts: R, S(d), P. `*` in a pattern matches one name; the last\n";
  out += "# matching pattern wins.\n";
  out += fmt::format("family: {}\n", scalar(plan.family));
  if (plan.framework != Framework::dtensor) out += fmt::format("framework: {}\n", to_string(plan.framework));
  if (plan.framework != Framework::dtensor || plan.chunks() > 1) out += fmt::format("loss_chunks: {}\n", plan.chunks());
  out += fmt::format("tp_degree: {}\n", plan.tp_degree);
  out += fmt::format("dp_shard: {}\n", plan.dp_shard);
  // Only HSDP plans carry the key, so that every plan written before it existed reads and writes the same.
  if (plan.dp_replicate != 1) out += fmt::format("dp_replicate: {}\n", plan.dp_replicate);
  // Likewise only CP plans carry the cp keys (all three, so that the file states how its ring runs).
  if (plan.cp_degree != 1) {
    out += fmt::format("cp_degree: {}\n", plan.cp_degree);
    out += fmt::format("cp_rotate_method: {}\n", to_string(plan.cp_rotate));
    out += fmt::format("cp_load_balance: {}\n", plan.cp_load_balance);
  }
  // Likewise only EP plans carry ep_degree.
  if (plan.ep_degree != 1) out += fmt::format("ep_degree: {}\n", plan.ep_degree);
  // Likewise only PP plans carry the pp keys (pp_split only when explicit).
  if (plan.pp_degree != 1) {
    out += fmt::format("pp_degree: {}\n", plan.pp_degree);
    out += fmt::format("pp_schedule: {}\n", scalar(std::string(to_string(plan.pp_schedule))));
    out += fmt::format("pp_microbatch_size: {}\n", plan.pp_microbatch_size);
    if (plan.pp_stages_per_rank > 0) out += fmt::format("pp_stages_per_rank: {}\n", plan.pp_stages_per_rank);
    out += fmt::format("pp_first_stage_less_layers: {}\n", plan.pp_first_stage_less_layers);
    out += fmt::format("pp_last_stage_less_layers: {}\n", plan.pp_last_stage_less_layers);
    if (!plan.pp_split.empty()) out += fmt::format("pp_split: [{}]\n", fmt::join(plan.pp_split, ", "));
  }
  out += fmt::format("float8: {}\n", to_string(plan.float8));
  out += fmt::format("async_tp: {}\n", plan.async_tp);
  out += fmt::format("loss_parallel: {}\n", plan.loss_parallel);
  out += fmt::format("activation_checkpointing: {}\n", to_string(plan.activation_checkpointing));
  // Only plans that checkpoint part of the blocks carry the key, so that every plan written before it existed reads and
  // writes the same.
  if (plan.ac_layers > 0) out += fmt::format("ac_layers: {}\n", plan.ac_layers);
  out += fmt::format("local_batch_size: {}\n", plan.local_batch_size);
  // Only plans that accumulate carry the key, so that every plan written before it existed reads and writes the same.
  if (plan.gradient_accumulation_steps != 1)
    out += fmt::format("gradient_accumulation_steps: {}\n", plan.gradient_accumulation_steps);
  // Only plans chosen for a sequence length (search.seq_lens) carry the key; the others run at the config's.
  if (plan.seq_len > 0) out += fmt::format("seq_len: {}\n", plan.seq_len);
  if (plan.modules.empty()) return out + "modules: {}\n";
  out += "modules:\n";
  for (const auto& e : plan.modules) out += fmt::format("  {}: {}\n", scalar(e.pattern), style_yaml(e.style));
  return out;
}

void save_plan(const Plan& plan, const std::string& path) { write_output("", path, plan_to_yaml(plan)); }

}  // namespace tptune
