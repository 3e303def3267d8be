#pragma once
// Chrome trace (Trace Event Format, opens in Perfetto or chrome://tracing) of a simulated step: one track per
// stream (compute, TP communication, DP communication) of the simulated rank, one complete event per op instance,
// named by its full FQN ("layers.3.attention.wq.fwd") with its phase, kind, segment and what held it back in args.
// FSDP2's copy kernels that the cost model folds into an op (sim/timeline/fsdp_copies.h) are slices of their own beside
// it on its stream ("layers.3.fsdp.reduce_scatter.copy_in", kind fsdp_copy), the op's slice its own kernel's time.
// Extrapolated block instances are written at their shifted times, so the trace shows every layer.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "plans/program/program.h"
#include "sim/timeline/timeline.h"

namespace tptune {

// tptune::Error (check_listed_events) when the step has more than kMaxListedEvents op events.
nlohmann::json chrome_trace(const Program& p, const OpCosts& costs, const Timeline& tl);

// The most events one output lists: a trace's events (this one's ops, a pipeline's actions: pipeline_trace.h), the
// actions a report draws or explain --json lists of a pipeline (pipeline_text.h). A trace takes 170 to 250 bytes an
// event on disk and about 2 KB while it is rendered, a report's action box about 300 bytes: the bound is about 250 MB
// of trace (2 GB of memory) or 300 MB of HTML, some ten times a real step's (a 10,000-layer model without PP: 620,000
// op events; a pipeline of pp 16 with 8 stages per rank and 64 microbatches: 25,000 actions), where a model at the
// limits of plans/util/limits.h (10,000 layers, pp 1024, 4,096 microbatches: 8.4 million actions) would write
// gigabytes.
inline constexpr int64_t kMaxListedEvents = 1'000'000;

// tptune::Error when `n` exceeds kMaxListedEvents, before anything is rendered:
//   "--trace: 1130020 op events (a step of 10000 layers), more than 1000000, the most one output lists
//    (docs/file-formats.md); HOW"       (10,000 layers at cp 8 with alltoall rotation)
void check_listed_events(int64_t n, std::string_view option, std::string_view what, std::string_view how);

// The op events chrome_trace() writes: every segment's instances x ops.
int64_t chrome_trace_op_events(const Timeline& tl);
// Every complete event chrome_trace() writes: the op events and the FSDP copies shown as slices of their own
// (sim/timeline/fsdp_copies.h), what check_listed_events() bounds.
int64_t chrome_trace_events(const Program& p, const OpCosts& costs, const Timeline& tl);

}  // namespace tptune
