#pragma once
// Predicted next to measured: one Chrome / Perfetto trace holding the simulated step (process 0, the tracks of
// chrome_trace(), sim/report/trace.h) and a measured Profile (process 1, `tp-run profile --out`, the "tptune-profile"
// JSON of plans/program/profile_format.h, which reads it) on one time axis from 0.
//
// The profile was measured in serialized mode (each op after the previous one, no overlap), so its track lays the
// ops end to end by their median time, in the profile's execution order. Both processes name an op the same way
// (expand()'s full FQN, "layers.3.attention.wq.fwd"), so Perfetto's search finds both; each measured event carries
// `predicted_us` (the simulated duration of the op of the same name and occurrence) and `ratio` measured/predicted,
// and each simulated event `measured_us`, so that the ops where the model is wrong stand out.
//
//   tp-plan simulate CONFIG --plan best.yaml --trace both.json --measured profile.json
//
// Errors (tptune::Error, one line): the file is not JSON ("<file>:<line>: invalid JSON"), not a tptune profile,
// a measured record lacks name or time_us.median ("<file>: ops[i].time_us.median: missing"), the profile is of
// another model, training or plan (check_same_program(), plans/program/program_identity.h: "<file>: a profile of
// another model or plan: model.dim 256 (profile) vs 512 (simulated)"), or its records are not the simulated Program's
// ops
// ("<file>: ops[12].name: expected '...' (op 12 of the simulated Program), got '...'"; sim/profiled_program.h).

#include <nlohmann/json.hpp>
#include <string>

#include "plans/program/program.h"
#include "sim/timeline/timeline.h"

namespace tptune {

// One op of a tp-run profile as the trace shows it. (Not calibration's MeasuredOp, sim/calibrate/measurements.h:
// two classes of one name in one namespace broke the one-definition rule and corrupted memory.)
struct ProfiledOp {
  std::string name;  // full FQN op name
  std::string phase, kind;
  double median_us = 0;
};

// Reads a Profile JSON file; `path` names it in errors. The profile must be one of `simulated` (check_profile(),
// sim/profiled_program.h: its "program" object, and its op records expand()'s ops one to one); the records of ops
// tp-run did not run ("measured": false) are left out. Also the environment's device ("cpu: <model>") in `device`.
std::vector<ProfiledOp> load_profile_ops(const std::string& path, const Program& simulated,
                                         std::string* device = nullptr);
std::vector<ProfiledOp> parse_profile_ops(const std::string& text, const std::string& name, const Program& simulated,
                                          std::string* device = nullptr);

// The simulated trace of chrome_trace(p, costs, tl) with the measured ops added as process 1.
nlohmann::json chrome_trace_with_measured(const Program& p, const OpCosts& costs, const Timeline& tl,
                                          const std::vector<ProfiledOp>& measured, const std::string& label);

}  // namespace tptune
