#pragma once
// Which tptune wrote a check baseline, and whether it is the build that checks against it now.
//
//   ToolBuild now = this_build();                              {"0.1.0", "1a2b3c4"}: plans/util/version.h
//   std::optional<ToolBuild> by = read_build_stamp(doc, "plan-baseline.json");   nullopt: no "tptune" stamp
//   by && *by == now                                          same version and same git hash: the same predictions
//   now.describe()                                            "tptune 0.1.0 (git 1a2b3c4)"
//
// A baseline is a prediction, and predictions move when tptune's cost model does: `tp-plan check` compares the
// stamp of the baseline with this build so that a change that may come from upgrading tptune is said to be one, not
// shown as a regression of the user's plan (sim/check/compare.h). Two builds are the same when both the version and
// the git hash are equal (builds outside a git checkout have the hash "unknown": two such builds of one version are
// taken as the same). A baseline written before stamps existed has none: it may come from any build.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace tptune {

struct ToolBuild {
  std::string version;   // "0.1.0"
  std::string git_hash;  // "1a2b3c4", or "unknown"
  bool operator==(const ToolBuild&) const = default;
  std::string describe() const;  // "tptune 0.1.0 (git 1a2b3c4)"
};

// The build running now (plans/util/version.h).
ToolBuild this_build();

// The "tptune" stamp of a JSON object the tools wrote: nullopt when `doc` has none. tptune::Error "WHERE: tptune.KEY:
// expected ..." when the stamp is there but is not {"version": string, "git_hash": string}.
std::optional<ToolBuild> read_build_stamp(const nlohmann::json& doc, const std::string& where);

// {"version": ..., "git_hash": ...}: the stamp's form, for a build other than this one.
nlohmann::json to_json(const ToolBuild& b);

}  // namespace tptune
