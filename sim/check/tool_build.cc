// Which tptune wrote a check baseline (sim/check/tool_build.h).
#include "sim/check/tool_build.h"

#include <fmt/format.h>

#include "plans/util/json_text.h"
#include "plans/util/version.h"

namespace tptune {

std::string ToolBuild::describe() const { return fmt::format("tptune {} (git {})", version, git_hash); }

ToolBuild this_build() { return {std::string(version()), std::string(git_hash())}; }

std::optional<ToolBuild> read_build_stamp(const nlohmann::json& doc, const std::string& where) {
  if (!doc.is_object()) return std::nullopt;
  auto it = doc.find(kVersionStampKey);
  if (it == doc.end()) return std::nullopt;
  const std::string key = kVersionStampKey;
  if (!it->is_object()) JsonDoc(where).fail(key, "an object {\"version\": ..., \"git_hash\": ...}", *it);
  ToolBuild b;
  for (auto [name, field] : {std::pair{"version", &b.version}, std::pair{"git_hash", &b.git_hash}}) {
    auto v = it->find(name);
    if (v == it->end()) JsonDoc(where).fail(key + "." + name, "missing (expected a string)");
    if (!v->is_string()) JsonDoc(where).fail(key + "." + name, "a string", *v);
    *field = v->get<std::string>();
  }
  return b;
}

nlohmann::json to_json(const ToolBuild& b) { return {{"version", b.version}, {"git_hash", b.git_hash}}; }

}  // namespace tptune
