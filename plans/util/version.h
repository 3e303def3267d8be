#pragma once
// Which tptune this is: the version and the git commit it was built from. `tp-plan --version` and `tp-run --version`
// print it, and every JSON file the tools write carries it (the stamp below), so that a profile, a report or a
// baseline says which build made it.
//
//   version()                 "0.1.0": project(VERSION) of the top CMakeLists.txt
//   git_hash()                "1a2b3c4": the short hash of the commit HEAD pointed at when the build ran ("unknown"
//                             outside a git checkout). Taken at build time, not at configure time: a commit made
//                             after configuring gets its own hash at the next build. Uncommitted changes are not
//                             marked.
//   version_line("tp-plan")   "tp-plan 0.1.0 (git 1a2b3c4)": what --version prints
//   version_stamp()           {"version": "0.1.0", "git_hash": "1a2b3c4"}
//   stamp_version(doc)        doc["tptune"] = version_stamp(), for a JSON object the tools write
//   json_header("tptune-profile", 1)
//                             {"format": "tptune-profile", "version": 1}: what a file is and its schema's version,
//                             the one header every JSON file format of tptune opens with (the profile, the bench
//                             results, the check baseline and the check result), which its reader checks
//
// A JSON file's header is thus stated here once: json_header() where its object is built, the stamp where it is
// written (the build that writes a file is not part of its object: a baseline read and written again keeps the stamp
// it was read with until it is written).
//
// Readers ignore the "tptune" key (files written before it existed read as before), except `tp-plan check`, which
// compares a baseline's stamp with its own build (sim/check/tool_build.h). tptune's own JSON keeps its
// other keys unchanged (the profile's environment also carries "git_hash", as it did before the stamp).
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace tptune {

// The key of the stamp in every JSON object the tools write.
inline constexpr const char* kVersionStampKey = "tptune";

// Defined in the file the build generates (cmake/version_data.cmake).
std::string_view version();
std::string_view git_hash();

std::string version_line(std::string_view tool);
nlohmann::json version_stamp();

// Adds the stamp to `doc` (replacing an older one); tptune::Error when `doc` is not a JSON object.
void stamp_version(nlohmann::json& doc);
// The same on a copy, for `json_dump(with_version_stamp(j), 2)` at an output.
nlohmann::json with_version_stamp(nlohmann::json doc);

// {"format": format, "version": format_version}: the header of a JSON file format (above); the file's other members
// are added to it.
nlohmann::json json_header(std::string_view format, int format_version);

}  // namespace tptune
