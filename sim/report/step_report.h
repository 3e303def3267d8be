#pragma once
// What `tp-plan simulate` prints for one StepReport (sim/simulate.h): the text summary and the JSON.
//
// The JSON has at least: step_time_ms, tokens_per_second_per_gpu, mfu, peak_memory_gib, fits_in_memory,
// breakdown_ms {compute, exposed_tp_comm, exposed_dp_comm}, per_block_ms {forward, backward}, parameters {total,
// per_gpu} (elements: the model's, and one GPU's TP shard chunked over dp_shard by FSDP;
// plans/lower/parameter_count.h), trust {device, basis, text, ...} (how far to trust the prediction: sim/trust.h).

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "sim/simulate.h"

namespace tptune {

std::string report_text(const StepReport& r);
nlohmann::json report_json(const StepReport& r);
// A plan's toggles (plans/language/plan_toggles.h), the "plan" object of the step's JSON and of each plan the search's
// lists: the TP, FSDP, float8, async-TP, loss and checkpointing axes and the local batch always; HSDP's, context and
// pipeline parallelism's, accumulation's, the sequence length's and partial checkpointing's keys only when used, so
// that the reports of plans without them read as before.
nlohmann::json plan_toggles_json(const PlanToggles& p);
// MemoryReport::peak_phase in words: "forward" -> "a block's forward", "head" -> "the output layer and loss",
// "backward" -> "a block's backward".
std::string peak_phase_text(std::string_view phase);

}  // namespace tptune
