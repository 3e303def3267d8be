// plans/util/version.h: the --version line and the version stamp every JSON output carries.
#include "plans/util/version.h"

#include <catch2/catch.hpp>
#include <regex>
#include <string>

#include "plans/util/error.h"

using namespace tptune;

TEST_CASE("version_line: TOOL X.Y.Z (git HASH)") {
  const std::string line = version_line("tp-plan");
  CHECK(std::regex_match(line, std::regex(R"(tp-plan [0-9]+\.[0-9]+\.[0-9]+ \(git ([0-9a-f]{4,40}|unknown)\))")));
  CHECK(line == "tp-plan " + std::string(version()) + " (git " + std::string(git_hash()) + ")");
}

TEST_CASE("stamp_version adds {version, git_hash} under \"tptune\" and changes nothing else") {
  nlohmann::json doc = {{"format", "x"}, {"version", 1}, {"tptune", "an older stamp"}};
  stamp_version(doc);
  CHECK(doc.size() == 3);
  CHECK(doc["format"] == "x");
  CHECK(doc["version"] == 1);  // the document's own version key is not the stamp's
  CHECK(doc[kVersionStampKey] ==
        nlohmann::json{{"version", std::string(version())}, {"git_hash", std::string(git_hash())}});
  CHECK(with_version_stamp(nlohmann::json::object()) == nlohmann::json{{"tptune", version_stamp()}});
  nlohmann::json list = nlohmann::json::array();
  CHECK_THROWS_AS(stamp_version(list), Error);
}

TEST_CASE("json_header: the {format, version} every JSON file format opens with, the stamp beside it") {
  const nlohmann::json header = json_header("tptune-profile", 1);
  CHECK(header == nlohmann::json{{"format", "tptune-profile"}, {"version", 1}});
  CHECK(with_version_stamp(header).size() == 3);  // format, version and the build's stamp: three keys, none shared
}
