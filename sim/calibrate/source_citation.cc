#include "sim/calibrate/source_citation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <string_view>
#include <vector>

#include "plans/util/yaml_folder.h"
#include "plans/util/yaml_util.h"

namespace tptune {

namespace {

bool has(const YAML::Node& map, const char* key) { return map[key].IsDefined(); }

}  // namespace

void read_source_citation(const yaml::YamlDoc& doc, const YAML::Node& root, SourceCitation& s,
                          std::initializer_list<std::pair<const char*, std::string*>> extra, const char* no_place) {
  s.file = doc.file();
  if (!has(root, "source")) doc.fail_msg(root, "source", "missing; expected the citation map (id, citation, ...)");
  const YAML::Node src = root["source"];
  std::vector<std::pair<const char*, std::string*>> optional = {
      {"repository", &s.repository}, {"path", &s.path}, {"commit", &s.commit}, {"paper", &s.paper}};
  optional.insert(optional.end(), extra.begin(), extra.end());
  optional.emplace_back("measurement", &s.measurement);
  std::vector<std::string_view> keys = {"id", "citation"};
  for (const auto& [k, field] : optional) keys.emplace_back(k);
  doc.check_map(src, "source", keys);
  for (const char* k : {"id", "citation"})
    if (!has(src, k)) doc.fail_msg(src, yaml::join_key("source", k), "missing; expected a string");
  s.id = doc.string(src["id"], "source.id");
  s.citation = doc.string(src["citation"], "source.citation");
  for (const auto& [k, field] : optional)
    if (has(src, k)) *field = doc.string(src[k], yaml::join_key("source", k));
  if (s.repository.empty() && s.paper.empty()) doc.fail_msg(src, "source", no_place);
  if (!s.repository.empty()) {
    for (const char* k : {"path", "commit"})
      if (!has(src, k))
        doc.fail_msg(src, yaml::join_key("source", k), "missing; a repository source names the file and commit");
    if (s.commit.size() != 40 || !std::all_of(s.commit.begin(), s.commit.end(),
                                              [](char ch) { return std::isxdigit(static_cast<unsigned char>(ch)); }))
      doc.fail(src["commit"], "source.commit", "a commit hash of 40 hex digits");
  }
}

void read_record_list(const yaml::YamlDoc& doc, const YAML::Node& root, const char* key, const char* item,
                      const std::function<std::string(const YAML::Node& node, const std::string& key)>& read) {
  if (!has(root, key)) doc.fail_msg(root, key, fmt::format("missing; expected a list of {}", key));
  const YAML::Node list = root[key];
  if (!list.IsSequence() || list.size() == 0) doc.fail(list, key, fmt::format("a non-empty list of {}", key));
  std::map<std::string, std::string> ids;  // item id -> its key
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string k = fmt::format("{}[{}]", key, i);
    const std::string id = read(list[i], k);
    if (auto [it, fresh] = ids.emplace(id, k); !fresh)
      doc.fail_msg(list[i]["id"], k + ".id",
                   fmt::format("'{}' is also {}'s id; {} ids are unique in a file", yaml::shown(id), it->second, item));
  }
}

void read_record_folder(const std::string& dir, std::string_view folder, std::string_view holds, const char* record,
                        const std::function<std::string(const std::string& text, const std::string& file)>& read) {
  std::map<std::string, std::string> ids;  // source id -> its file
  for (const std::string& f : yaml_files_of(dir, folder, holds)) {
    const std::string id = read(yaml::read_file(f, record), f);
    if (auto [it, fresh] = ids.emplace(id, f); !fresh) {
      const YAML::Node root = yaml::parse(yaml::read_file(f, record), f);
      const yaml::YamlDoc doc(f);
      doc.fail_msg(root["source"]["id"], "source.id",
                   fmt::format("'{}' is also the id of {}; source ids are unique over the folder", id, it->second));
    }
  }
}

}  // namespace tptune
