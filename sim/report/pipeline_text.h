#pragma once
// A pipeline-parallel step as text (`tp-plan explain` of a PP plan): what each stage holds, the P2P of one
// microbatch, and each pp rank's schedule drawn on a time axis from the simulated timeline (sim/pipeline/step.h).
//
//   pipeline_explain_text(report) ->
//     pipeline: 1F1B on pp 2, 1 stage per rank, 4 microbatches of 1 sequence
//       stage 0 on pp rank 0: tok_embeddings, layers.0-3
//       stage 1 on pp rank 1: layers.4-7, norm, output
//       p2p per microbatch: the activation (512.0 KiB) from each stage to the next, its gradient (512.0 KiB) back:
//         2 x 1 stage boundary between ranks = 2 transfers per microbatch, 8 per schedule pass, each 5.3 us over
//         NVLink
//       schedule (each column 1/80 of the pass; F forward, B backward, I input gradient, W weight gradient, . idle):
//         rank 0  FFFFBBBB...
//         rank 1  ..FFBB...
//       each rank's actions in order (stage, kind, microbatch as torch prints them):
//         rank 0  0F0 0F1 0B0 ...
//
// The drawing: column c covers [c, c+1) x pass / width; it shows the letter of the action running at its middle on
// that rank, '.' when the rank idles there (its bubble). A pipeline of more than kMaxListedEvents actions
// (sim/report/trace.h) is neither drawn nor listed: one line says so instead.

#include <string>
#include <string_view>

#include "sim/simulate.h"

namespace tptune {

// `r` a StepReport of simulate_pipeline() (r.pipeline.pp > 1); `width` columns for the drawing (>= 10).
std::string pipeline_explain_text(const StepReport& r, int width = 100);

// An action's kind in words: "forward", "backward", "input gradient", "weight gradient".
std::string_view pipeline_action_words(PipelineActionKind k);
// A size as the pipeline's reports print it: "512.0 KiB", "1.5 MiB", "2.0 GiB".
std::string pipeline_bytes_text(double bytes);
// The pp rank that holds stage `stage` (PipelineRankReport::stages; 0 when none lists it).
int pipeline_stage_rank(const PipelineReport& p, int stage);
// The index of the stage's first block: the blocks of the stages before it.
int pipeline_stage_first_block(const PipelineReport& p, int stage);
// Transfers per microbatch between ranks: the activation forward and its gradient back over each boundary of
// neighbouring stages on different ranks (a V schedule's middle stages share a rank: a local hand-over, not counted,
// and not priced by the simulator either).
int64_t pipeline_rank_transfers(const PipelineReport& p);

// Every pp rank's actions (the timeline's), which a trace, a report and explain list one by one.
int64_t pipeline_action_count(const PipelineReport& p);
// check_listed_events (sim/report/trace.h) of those actions, for the output `option` names ("--trace", "--report").
void check_pipeline_listed(const PipelineReport& p, std::string_view option);

}  // namespace tptune
