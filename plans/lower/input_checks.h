#pragma once
// What lower() checks of its inputs before it lowers anything (plans/lower/lower.cc): every degree and size in
// range, the products of the step's largest tensors and FLOP counts within int64, the plan's settings consistent.
// Internal to plans/lower/; check_local_batch() (plans/lower/lower.h) is the public part.

#include "plans/language/config.h"
#include "plans/language/plan.h"
#include "plans/model/model.h"

namespace tptune {

// Throws tptune::Error naming the plan's source and key.
void check_inputs(const Model& m, const Training& t, const Plan& plan);

}  // namespace tptune
