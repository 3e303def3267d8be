#pragma once
// The pipeline one pp rank runs under tp-run (verify, profile): torchtitan's split of the plan's stages
// (plans/language/) and torch's order of the rank's actions (sim/pipeline/schedule.h), as the runtime's
// PipelineRun (runtime/pipeline/run.h). tptune::Error as resolve_pipeline() and build_schedule() refuse.

#include <mpi.h>

#include "plans/language/plan.h"
#include "plans/model/model.h"
#include "runtime/pipeline/run.h"

namespace tptune::tools {

PipelineRun pipeline_run(const Model& model, const Plan& plan, MPI_Comm pp, int pp_rank);

}  // namespace tptune::tools
