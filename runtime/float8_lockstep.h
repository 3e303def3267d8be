#pragma once
// float8 lockstep (see runtime/verifier.h): after each float8 cast of the reference run, the sharded run's cast of
// the same global tensor is gathered, checked against the reference's (same scale on every rank, the reference's
// scale, the same float8 values up to rounding flips at fp32-noise midpoints) and written into the reference run,
// which then continues with the sharded run's values. Casts are matched by the Program name of the tensor they
// cast, in the op's layer, with redistribution suffixes removed (a redistribution keeps the global tensor).

#include <map>
#include <string>
#include <utility>

#include "runtime/backend.h"
#include "runtime/executor.h"
#include "runtime/verifier.h"

namespace tptune {

class Float8Lockstep {
 public:
  // `sharded` has run its step; its casts are indexed here. Results go to report.casts / unmatched_casts.
  // `noise`: the relative noise of the cast inputs between the two runs, which bounds the scale difference and the
  // distance of a flipped element from its rounding midpoint (1e-4 for fp32 storage; bf16 storage: verifier.cc).
  Float8Lockstep(Backend& be, const Executor& sharded, Executor& ref, VerifyReport& report, double noise = 1e-4);
  // Call after every op of the reference step (Executor::set_after_op). Collective: every rank runs the same
  // reference Program, so the gathers line up.
  void after_reference_op(int index);

 private:
  Backend& be_;
  const Executor& sharded_;
  Executor& ref_;
  VerifyReport& report_;
  const int tp_;
  const double noise_;
  std::map<std::pair<std::string, DType>, int> casts_;  // (global tensor name, float8 dtype) -> sharded flat op
};

}  // namespace tptune
