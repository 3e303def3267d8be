#include "sim/calibrate/published_record.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "plans/language/config_node.h"
#include "plans/language/plan.h"
#include "plans/util/error.h"
#include "plans/util/limits.h"
#include "plans/util/yaml_folder.h"
#include "plans/util/yaml_util.h"

namespace tptune {

std::string PublishedPlan::summary() const {
  std::string s = fmt::format("tp {} {}", tp, float8 == Float8Recipe::none ? "bf16" : std::string(to_string(float8)));
  if (async_tp) s += " async";
  if (ac_layers > 0) s += fmt::format(" ac_layers {}", ac_layers);
  if (cp > 1) s += fmt::format(" cp {}", cp);
  if (pp > 1) s += fmt::format(" pp {} {} mb {}", pp, to_string(pp_schedule), pp_microbatch_size);
  if (ep > 1) s += fmt::format(" ep {}", ep);
  if (preset != "sequence_parallel") s += " " + preset;
  return s;
}

const PublishedRun* PublishedSource::run(const std::string& id) const {
  for (const auto& r : runs)
    if (r.id == id) return &r;
  return nullptr;
}

namespace {

using yaml::YamlDoc;

bool has(const YAML::Node& map, const char* key) { return map[key].IsDefined(); }

// The key node of `key` in `map` (its mark is the key's line), or `fallback`.
YAML::Node key_node(const YAML::Node& map, std::string_view key, const YAML::Node& fallback) {
  for (auto it = map.begin(); it != map.end(); ++it)
    if (it->first.IsScalar() && it->first.Scalar() == key) return it->first;
  return fallback;
}

// The config reader's error "<file>:<line>: training.seq_len: ..." as "<file>:<line>: runs[3].config.training.seq_len:
// ...": the key a user finds in this file. A message that does not start with the file's name is prefixed whole.
std::string prefixed_config_error(const std::string& message, const std::string& file, const std::string& run_at,
                                  const std::string& prefix) {
  if (message.starts_with(file + ":")) {
    size_t pos = file.size() + 1;
    while (pos < message.size() && message[pos] >= '0' && message[pos] <= '9') ++pos;
    if (message.compare(pos, 1, ":") == 0) ++pos;
    if (message.compare(pos, 1, " ") == 0) ++pos;
    return message.substr(0, pos) + prefix + "." + message.substr(pos);
  }
  return fmt::format("{}: {}: {}", run_at, prefix, message);
}

PublishedPlan read_plan(const YamlDoc& doc, const YAML::Node& n, const std::string& key, const YAML::Node& self) {
  doc.check_map(
      n, key,
      {"preset", "tp", "float8", "async_tp", "ac_layers", "cp", "pp", "pp_schedule", "pp_microbatch_size", "ep"});
  PublishedPlan p;
  if (!has(n, "tp")) doc.fail_msg(self, key + ".tp", "missing; expected the tensor-parallel degree");
  p.tp = static_cast<int>(doc.integer_in(n["tp"], key + ".tp", limits::degree));
  if (has(n, "preset")) p.preset = doc.choice(n["preset"], key + ".preset", plan_preset_names());
  if (has(n, "float8"))
    p.float8 =
        parse_float8(doc.choice(n["float8"], key + ".float8", {"none", "tensorwise", "rowwise", "rowwise_with_gw_hp"}),
                     doc.where(n["float8"], key + ".float8"));
  if (has(n, "async_tp")) p.async_tp = doc.boolean(n["async_tp"], key + ".async_tp");
  if (has(n, "ac_layers"))
    p.ac_layers = doc.integer_in(n["ac_layers"], key + ".ac_layers", limits::IntRange{0, limits::n_layers.hi});
  if (has(n, "cp")) p.cp = static_cast<int>(doc.integer_in(n["cp"], key + ".cp", limits::degree));
  if (has(n, "pp")) p.pp = static_cast<int>(doc.integer_in(n["pp"], key + ".pp", limits::degree));
  if (has(n, "ep")) p.ep = static_cast<int>(doc.integer_in(n["ep"], key + ".ep", limits::degree));
  if (has(n, "pp_schedule"))
    p.pp_schedule = parse_pipeline_schedule(doc.string(n["pp_schedule"], key + ".pp_schedule"),
                                            doc.where(n["pp_schedule"], key + ".pp_schedule"));
  if (has(n, "pp_microbatch_size"))
    p.pp_microbatch_size =
        doc.integer_in(n["pp_microbatch_size"], key + ".pp_microbatch_size", limits::local_batch_size);
  return p;
}

PublishedMeasured read_measured(const YamlDoc& doc, const YAML::Node& n, const std::string& key,
                                const YAML::Node& self) {
  doc.check_map(n, key, {"tokens_per_second_per_gpu", "peak_memory_gib", "mfu"});
  PublishedMeasured m;
  if (!has(n, "tokens_per_second_per_gpu"))
    doc.fail_msg(self, key + ".tokens_per_second_per_gpu", "missing; expected the measured tokens/s per GPU (> 0)");
  m.tokens_per_second_per_gpu = doc.real_in(n["tokens_per_second_per_gpu"], key + ".tokens_per_second_per_gpu",
                                            limits::RealRange{0, limits::tokens_per_second.hi, /*lo_open=*/true});
  if (has(n, "peak_memory_gib"))
    m.peak_memory_gib = doc.real_in(n["peak_memory_gib"], key + ".peak_memory_gib", limits::RealRange{0, 1e6, true});
  if (has(n, "mfu")) m.mfu = doc.real_in(n["mfu"], key + ".mfu", limits::RealRange{0, 1, true});
  return m;
}

PublishedRun read_run(const YamlDoc& doc, const YAML::Node& n, const std::string& key, const std::string& base_dir) {
  doc.check_map(n, key, {"id", "table", "quote", "config", "plan", "measured", "not_expressible"});
  PublishedRun r;
  r.at = doc.at(n);
  for (const char* k : {"id", "table", "quote"})
    if (!has(n, k)) doc.fail_msg(n, yaml::join_key(key, k), "missing; expected a string");
  r.id = doc.string(n["id"], key + ".id");
  r.table = doc.string(n["table"], key + ".table");
  r.quote = doc.string(n["quote"], key + ".quote");
  const bool any_expressed = has(n, "config") || has(n, "plan") || has(n, "measured");
  if (has(n, "not_expressible")) {
    r.not_expressible = doc.string(n["not_expressible"], key + ".not_expressible");
    if (any_expressed) {
      const char* k = has(n, "config") ? "config" : has(n, "plan") ? "plan" : "measured";
      doc.fail_msg(key_node(n, k, n), yaml::join_key(key, k),
                   "a run has either config + plan + measured or not_expressible, not both");
    }
    return r;
  }
  for (const char* k : {"config", "plan", "measured"})
    if (!has(n, k))
      doc.fail_msg(n, yaml::join_key(key, k),
                   "missing; a run has config + plan + measured, or not_expressible with the reason");
  const std::string ckey = key + ".config";
  const YAML::Node c = n["config"];
  doc.require_map(c, ckey);
  if (!has(c, "model")) doc.fail_msg(key_node(n, "config", n), ckey + ".model", "missing; expected a map");
  if (has(c, "search"))
    doc.fail_msg(key_node(c, "search", c), ckey + ".search", "a measured run has no search space: leave it out");
  try {
    r.config = load_config_node(c, doc.file(), base_dir);
  } catch (const Error& e) {
    throw Error(prefixed_config_error(e.what(), doc.file(), r.at, ckey));
  }
  r.plan = read_plan(doc, n["plan"], key + ".plan", key_node(n, "plan", n));
  r.measured = read_measured(doc, n["measured"], key + ".measured", key_node(n, "measured", n));
  return r;
}

}  // namespace

PublishedSource parse_published_source(const std::string& text, const std::string& name, const std::string& base_dir) {
  const YamlDoc doc(name);
  const YAML::Node root = yaml::parse(text, name);
  doc.check_map(root, "", {"source", "runs", "ratios"});
  PublishedSource s;
  read_source_citation(doc, root, s, {{"table", &s.table}, {"hardware", &s.hardware}, {"software", &s.software}},
                       "expected repository (with path and commit) or paper (with table): where the numbers are");
  read_record_list(doc, root, "runs", "run", [&](const YAML::Node& r, const std::string& key) {
    s.runs.push_back(read_run(doc, r, key, base_dir));
    return s.runs.back().id;
  });

  if (has(root, "ratios")) {
    const YAML::Node ratios = root["ratios"];
    if (!ratios.IsSequence()) doc.fail(ratios, "ratios", "a list of {name, numerator, denominator}");
    for (size_t i = 0; i < ratios.size(); ++i) {
      const std::string key = fmt::format("ratios[{}]", i);
      const YAML::Node q = ratios[i];
      doc.check_map(q, key, {"name", "numerator", "denominator"});
      PublishedRatio ratio;
      for (const char* k : {"name", "numerator", "denominator"})
        if (!has(q, k)) doc.fail_msg(q, yaml::join_key(key, k), "missing; expected a string");
      ratio.name = doc.string(q["name"], key + ".name");
      for (const char* k : {"numerator", "denominator"}) {
        const std::string id = doc.string(q[k], yaml::join_key(key, k));
        const PublishedRun* r = s.run(id);
        if (r == nullptr)
          doc.fail_msg(q[k], yaml::join_key(key, k), fmt::format("'{}' is no run of this file", yaml::shown(id)));
        if (!r->expressible())
          doc.fail_msg(
              q[k], yaml::join_key(key, k),
              fmt::format("'{}' is not expressible ({}): a ratio compares predicted runs", id, r->not_expressible));
        (k[0] == 'n' ? ratio.numerator : ratio.denominator) = id;
      }
      s.ratios.push_back(std::move(ratio));
    }
  }
  return s;
}

std::vector<PublishedSource> load_published_record(const std::string& dir) {
  std::vector<PublishedSource> out;
  read_record_folder(dir, "the public record's folder of *.yaml files", "the public record, one file per source",
                     "published record", [&](const std::string& text, const std::string& f) {
                       out.push_back(parse_published_source(text, f, std::filesystem::path(f).parent_path().string()));
                       return out.back().id;
                     });
  return out;
}

}  // namespace tptune
