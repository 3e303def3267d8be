#pragma once
// Chrome trace (Trace Event Format, opens in Perfetto or chrome://tracing) of a pipeline-parallel step
// (sim/pipeline/step.h): one pass of the schedule as simulated, one thread per pp rank ("pp rank 0 (stages 0, 8)"),
// one complete event per action of PipelineReport::timeline, named by kind, stage and microbatch ("F s0 mb3"), at its
// start and for its duration in us, with torch's repr of the action ("0F3"), the stage, the microbatch and the kind in
// words in args. The gaps between a rank's events are its idle time (the bubble and the P2P waits). What runs once per
// step outside the pass (FSDP's exposed all-gather and reduction, the optimizer: PipelineReport::fsdp_exposed_ms,
// optimizer_ms) and the ops inside each action (the microbatch Program's) are not events.
//
//   nlohmann::json t = pipeline_chrome_trace(report.pipeline);   // tptune::Error when pipeline.pp is 1

#include <nlohmann/json.hpp>

#include "sim/simulate.h"

namespace tptune {

// tptune::Error (naming --trace) when the pipeline has more actions than one output lists (sim/report/trace.h).
nlohmann::json pipeline_chrome_trace(const PipelineReport& p);

}  // namespace tptune
