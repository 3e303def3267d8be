#include "runtime/verifier.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <map>

#include "plans/util/error.h"
#include "runtime/executor.h"
#include "runtime/float8_lockstep.h"
#include "runtime/gather.h"

namespace tptune {
namespace {

// Tolerance. The sharded and unsharded steps do the same arithmetic in fp32 except for the order of summation (a
// GEMM's K split over ranks and summed by an all-reduce, different Eigen blocking, partial norm-weight gradients
// summed across ranks). Each reordered sum of K terms differs by at most ~K * 2^-24 relative to the sum of
// magnitudes (K <= a few hundred here, so ~1e-5), and these differences propagate through the layers and their
// backward without amplification beyond O(10); measured: <= 2e-6. 1e-4 of the tensor's largest value bounds that
// with a margin; a layout error moves values by O(their size) and lands near 1. With float8 the same bound holds
// because the reference is kept in lockstep with the sharded run's float8 values (verifier.h), each cast being
// checked on its own.
constexpr double kMaxRel = 1e-4;

// bf16 storage (the CUDA backend: activations, weights and gradients really are bf16). Every stored value is
// rounded to 8 significant bits (relative error <= 2^-9 = 2e-3, one ulp 2^-8 = 3.9e-3). The sharded and the
// unsharded step accumulate in fp32 in different orders (K split over ranks, different GEMM tilings), so a value
// whose fp32 result lies within that noise of a bf16 rounding boundary rounds the other way: a one-ulp difference
// (3.9e-3 relative) in a fraction of the elements of every tensor, compounding through the ~20 roundings between the
// loss and a parameter gradient of a 2-layer tiny model as a random walk, sqrt(20) * 3.9e-3 ~ 1.7e-2 relative in
// l2 norm. The max-element metric is useless here (one element that cancels to ~0 in one run carries the whole ulp
// noise of its inputs), so bf16 bounds the l2 relative error: 5e-2, three times the estimate. A wrong plan (a missing
// all-reduce halves a gradient at tp 2, a wrong shard permutes it) gives 0.1 to 1 and still fails, as the
// integration tests' wrong plans do. The loss is a mean of fp32 statistics over bf16 logits: 1e-2.
// These are estimates from the rounding arithmetic; the GPU runs have not been measured yet (docs/gpu-backend.md).
constexpr double kBf16RelL2 = 5e-2, kBf16Loss = 1e-2;

struct Tolerances {
  Tolerance param;
  double loss = 0;
  double float8_noise = 1e-4;  // Float8Lockstep's scale and midpoint bounds
};
Tolerances tolerances_for(Storage s) {
  if (s == Storage::bf16) return {{"rel_l2", kBf16RelL2}, kBf16Loss, 1.6e-2};
  return {{"max_rel", kMaxRel}, kMaxRel, 1e-4};
}

struct Errors {
  double ref_max = 0, max_abs = 0, sum_d2 = 0, sum_r2 = 0;
  bool finite = true;
  void add(float got, float ref) {
    if (!std::isfinite(got)) finite = false;
    double d = double(got) - double(ref);
    ref_max = std::max(ref_max, std::abs(double(ref)));
    max_abs = std::max(max_abs, std::abs(d));
    sum_d2 += d * d;
    sum_r2 += double(ref) * ref;
  }
  double max_rel() const { return ref_max > 0 ? max_abs / ref_max : (max_abs > 0 ? INFINITY : 0); }
  double rel_l2() const { return sum_r2 > 0 ? std::sqrt(sum_d2 / sum_r2) : (sum_d2 > 0 ? INFINITY : 0); }
};

// A gradient's errors into its check, and whether it passes its tolerance (and had no problem before).
void record_errors(ParamCheck& c, const Errors& e) {
  c.ref_max = e.ref_max;
  c.max_abs_err = e.max_abs;
  c.max_rel_err = e.max_rel();
  c.rel_l2_err = e.rel_l2();
  if (!e.finite) c.problem = "NaN or infinity in the sharded gradient";
  c.pass = c.problem.empty() && (c.tolerance.metric == "rel_l2" ? c.rel_l2_err : c.max_rel_err) <= c.tolerance.value;
}

}  // namespace

void compare_gradient(ParamCheck& c, const std::vector<float>& copies, int n_copies, int tp,
                      const std::vector<float>& want) {
  const int64_t full = numel(c.shape);
  if (static_cast<int64_t>(want.size()) != full) {
    c.problem = fmt::format("reference gradient has {} elements, the parameter {}", want.size(), full);
    return;
  }
  const size_t per_copy = n_copies > 0 ? copies.size() / size_t(n_copies) : 0;
  Errors e;
  for (int cr = 0; cr < n_copies && c.problem.empty(); ++cr) {
    const std::vector<float> mine(copies.begin() + std::ptrdiff_t(size_t(cr) * per_copy),
                                  copies.begin() + std::ptrdiff_t(size_t(cr + 1) * per_copy));
    if (c.shard_dim >= 0 && tp > 1) {
      auto got = assemble(mine, c.shape, c.shard_dim, tp);
      for (int64_t i = 0; i < full; ++i) e.add(got[size_t(i)], want[size_t(i)]);
    } else if (static_cast<int64_t>(mine.size()) == full * tp) {
      for (int rk = 0; rk < tp; ++rk)  // every rank's copy of a replicated gradient
        for (int64_t i = 0; i < full; ++i) e.add(mine[size_t(rk * full + i)], want[size_t(i)]);
    } else {
      c.problem = fmt::format("sharded gradient has {} elements per rank, expected {}", mine.size() / tp, full);
    }
  }
  record_errors(c, e);
}

void compare_expert_gradient(ParamCheck& c, const std::vector<float>& copies, int tp, int ep,
                             const std::vector<float>& want) {
  const int64_t full = numel(c.shape);
  if (static_cast<int64_t>(want.size()) != full || tp % ep != 0 || full % ep != 0 ||
      static_cast<int64_t>(copies.size()) != full / ep * tp) {
    c.problem = fmt::format("the sharded gradient has {} elements over {} ranks, expected {} experts' share of {} each",
                            copies.size(), tp, ep > 0 ? full / ep : 0, full);
    return;
  }
  const int64_t part = full / ep;
  Errors e;
  for (int rk = 0; rk < tp; ++rk)  // tp rank rk is ep rank rk % ep: it holds that share of the experts
    for (int64_t i = 0; i < part; ++i) e.add(copies[size_t(rk * part + i)], want[size_t((rk % ep) * part + i)]);
  record_errors(c, e);
}

void sort_model_order(std::vector<ParamCheck>& params) {
  auto rank_of = [](const std::string& n) -> int64_t {
    if (n.rfind("tok_embeddings", 0) == 0) return -1;
    if (n.rfind("layers.", 0) == 0) return std::atoll(n.c_str() + 7);
    return INT64_MAX;
  };
  std::stable_sort(params.begin(), params.end(),
                   [&](const ParamCheck& a, const ParamCheck& b) { return rank_of(a.name) < rank_of(b.name); });
}

Tolerance gradient_tolerance(Storage s) { return tolerances_for(s).param; }
double loss_tolerance(Storage s) { return tolerances_for(s).loss; }

bool VerifyReport::pass() const {
  if (!loss_pass) return false;
  for (const auto& p : params)
    if (!p.pass) return false;
  for (const auto& c : casts)
    if (!c.pass) return false;
  for (const auto* checks : {&expert_counts, &expert_bias})
    for (const auto& c : *checks)
      if (!c.pass) return false;
  return !params.empty();
}

std::vector<std::string> VerifyReport::failed_params() const {
  std::vector<std::string> out;
  for (const auto& p : params)
    if (!p.pass) out.push_back(p.name);
  return out;
}

VerifyReport verify_step(const Program& sharded, const Program& reference, Backend& backend, Backend& reference_backend,
                         uint64_t seed, const std::function<void(Executor&)>& before_step,
                         const VerifyProgressFn& on_progress) {
  const int tp = backend.group_size(Group::tp), cp = backend.group_size(Group::cp);
  ExecutorOptions opts;
  opts.run_optimizer = false;
  Executor ex(sharded, backend, opts);
  Executor ref(reference, reference_backend, opts);
  ex.init(seed);
  ref.init(seed);
  if (before_step) before_step(ex);
  const size_t n_sharded = ex.flat().ops.size(), n_reference = ref.flat().ops.size();
  const size_t progress_total = n_sharded + n_reference + ex.parameters().size();
  size_t compared = 0;
  auto progress = [&](size_t done) {
    if (on_progress) on_progress(done, progress_total);
  };
  if (on_progress) ex.set_after_op([&](int op) { progress(static_cast<size_t>(op) + 1); });
  VerifyReport r;
  ex.step();
  const Tolerances tols = tolerances_for(backend.storage_for(sharded.training.dtype));
  Float8Lockstep lockstep(backend, ex, ref, r, tols.float8_noise);
  const bool lockstep_on = sharded.plan.float8 != Float8Recipe::none;
  if (lockstep_on || on_progress)
    ref.set_after_op([&](int op) {
      if (lockstep_on) lockstep.after_reference_op(op);
      progress(n_sharded + static_cast<size_t>(op) + 1);
    });
  ref.step();

  r.tp = tp;
  r.cp = cp;
  r.ep = sharded.ep;
  r.seed = seed;
  r.float8 = std::string(to_string(sharded.plan.float8));
  const Tolerance tol = tols.param;
  // The loss is replicated: every rank's copy must match (gathered so that all ranks agree on the verdict).
  {
    std::vector<float> losses = gather_all(backend, ex, ex.loss_tensor());
    if (cp > 1) {  // each tp rank's copy of the loss: the sum of its cp group's shares
      const std::vector<float> shares = gather_group(backend, Group::cp, losses, "the loss");
      for (size_t k = 0; k < losses.size(); ++k) {
        double sum = 0;
        for (int c = 0; c < cp; ++c) sum += shares[size_t(c) * losses.size() + k];
        losses[k] = float(sum);
      }
    }
    r.reference_loss = ref.loss();
    r.loss = losses[0];
    bool finite = true;
    for (float l : losses) {
      finite &= std::isfinite(l);
      r.loss_rel_err = std::max(r.loss_rel_err,
                                std::abs(double(l) - r.reference_loss) / std::max(std::abs(r.reference_loss), 1e-30));
    }
    // The loss is one scalar: the same bound as a tensor's largest value.
    r.loss_tolerance = {"rel", tols.loss};
    r.loss_pass = finite && r.loss_rel_err <= tols.loss;
  }

  // Each router's buffers against the unsharded step's, exactly (whole numbers, and the same fp32 arithmetic on them):
  // its tokens per expert (the router's third output), the tp ranks' summed when each holds a share of the tokens (the
  // router's logits have 1/tp of the reference's rows), else every rank's equal to the reference's; and its
  // expert_bias after the optimizer pre-hook's update (moe_bias_update's output), every rank's equal to the
  // reference's. (Every rank gathers the same buffers in the same op order.)
  for (const FlatOp& f : ex.flat().ops) {
    const auto* el = std::get_if<ElementwiseOp>(&f.op->kind);
    const bool router =
        el && el->fn == ElementwiseOp::Fn::moe_router && f.op->phase == Phase::forward && f.outputs.size() == 3;
    const bool update = el && el->fn == ElementwiseOp::Fn::moe_bias_update && f.outputs.size() == 1;
    if (!router && !update) continue;
    const size_t out = router ? 2 : 0;
    ExpertCheck c;
    c.op = f.name;
    c.experts = numel(ex.desc(f.outputs[out]).local_shape);
    const int64_t E = c.experts;
    const std::vector<float> all = gather_all(backend, ex, f.outputs[out]);
    const FlatOp* g = nullptr;
    for (const FlatOp& o : ref.flat().ops)
      if (o.name == f.name && o.op->phase == f.op->phase && o.outputs.size() == f.outputs.size()) g = &o;
    const std::vector<float> want = g ? ref.read(g->outputs[out]) : std::vector<float>{};
    const bool split =
        router && g && numel(ex.desc(f.inputs.at(0)).local_shape) * tp == numel(ref.desc(g->inputs.at(0)).local_shape);
    const bool comparable = static_cast<int64_t>(want.size()) == E && static_cast<int64_t>(all.size()) == E * tp;
    if (!comparable) c.differing = E;
    for (int64_t x = 0; comparable && x < E; ++x) {
      if (split) {
        double sum = 0;
        for (int k = 0; k < tp; ++k) sum += all[size_t(k * E + x)];
        c.differing += sum != double(want[size_t(x)]);
      } else {
        bool same = true;
        for (int k = 0; k < tp; ++k) same = same && all[size_t(k * E + x)] == want[size_t(x)];
        c.differing += !same;
      }
    }
    c.pass = c.differing == 0;
    (router ? r.expert_counts : r.expert_bias).push_back(c);
  }

  std::map<std::string, Executor::Param> ref_params;
  for (const auto& p : ref.parameters()) ref_params[p.name] = p;
  std::map<std::string, bool> seen;
  for (const auto& p : ex.parameters()) {
    ParamCheck c;
    c.name = p.name;
    c.tolerance = tol;
    const TensorDesc& d = ex.desc(p.value);
    c.shape = d.global_shape;
    c.shard_dim = d.param_shard_dim;
    seen[p.name] = true;
    auto it = ref_params.find(p.name);
    // Every rank takes part in the gathers below whatever it finds, so that no rank waits alone. Under CP `every`
    // holds the cp ranks' tp-gathered copies one after another.
    std::vector<float> all = p.grad >= 0 ? gather_all(backend, ex, p.grad) : std::vector<float>{};
    const std::vector<float> every = cp > 1 && p.grad >= 0 ? gather_group(backend, Group::cp, all, p.name) : all;
    if (it == ref_params.end() || it->second.grad < 0) {
      c.problem = "the unsharded model has no such parameter gradient";
    } else if (p.grad < 0) {
      c.problem = "the sharded Program produces no gradient for it";
    } else if (d.expert && sharded.ep > 1) {
      compare_expert_gradient(c, every, tp, sharded.ep, ref.read(it->second.grad));
    } else {
      compare_gradient(c, every, cp, tp, ref.read(it->second.grad));
    }
    c.pass = c.problem.empty() && (tol.metric == "rel_l2" ? c.rel_l2_err : c.max_rel_err) <= tol.value;
    r.params.push_back(std::move(c));
    progress(n_sharded + n_reference + ++compared);
  }
  sort_model_order(r.params);
  for (const auto& [name, p] : ref_params) {
    if (seen.count(name)) continue;
    ParamCheck c;
    c.name = name;
    c.tolerance = tol;
    c.problem = "the sharded Program has no such parameter";
    r.params.push_back(std::move(c));
  }
  return r;
}

namespace {
bool all_pass(const std::vector<ExpertCheck>& checks) {
  return std::all_of(checks.begin(), checks.end(), [](const ExpertCheck& c) { return c.pass; });
}
// "<title>: N routers, M equal to the unsharded step's  pass|FAIL" and a line per failed router (none without checks).
void append_expert_checks(std::string& s, const char* title, const std::vector<ExpertCheck>& checks, const char* what) {
  if (checks.empty()) return;
  int64_t bad = 0;
  for (const auto& c : checks) bad += !c.pass;
  s += fmt::format("{}: {} routers, {} equal to the unsharded step's  {}\n", title, checks.size(),
                   int64_t(checks.size()) - bad, bad == 0 ? "pass" : "FAIL");
  for (const auto& c : checks)
    if (!c.pass) s += fmt::format("  FAIL {}: {} of {} experts' {}\n", c.op, c.differing, c.experts, what);
}
nlohmann::json checks_json(const std::vector<ExpertCheck>& checks) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& c : checks)
    a.push_back({{"op", c.op}, {"experts", c.experts}, {"differing", c.differing}, {"pass", c.pass}});
  return a;
}
// " x cp 2", " x pp 2" after the tp degree, for the degrees above 1.
std::string mesh_suffix(const VerifyReport& r) {
  std::string s;
  if (r.cp > 1) s += fmt::format(" x cp {}", r.cp);
  if (r.pp > 1) s += fmt::format(" x pp {}", r.pp);
  if (r.ep > 1) s += fmt::format(" (ep {} inside tp)", r.ep);
  return s;
}
}  // namespace

