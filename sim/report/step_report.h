#pragma once
// What `tp-plan simulate` prints for one StepReport (sim/simulate.h): the text summary and the JSON.
//
// The JSON has at least: step_time_ms, tokens_per_second_per_gpu, mfu, peak_memory_gib, fits_in_memory,
// breakdown_ms {compute, exposed_tp_comm, exposed_dp_comm}, per_block_ms {forward, backward}.

#include <nlohmann/json.hpp>
#include <string>

#include "sim/simulate.h"

namespace tptune {

std::string report_text(const StepReport& r);
nlohmann::json report_json(const StepReport& r);

}  // namespace tptune
