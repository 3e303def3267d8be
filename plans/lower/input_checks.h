#pragma once
// What lower() checks of its inputs before it lowers anything (plans/lower/lower.cc): every degree and size in
// range, the products of the step's largest tensors and FLOP counts within int64, the plan's settings consistent.
// Internal to plans/lower/; check_local_batch() (plans/lower/lower.h) is the public part.

#include <cstdint>
#include <string>

#include "plans/language/config.h"
#include "plans/language/plan.h"
#include "plans/model/model.h"

namespace tptune {

// Throws tptune::Error naming the plan's source and key.
void check_inputs(const Model& m, const Training& t, const Plan& plan);
// A dense-first mixture of experts (Model::dense_first_blocks() > 0) refuses a plan's ac_layers split
// (0 < ac_layers < n_layers): "ORIGIN: ac_layers K: not lowered for a model with model.moe.dense_layers N ...".
// `origin`: where ac_layers comes from (a plan file's line, an option, the plan's source).
void check_dense_first_ac_layers(const Model& m, int64_t ac_layers, const std::string& origin);

}  // namespace tptune