std::string format_report(const VerifyReport& r) {
  std::string s;
  s += fmt::format("{:<36} {:>14} {:>5} {:>10} {:>10} {:>10} {:>10} {:>14}  {}\n", "parameter", "shape", "shard",
                   "max|ref|", "max abs", "max rel", "rel l2", "tolerance", "result");
  for (const auto& p : r.params) {
    std::string shape = p.shape.empty() ? "-" : to_string(p.shape);
    s += fmt::format("{:<36} {:>14} {:>5} {:>10.3e} {:>10.3e} {:>10.3e} {:>10.3e} {:>14}  {}{}\n", p.name, shape,
                     p.shard_dim >= 0 ? std::to_string(p.shard_dim) : "-", p.ref_max, p.max_abs_err, p.max_rel_err,
                     p.rel_l2_err, fmt::format("{} {:.0e}", p.tolerance.metric, p.tolerance.value),
                     p.pass ? "pass" : "FAIL", p.problem.empty() ? "" : " (" + p.problem + ")");
  }
  s += fmt::format("loss: sharded {:.7f}, unsharded {:.7f}, rel err {:.3e} (tolerance {:.0e})  {}\n", r.loss,
                   r.reference_loss, r.loss_rel_err, r.loss_tolerance.value, r.loss_pass ? "pass" : "FAIL");
  if (!r.casts.empty() || !r.unmatched_casts.empty()) {
    int64_t flips = 0, failed_casts = 0;
    for (const auto& c : r.casts) flips += c.flips, failed_casts += !c.pass;
    s += fmt::format(
        "float8: {} casts checked against the sharded run ({} failed, {} rounding flips at fp32-noise "
        "midpoints carried over), {} quantized by the reference alone\n",
        r.casts.size(), failed_casts, flips, r.unmatched_casts.size());
    if (!r.unmatched_casts.empty())
      s += fmt::format("  quantized by the reference alone: {}\n", fmt::join(r.unmatched_casts, ", "));
    for (const auto& c : r.casts)
      if (!c.pass) s += fmt::format("  FAIL {} ({}): {}\n", c.tensor, c.sharded_op, c.problem);
  }
  append_expert_checks(s, "tokens per expert", r.expert_counts, "counts differ");
  append_expert_checks(s, "expert_bias after the update", r.expert_bias, "bias differs");
  auto failed = r.failed_params();
  if (r.pass())
    s += fmt::format("verify: PASS — tp {}{}, {} parameter gradients and the loss match the unsharded step\n", r.tp,
                     mesh_suffix(r), r.params.size());
  else {
    std::vector<std::string> bad_casts;
    for (const auto& c : r.casts)
      if (!c.pass) bad_casts.push_back(c.tensor);
    s += fmt::format("verify: FAIL — tp {}{}: {} of {} parameter gradients differ{}{}{}\n", r.tp, mesh_suffix(r),
                     failed.size(), r.params.size(),
                     failed.empty() ? "" : ": " + fmt::format("{}", fmt::join(failed, ", ")),
                     std::string(r.loss_pass ? "" : "; the loss differs") +
                         (all_pass(r.expert_counts) ? "" : "; tokens per expert differ") +
                         (all_pass(r.expert_bias) ? "" : "; expert_bias differs"),
                     bad_casts.empty() ? "" : fmt::format("; float8 casts differ: {}", fmt::join(bad_casts, ", ")));
  }
  return s;
}

