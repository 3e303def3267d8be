#pragma once
// Chrome trace (Trace Event Format, opens in Perfetto or chrome://tracing) of a simulated step: one track per
// stream (compute, TP communication, DP communication) of the simulated rank, one complete event per op instance,
// named by its full FQN ("layers.3.attention.wq.fwd") with its phase, kind, segment and what held it back in args.
// Extrapolated block instances are written at their shifted times, so the trace shows every layer.

#include <nlohmann/json.hpp>

#include "plans/program.h"
#include "sim/timeline.h"

namespace tptune {

nlohmann::json chrome_trace(const Program& p, const OpCosts& costs, const Timeline& tl);

}  // namespace tptune
