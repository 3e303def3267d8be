#pragma once
// The verifier: does a sharded Program compute the same training step as the unsharded model?
//
// Every rank of the TP group runs one step of the sharded Program (its rank's part) and, in the same process, one
// step of the reference Program (the same plan lowered at tp 1) from the same seed, so that both start from the
// same full weights and the same batch. The optimizer is skipped: gradients are compared before any update. Then
// the loss and every parameter gradient are compared: sharded gradients are all-gathered along their shard dim
// into the full parameter's shape; a replicated parameter's gradient is compared on every rank (a rank whose copy
// differs — e.g. a sequence-parallel norm whose partial gradient was not all-reduced — fails).
//
// Metrics per parameter, with d = sharded - reference over all elements (and all ranks' copies):
//   max abs err  = max |d|
//   max rel err  = max |d| / max |reference|   (normwise: relative to the tensor's scale, so that elements that
//                                               cancel to ~0 do not make it meaningless)
//   rel l2 err   = ||d||_2 / ||reference||_2
// The tolerances and the metric each gates on are in tolerance_for() (verifier.cc) with their justification.
// A wrong plan produces errors of the order of the values themselves (rel err ~ 1), far above any tolerance.
//
// verify_step is collective over `backend`'s TP group: every rank calls it with the same Programs and gets the
// same report.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plans/program.h"
#include "runtime/backend.h"

namespace tptune {

struct Tolerance {
  std::string metric;  // "max_rel" or "rel_l2": which metric the tolerance bounds
  double value = 0;
};

struct ParamCheck {
  std::string name;  // "layers.1.attention.wq.weight"
  Shape shape;       // the full parameter
  int shard_dim = -1;
  double ref_max = 0, max_abs_err = 0, max_rel_err = 0, rel_l2_err = 0;
  Tolerance tolerance;
  bool pass = false;
  std::string problem;  // why it failed beyond the numbers ("no gradient", "NaN in the sharded gradient", ...)
};

struct VerifyReport {
  int tp = 1;
  uint64_t seed = 0;
  std::string float8;  // the recipe the Programs run with
  double loss = 0, reference_loss = 0, loss_rel_err = 0;
  Tolerance loss_tolerance;
  bool loss_pass = false;
  std::vector<ParamCheck> params;
  bool pass() const;
  std::vector<std::string> failed_params() const;
};

VerifyReport verify_step(const Program& sharded, const Program& reference, Backend& backend,
                         Backend& reference_backend, uint64_t seed);

// The per-parameter table and a summary line, for people.
std::string format_report(const VerifyReport& r);
nlohmann::json to_json(const VerifyReport& r);

}  // namespace tptune
