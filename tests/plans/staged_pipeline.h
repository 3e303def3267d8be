#pragma once
// A plan's microbatch Program and the Program of each of its pipeline stages (plans/lower/rewrite/pipeline_stage.h),
// for the stage tests.
#include <vector>

#include "plans/lower/lower.h"
#include "plans/lower/rewrite/pipeline_stage.h"

namespace tptune::test {

struct Staged {
  Program microbatch;
  std::vector<PipelineStageSpan> spans;
  std::vector<Program> stages;
};

// `plan` (pp_degree > 1) on `m` at `training`: its microbatch Program, torchtitan's split under its schedule, and every
// stage's Program cut from the microbatch Program.
inline Staged lower_staged(const Model& m, const Training& training, const Plan& plan) {
  Staged s;
  s.microbatch = lower(m, training, pipeline_microbatch_plan(plan));
  s.spans = pipeline_stage_spans(resolve_pipeline(m, plan), plan.pp_schedule);
  for (int i = 0; i < static_cast<int>(s.spans.size()); ++i)
    s.stages.push_back(lower_pipeline_stage(s.microbatch, s.spans, i));
  return s;
}

}  // namespace tptune::test
