#pragma once
// A tp-run profile (plans/program/profile_format.h) checked against the Program it is a profile of: the one check every
// reader of a profile passes before pairing its times with ops (`tp-plan calibrate` and `accuracy`, through
// sim/calibrate/measurements.h; `tp-plan simulate --measured`, through sim/report/measured_trace.h).
//
// check_profile(prof, plan, program, path, against) refuses, as one tptune::Error line naming the file and the JSON
// path (the messages name the Program: "the program its config_yaml lowers to", or "the simulated Program"):
//   - a "program" object of another model, training or plan (check_same_program(), plans/program/program_identity.h);
//   - op records that are not expand(program)'s ops one to one, in execution order (tp-run writes one per op, each
//     mode: a pipeline's are its microbatch Program's, and a single-process profile's, --local-shapes-of-tp N, those
//     of the Program lowered for tp N, which its identity names):
//       p.json: ops[12].name: expected 'layers.0.attention.wq.fwd' (op 12 of the program its config_yaml lowers to),
//               got 'layers.0.attention.wk.fwd'
//     and a record's segment, template_op and kind, when present, that are not its op's;
//   - a "pipeline" block without a pipeline plan, a pipeline plan without one, and a block that is not the plan's:
//     its pp, schedule, microbatches and microbatch_size; its stages when listed (the plan's split and placement,
//     plans/lower/rewrite/pipeline_stage.h); one rank record per pp rank, in order, each with exactly that rank's
//     actions of the schedule, in order (sim/pipeline/schedule.h, what tp-run ran); p2p records from a pp rank to the
//     next.
// Ops that tp-run did not run carry `"measured": false` (the single-process mode's collectives, a pipeline's
// optimizer phase): they are ops of the Program like the others and pass.

#include <string>

#include "plans/language/config.h"
#include "plans/language/plan.h"
#include "plans/program/profile_format.h"
#include "plans/program/program.h"

namespace tptune {

// Which Program a profile is checked against: the one its own config_yaml and plan_yaml lower to (calibrate,
// accuracy), or the one simulated beside it (simulate --measured).
enum class ProfiledAgainst { own_yaml, simulated };

// `plan`: the plan `program` was lowered from (a pipeline's: the pipeline plan, `program` its microbatch Program).
void check_profile(const Profile& prof, const Plan& plan, const Program& program, const std::string& path,
                   ProfiledAgainst against);

// What a profile names: its program.config_yaml and plan_yaml loaded and lowered again (a pipeline plan's Program is
// one microbatch's, plans/language/pipeline_parallel.h), then check_profile()'d. Errors: "FILE: program.config_yaml:
// missing", "FILE: program: cannot lower the profiled Program again: ...", and check_profile()'s.
struct ProfiledProgram {
  Config config;
  Plan plan;        // as profiled (a pipeline's: the pipeline plan)
  Program program;  // the Program the ops are of
};
ProfiledProgram profiled_program(const Profile& prof, const std::string& path);

}  // namespace tptune