nlohmann::json to_json(const VerifyReport& r) {
  nlohmann::json j;
  j["pass"] = r.pass();
  j["tp"] = r.tp;
  j["cp"] = r.cp;
  j["pp"] = r.pp;
  j["ep"] = r.ep;
  j["seed"] = r.seed;
  j["float8"] = r.float8;
  j["loss"] = {{"sharded", r.loss},
               {"unsharded", r.reference_loss},
               {"rel_err", r.loss_rel_err},
               {"tolerance", r.loss_tolerance.value},
               {"pass", r.loss_pass}};
  j["params"] = nlohmann::json::array();
  for (const auto& p : r.params) {
    nlohmann::json q = {{"name", p.name},
                        {"shape", p.shape},
                        {"shard_dim", p.shard_dim},
                        {"ref_max", p.ref_max},
                        {"max_abs_err", p.max_abs_err},
                        {"max_rel_err", p.max_rel_err},
                        {"rel_l2_err", p.rel_l2_err},
                        {"tolerance_metric", p.tolerance.metric},
                        {"tolerance", p.tolerance.value},
                        {"pass", p.pass}};
    if (!p.problem.empty()) q["problem"] = p.problem;
    j["params"].push_back(q);
  }
  j["casts"] = nlohmann::json::array();
  for (const auto& c : r.casts) {
    nlohmann::json q = {{"tensor", c.tensor},
                        {"op", c.op},
                        {"sharded_op", c.sharded_op},
                        {"elements", c.elements},
                        {"flips", c.flips},
                        {"bad", c.bad},
                        {"scale_rel_err", c.scale_rel_err},
                        {"rank_scale_spread", c.rank_scale_spread},
                        {"pass", c.pass}};
    if (!c.problem.empty()) q["problem"] = c.problem;
    j["casts"].push_back(q);
  }
  j["unmatched_casts"] = r.unmatched_casts;
  j["expert_counts"] = checks_json(r.expert_counts);
  j["expert_bias"] = checks_json(r.expert_bias);
  j["failed"] = r.failed_params();
  return j;
}

}  // namespace tptune
