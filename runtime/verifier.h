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
// The tolerance (max rel err <= 1e-4) is justified in verifier.cc. A wrong plan produces errors of the order of the
// values themselves (rel err ~ 1), far above it.
//
// float8 lockstep. Quantization is discontinuous: an fp32 difference of 1e-7 (a different summation order) moves a
// value across an e4m3/e5m2 rounding midpoint once in ~10^5 elements, that element changes by a whole float8 step
// (12.5-25%), and the difference grows through the layers and the e5m2 gradient casts until end-to-end gradients
// differ by up to ~10% although both runs are right. So the reference run is kept in lockstep with the sharded one:
// after each float8 cast of the reference, the sharded run's cast of the same global tensor is gathered and checked
// against it — same scale on every rank (a missing amax all-reduce leaves per-rank scales), the same scale as the
// reference, and the same float8 values except flips: elements one float8 step apart whose reference input lies
// within fp32 noise of the midpoint between them — and then the reference continues with the sharded values. The
// gradients are then compared with the fp32 tolerance. A cast of the sharded run is matched by the name of the tensor
// it casts, with redistribution suffixes (".all_gather", ...) removed: a redistribution keeps the global tensor.
//
// Context parallelism (the backend's CP group larger than one): each cp rank's loss is its tokens' share
// (CrossEntropyOp::mean_over), so the sharded loss is their sum over the CP group; every cp rank's gradients are
// compared (after FSDP's reduction they are the full gradients on every rank).
//
// verify_step is collective over `backend`'s TP and CP groups: every rank calls it with the same Programs and gets
// the same report within its TP group (every rank's values are in every report under CP).

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "plans/program/program.h"
#include "runtime/backend.h"

namespace tptune {

class Executor;

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

// float8 tensorwise: one cast of the reference run, checked against the sharded run's cast of the same global
// tensor (see "float8 lockstep" below).
struct CastCheck {
  std::string tensor;      // the cast tensor's full name in the reference ("layers.0.ffn_norm.out")
  std::string op;          // the reference's cast op
  std::string sharded_op;  // the sharded run's cast op of the same tensor
  int64_t elements = 0;
  int64_t flips = 0;             // elements one float8 step apart whose input sits on a rounding midpoint (fp32 noise)
  int64_t bad = 0;               // any other differing element
  double scale_rel_err = 0;      // |scale_sharded - scale_reference| / scale_reference
  double rank_scale_spread = 0;  // max relative difference between the ranks' scales
  bool pass = false;
  std::string problem;
};

// A mixture of experts, one router, against the unsharded step, exactly (whole numbers, and the same fp32 arithmetic
// on them): its tokens per expert (the histogram expert_bias updates from), summed over the tp ranks when the router's
// tokens are split over them (EP inside TP); or its expert_bias after the optimizer pre-hook's update, every rank's.
struct ExpertCheck {
  std::string op;  // the router op ("layers.0.moe.router.route") or the update ("....router.expert_bias.update")
  int64_t experts = 0;
  int64_t differing = 0;  // experts whose value differs (on any rank)
  bool pass = false;
};

struct VerifyReport {
  int tp = 1;
  int cp = 1;  // context parallelism: the CP group's ranks
  int pp = 1;  // pipeline parallelism: the pp group's ranks (runtime/pipeline/verify.h)
  int ep = 1;  // expert parallelism: the ep group's ranks (inside the TP group)
  uint64_t seed = 0;
  std::string float8;  // the recipe the Programs run with
  double loss = 0, reference_loss = 0, loss_rel_err = 0;
  Tolerance loss_tolerance;
  bool loss_pass = false;
  std::vector<ParamCheck> params;
  std::vector<CastCheck> casts;              // float8 tensorwise only
  std::vector<std::string> unmatched_casts;  // reference casts (op names) with no sharded counterpart
  std::vector<ExpertCheck> expert_counts;    // mixture of experts: every router's tokens per expert
  std::vector<ExpertCheck> expert_bias;      // and its expert_bias after the step
  bool pass() const;
  std::vector<std::string> failed_params() const;
};

// One parameter's comparison, as verify_step makes it: `copies` holds `n_copies` copies of the gradient gathered over
// the TP group (each tp rank's local gradient, rank-major; several copies: every cp rank's), assembled along
// c.shard_dim (or each rank's copy of a replicated one) and compared with the unsharded `want`. Fills c's errors,
// problem and pass from c.shape, c.shard_dim and c.tolerance.
void compare_gradient(ParamCheck& c, const std::vector<float>& copies, int n_copies, int tp,
                      const std::vector<float>& want);
// A routed expert's gradient under expert parallelism (ep > 1, the ep group inside the TP group): tp rank r holds the
// experts of ep rank r % ep, a 1/ep share of dim 0 (c.shape); every rank's share is compared with that share of
// `want`.
void compare_expert_gradient(ParamCheck& c, const std::vector<float>& copies, int tp, int ep,
                             const std::vector<float>& want);
// Model order: the embedding, the layers in order, then the rest (final norm, output); stable within each.
void sort_model_order(std::vector<ParamCheck>& params);
// The tolerances verify_step uses for a run whose tensors are stored as `s` (justified in verifier.cc).
Tolerance gradient_tolerance(Storage s);
double loss_tolerance(Storage s);

// `before_step` (tests): called with the sharded executor after its initialization, to corrupt it on purpose.
// `on_progress(done, total)`: called after every op of the sharded step, then of the reference step, then after
// every parameter compared (total = both steps' flat ops + the parameters); the tool's progress line.
using VerifyProgressFn = std::function<void(size_t done, size_t total)>;
VerifyReport verify_step(const Program& sharded, const Program& reference, Backend& backend, Backend& reference_backend,
                         uint64_t seed, const std::function<void(Executor&)>& before_step = nullptr,
                         const VerifyProgressFn& on_progress = nullptr);

// The per-parameter table and a summary line, for people.
std::string format_report(const VerifyReport& r);
nlohmann::json to_json(const VerifyReport& r);

}  // namespace tptune
