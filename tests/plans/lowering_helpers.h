#pragma once
// Shared helpers for the lowering tests: count collectives, a lowering's error (the plans and models they lower come
// from tests/fixtures.h).
#include <string>
#include <vector>

#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "sim/report/explain.h"
#include "tests/fixtures.h"

namespace tptune::testing {

using test::llama3_8b;
using test::lower_preset;
using test::make_plan;

// Collectives of one block on the TP group: (phase "forward"/"backward", kind) -> count.
inline int block_count(const Program& p, const char* phase, CollectiveKind kind, ReduceOp reduce = ReduceOp::sum) {
  int n = 0;
  for (const auto& r : block_collectives(p)) {
    bool fwd = r.phase == Phase::forward;
    if (r.group == Group::tp && r.kind == kind && r.reduce == reduce && fwd == (std::string(phase) == "forward")) ++n;
  }
  return n;
}

// Collectives outside the blocks, matching module and kind.
inline std::vector<CollectiveRecord> top_level(const Program& p, const std::string& module) {
  std::vector<CollectiveRecord> out;
  for (const auto& r : step_collectives(p))
    if (r.module == module) out.push_back(r);
  return out;
}

inline std::string lowering_error(const Model& m, const Training& t, const Plan& p) {
  try {
    lower(m, t, p);
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace tptune::testing
