#include "plans/util/version.h"

#include <fmt/format.h>

#include "plans/util/error.h"

namespace tptune {

std::string version_line(std::string_view tool) { return fmt::format("{} {} (git {})", tool, version(), git_hash()); }

nlohmann::json version_stamp() { return {{"version", std::string(version())}, {"git_hash", std::string(git_hash())}}; }

void stamp_version(nlohmann::json& doc) {
  if (!doc.is_object())
    throw Error(fmt::format("version stamp: expected a JSON object to stamp, got a {}", doc.type_name()));
  doc[kVersionStampKey] = version_stamp();
}

nlohmann::json with_version_stamp(nlohmann::json doc) {
  stamp_version(doc);
  return doc;
}

nlohmann::json json_header(std::string_view format, int format_version) {
  return {{"format", std::string(format)}, {"version", format_version}};
}

}  // namespace tptune
