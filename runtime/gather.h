#pragma once
// Host-side views of distributed tensors for checks (the verifier): every rank's local copy, and a full tensor
// reassembled from its shards. Collective over the TP group of the backend.

#include <string>
#include <vector>

#include "plans/language/placement.h"
#include "runtime/backend.h"

namespace tptune {

class Executor;

// All ranks' local copies of flat tensor `t` of `ex`, rank-major (tp * local numel). Every rank must call it.
std::vector<float> gather_all(Backend& be, const Executor& ex, int t);

// Every rank of group `g` passes `local` (the same size everywhere); returns them rank-major (group size * size).
// `what` names the data when a watchdog timeout ends the wait.
std::vector<float> gather_group(Backend& be, Group g, const std::vector<float>& local, const std::string& what);

// The full tensor of shape `full` from rank-major shards of its dim `dim` (as gather_all returns them).
std::vector<float> assemble(const std::vector<float>& shards, const Shape& full, int dim, int tp);

}  // namespace tptune
