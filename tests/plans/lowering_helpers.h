#pragma once
// Shared helpers for the lowering tests: lower a preset on Llama3-8B and count collectives.
#include <string>
#include <vector>

#include "plans/error.h"
#include "plans/explain.h"
#include "plans/lower.h"

namespace tptune::testing {

inline Model llama3_8b() {
  Model m;
  model_preset("llama3-8b", m);
  return m;
}

struct Toggles {
  int tp = 8;
  bool loss_parallel = false;
  Float8Recipe float8 = Float8Recipe::none;
  bool async_tp = false;
  ActivationCheckpointing ac = ActivationCheckpointing::none;
  int dp = 1;
};

inline Program lower_preset(const std::string& preset, Toggles t, Model m = llama3_8b(), int64_t seq = 8192) {
  Plan base;
  base.tp_degree = t.tp;
  base.loss_parallel = t.loss_parallel;
  base.float8 = t.float8;
  base.async_tp = t.async_tp;
  base.activation_checkpointing = t.ac;
  base.dp_shard = t.dp;
  Training tr;
  tr.seq_len = seq;
  return lower(m, tr, preset_plan(preset, base));
}

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
