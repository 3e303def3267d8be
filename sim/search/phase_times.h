#pragma once
// Where a search's time goes: wall time per evaluation phase, summed over the candidates (and the worker threads),
// for bench_search's per-phase breakdown and `tp-plan search --json`'s "phases_ms".
//
//   PhaseTimes t;
//   { PhaseTimer timer(t, Phase::lower); prog = lower(...); }
//
// The clock is read twice per phase per candidate (~25 ns each with the vDSO steady_clock): noise next to a lowering
// (~100 us), and the sums are what the report shows, so they are kept in release builds too.

#include <array>
#include <chrono>
#include <cstddef>
#include <string_view>

#include "plans/util/enum_names.h"

namespace tptune {

enum class SearchPhase : int {
  constraints,  // check_static: refusals before any lowering
  lower,        // lower(), or lower_unfinished() once for every AC policy (plans/lower/incremental.h)
  finish,       // finish_lowering(): a policy's recompute ops, async TP and deps on a copy of the unfinished Program
  patch,        // BatchProgram::make, and the batch-parametric Program set to a later local batch (no lowering)
  memory,       // memory_model
  cost,         // per-op durations (cost_ops)
  schedule,     // the timeline
  report,       // the StepReport (make_report)
  sweep,  // search.ac_layers: the memory and bound check of every block count (CandidateEvaluator::sweep_ac_layers)
  count_
};
inline constexpr int kSearchPhases = static_cast<int>(SearchPhase::count_);
std::string_view to_string(SearchPhase p);

struct PhaseTimes {
  std::array<double, kSearchPhases> ns{};     // wall time, nanoseconds
  std::array<size_t, kSearchPhases> calls{};  // how many times the phase ran
  double& operator[](SearchPhase p) { return ns[static_cast<size_t>(p)]; }
  double operator[](SearchPhase p) const { return ns[static_cast<size_t>(p)]; }
  PhaseTimes& operator+=(const PhaseTimes& o) {
    for (size_t i = 0; i < ns.size(); ++i) ns[i] += o.ns[i], calls[i] += o.calls[i];
    return *this;
  }
};

// Adds the time from construction to destruction to `t[phase]` and counts one call.
class PhaseTimer {
 public:
  PhaseTimer(PhaseTimes& t, SearchPhase p) : t_(t), p_(p), start_(std::chrono::steady_clock::now()) {}
  ~PhaseTimer() {
    t_[p_] += std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start_).count();
    ++t_.calls[static_cast<size_t>(p_)];
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  PhaseTimes& t_;
  SearchPhase p_;
  std::chrono::steady_clock::time_point start_;
};

// SearchPhase's enumerators, in declaration order (count_ has no name).
inline constexpr std::string_view kSearchPhaseNames[] = {"constraints", "lower",    "finish", "patch", "memory",
                                                         "cost",        "schedule", "report", "sweep"};
static_assert(std::size(kSearchPhaseNames) == kSearchPhases);

inline std::string_view to_string(SearchPhase p) { return name_of(kSearchPhaseNames, p); }

}  // namespace tptune
