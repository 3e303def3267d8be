#include "runtime/verifier.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <map>

#include "plans/error.h"
#include "kernels/cpu/float8.h"
#include "runtime/executor.h"

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
// float8 cast checks. Scales: every rank must hold the same scale (the amax all-reduce makes them bit-identical;
// 1e-6 allows for a reduction that is not), and it must equal the reference's up to the fp32 noise of the amax
// (<= 1e-6 measured, 1e-4 allowed). Flips: the reference input must lie within 1e-4 of the tensor's largest scaled
// value of the midpoint between the two float8 values (fp32 noise before a cast is <= ~1e-6 of that).
constexpr double kRankScaleSpread = 1e-6, kScaleRel = 1e-4, kFlipMidpoint = 1e-4;

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

// All ranks' local copies of tensor `t`, rank-major (tp * local numel).
std::vector<float> gather_all(Backend& be, const Executor& ex, int t) {
  std::vector<float> local = ex.read(t);
  const int tp = be.group_size(Group::tp);
  const int64_t n = static_cast<int64_t>(local.size());
  Buffer in = be.alloc(n, Storage::f32), out = be.alloc(n * tp, Storage::f32);
  be.upload(in.f32(), local.data(), n);
  be.all_gather(Group::tp, in.f32(), out.f32(), n)->wait();
  std::vector<float> all(static_cast<size_t>(n * tp));
  be.download(all.data(), out.f32(), n * tp);
  return all;
}

// The full tensor from rank-major shards of `dim` of `full`.
std::vector<float> assemble(const std::vector<float>& shards, const Shape& full, int dim, int tp) {
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < dim; ++i) outer *= full[size_t(i)];
  for (size_t i = size_t(dim) + 1; i < full.size(); ++i) inner *= full[i];
  const int64_t w = full[size_t(dim)] / tp * inner, local = outer * w;
  std::vector<float> out(shards.size());
  for (int r = 0; r < tp; ++r)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < w; ++i) out[size_t(o * w * tp + r * w + i)] = shards[size_t(r * local + o * w + i)];
  return out;
}

// The global tensor a (possibly redistributed) tensor holds: redistributions keep the global value.
std::string global_name(std::string fqn) {
  static const char* suffixes[] = {".all_gather", ".all_reduce", ".reduce_scatter", ".all_to_all", ".slice"};
  for (bool again = true; again;) {
    again = false;
    for (const char* sfx : suffixes) {
      std::string x(sfx);
      if (fqn.size() > x.size() && fqn.compare(fqn.size() - x.size(), x.size(), x) == 0) {
        fqn.resize(fqn.size() - x.size());
        again = true;
      }
    }
  }
  return fqn;
}

// Two float8 values with no float8 value strictly between them.
bool adjacent(float a, float b, kernels::Float8Format f) {
  const uint8_t ea = kernels::encode_float8(a, f), eb = kernels::encode_float8(b, f);
  const int ma = ea & 0x7F, mb = eb & 0x7F;
  if ((ea & 0x80) == (eb & 0x80)) return std::abs(ma - mb) == 1;
  return ma + mb <= 1;  // across zero
}

// The full name of input `k` of a flat op as its Program names it in the op's layer ("layers.1.output.grad"); the
// flat tensor's own name may be that of a tensor it aliases across a layer chain.
std::string input_name(const Program& p, const FlatOp& op, size_t k) {
  const TensorDesc& d = p.tensor(op.op->inputs[k]);
  return d.per_layer ? layer_fqn(op.layer, d.name) : d.name;
}

const CastFp8Op* cast_stage(const FlatOp& op) {
  const auto* c = std::get_if<CastFp8Op>(&op.op->kind);
  if (!c || c->stage != CastFp8Op::Stage::cast || op.inputs.size() != 2 || op.outputs.size() != 2) return nullptr;
  return c;
}

// Keeps the reference run in lockstep with the sharded run's float8 values (see verifier.h), checking each cast.
class Float8Lockstep {
 public:
  Float8Lockstep(Backend& be, const Executor& sharded, Executor& ref, VerifyReport& report)
      : be_(be), sharded_(sharded), ref_(ref), report_(report), tp_(be.group_size(Group::tp)) {
    const FlatProgram& f = sharded.flat();
    for (size_t i = 0; i < f.ops.size(); ++i)
      if (const CastFp8Op* c = cast_stage(f.ops[i]))
        casts_.emplace(std::make_pair(global_name(input_name(sharded.program(), f.ops[i], 0)), c->to),
                       static_cast<int>(i));
  }

  // Runs on every rank in the same order (the reference Program is the same everywhere), so the gathers match.
  void after_reference_op(int index) {
    const FlatOp& rop = ref_.flat().ops[size_t(index)];
    const CastFp8Op* c = cast_stage(rop);
    if (!c) return;
    const std::string tensor = global_name(input_name(ref_.program(), rop, 0));
    auto it = casts_.find({tensor, c->to});
    if (it == casts_.end()) {
      report_.unmatched_casts.push_back(rop.name);
      return;
    }
    const FlatOp& sop = sharded_.flat().ops[size_t(it->second)];
    const auto fmt8 = c->to == DType::fp8_e5m2 ? kernels::Float8Format::e5m2 : kernels::Float8Format::e4m3;
    CastCheck k;
    k.tensor = tensor;
    k.op = rop.name;
    k.sharded_op = sop.name;
    std::vector<float> all_q = gather_all(be_, sharded_, sop.outputs[0]);
    std::vector<float> all_s = gather_all(be_, sharded_, sop.outputs[1]);
    const TensorDesc& sd = sharded_.desc(sop.outputs[0]);
    const TensorDesc& rd = ref_.desc(rop.outputs[0]);
    const int64_t n = numel(rd.local_shape), local = numel(sd.local_shape);
    k.elements = n;
    std::vector<float> q;
    if (sd.global_shape != rd.global_shape) {
      k.problem = fmt::format("the sharded cast {} is of a {} tensor, the reference's {}", sop.name,
                              to_string(sd.global_shape), to_string(rd.global_shape));
    } else if (sd.placement.is_partial()) {
      k.problem = "the sharded run casts a partial sum (P): each rank quantizes an addend";
    } else if (sd.placement.is_shard() && tp_ > 1) {
      q = assemble(all_q, sd.global_shape, sd.placement.normalized_dim(static_cast<int>(sd.global_shape.size())), tp_);
    } else {
      q.assign(all_q.begin(), all_q.begin() + local);
      for (int r = 1; r < tp_ && k.problem.empty(); ++r)
        if (!std::equal(q.begin(), q.end(), all_q.begin() + r * local))
          k.problem = fmt::format("rank {} holds other float8 values of this replicated tensor than rank 0", r);
    }
    const float s0 = all_s[0], sr = ref_.read(rop.outputs[1])[0];
    for (int r = 1; r < tp_; ++r)
      k.rank_scale_spread = std::max(k.rank_scale_spread, std::abs(double(all_s[size_t(r)]) - s0) / std::abs(double(s0)));
    k.scale_rel_err = std::abs(double(s0) - sr) / std::abs(double(sr));
    if (static_cast<int64_t>(q.size()) == n) {
      const std::vector<float> x = ref_.read(rop.inputs[0]), qr = ref_.read(rop.outputs[0]);
      double xmax = 0;
      for (float v : x) xmax = std::max(xmax, std::abs(double(v) / sr));
      for (int64_t i = 0; i < n; ++i) {
        const float a = q[size_t(i)], b = qr[size_t(i)];
        if (a == b) continue;
        const double mid = 0.5 * (double(a) + double(b));
        if (adjacent(a, b, fmt8) && std::abs(double(x[size_t(i)]) / sr - mid) <= kFlipMidpoint * xmax)
          ++k.flips;
        else
          ++k.bad;
      }
      ref_.write(rop.outputs[0], q);  // the reference continues with the sharded run's float8 values
      ref_.write(rop.outputs[1], {s0});
    }
    if (k.problem.empty() && k.rank_scale_spread > kRankScaleSpread)
      k.problem = fmt::format("the ranks quantize with different scales (spread {:.2e}): the amax of a sharded tensor "
                              "was not all-reduced (max)",
                              k.rank_scale_spread);
    if (k.problem.empty() && k.scale_rel_err > kScaleRel)
      k.problem = fmt::format("scale {:.6e} differs from the unsharded model's {:.6e}", s0, sr);
    if (k.problem.empty() && k.bad > 0)
      k.problem = fmt::format("{} of {} float8 values differ from the unsharded model's beyond rounding flips", k.bad, n);
    k.pass = k.problem.empty();
    report_.casts.push_back(std::move(k));
  }

 private:
  Backend& be_;
  const Executor& sharded_;
  Executor& ref_;
  VerifyReport& report_;
  const int tp_;
  std::map<std::pair<std::string, DType>, int> casts_;
};

}  // namespace

bool VerifyReport::pass() const {
  if (!loss_pass) return false;
  for (const auto& p : params)
    if (!p.pass) return false;
  for (const auto& c : casts)
    if (!c.pass) return false;
  return !params.empty();
}

std::vector<std::string> VerifyReport::failed_params() const {
  std::vector<std::string> out;
  for (const auto& p : params)
    if (!p.pass) out.push_back(p.name);
  return out;
}

VerifyReport verify_step(const Program& sharded, const Program& reference, Backend& backend,
                         Backend& reference_backend, uint64_t seed,
                         const std::function<void(Executor&)>& before_step) {
  const int tp = backend.group_size(Group::tp);
  ExecutorOptions opts;
  opts.run_optimizer = false;
  Executor ex(sharded, backend, opts);
  Executor ref(reference, reference_backend, opts);
  ex.init(seed);
  ref.init(seed);
  if (before_step) before_step(ex);
  VerifyReport r;
  ex.step();
  Float8Lockstep lockstep(backend, ex, ref, r);
  if (sharded.plan.float8 != Float8Recipe::none)
    ref.set_after_op([&lockstep](int op) { lockstep.after_reference_op(op); });
  ref.step();

  r.tp = tp;
  r.seed = seed;
  r.float8 = std::string(to_string(sharded.plan.float8));
  const Tolerance tol{"max_rel", kMaxRel};
  // The loss is replicated: every rank's copy must match (gathered so that all ranks agree on the verdict).
  {
    std::vector<float> losses = gather_all(backend, ex, ex.loss_tensor());
    r.reference_loss = ref.loss();
    r.loss = losses[0];
    bool finite = true;
    for (float l : losses) {
      finite &= std::isfinite(l);
      r.loss_rel_err = std::max(r.loss_rel_err, std::abs(double(l) - r.reference_loss) /
                                                    std::max(std::abs(r.reference_loss), 1e-30));
    }
    // The loss is one scalar: the same bound as a tensor's largest value.
    r.loss_tolerance = {"rel", tol.value};
    r.loss_pass = finite && r.loss_rel_err <= tol.value;
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
    // Every rank takes part in the gather below whatever it finds, so that no rank waits alone.
    std::vector<float> all = p.grad >= 0 ? gather_all(backend, ex, p.grad) : std::vector<float>{};
    if (it == ref_params.end() || it->second.grad < 0) {
      c.problem = "the unsharded model has no such parameter gradient";
    } else if (p.grad < 0) {
      c.problem = "the sharded Program produces no gradient for it";
    } else {
      std::vector<float> want = ref.read(it->second.grad);
      const int64_t full = numel(c.shape);
      if (static_cast<int64_t>(want.size()) != full) {
        c.problem = fmt::format("reference gradient has {} elements, the parameter {}", want.size(), full);
      } else {
        Errors e;
        if (c.shard_dim >= 0 && tp > 1) {
          auto got = assemble(all, c.shape, c.shard_dim, tp);
          for (int64_t i = 0; i < full; ++i) e.add(got[size_t(i)], want[size_t(i)]);
        } else if (static_cast<int64_t>(all.size()) == full * tp) {
          for (int rk = 0; rk < tp; ++rk)  // every rank's copy of a replicated gradient
            for (int64_t i = 0; i < full; ++i) e.add(all[size_t(rk * full + i)], want[size_t(i)]);
        } else {
          c.problem = fmt::format("sharded gradient has {} elements per rank, expected {}", all.size() / tp, full);
        }
        c.ref_max = e.ref_max;
        c.max_abs_err = e.max_abs;
        c.max_rel_err = e.max_rel();
        c.rel_l2_err = e.rel_l2();
        if (!e.finite) c.problem = "NaN or infinity in the sharded gradient";
      }
    }
    c.pass = c.problem.empty() && c.max_rel_err <= tol.value;
    r.params.push_back(std::move(c));
  }
  // Model order: the embedding, the layers in order, then the rest (final norm, output); stable within each.
  auto rank_of = [](const std::string& n) -> int64_t {
    if (n.rfind("tok_embeddings", 0) == 0) return -1;
    if (n.rfind("layers.", 0) == 0) return std::atoll(n.c_str() + 7);
    return INT64_MAX;
  };
  std::stable_sort(r.params.begin(), r.params.end(),
                   [&](const ParamCheck& a, const ParamCheck& b) { return rank_of(a.name) < rank_of(b.name); });
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
    s += fmt::format("float8: {} casts checked against the sharded run ({} failed, {} rounding flips at fp32-noise "
                     "midpoints carried over), {} quantized by the reference alone\n",
                     r.casts.size(), failed_casts, flips, r.unmatched_casts.size());
    if (!r.unmatched_casts.empty())
      s += fmt::format("  quantized by the reference alone: {}\n", fmt::join(r.unmatched_casts, ", "));
    for (const auto& c : r.casts)
      if (!c.pass) s += fmt::format("  FAIL {} ({}): {}\n", c.tensor, c.sharded_op, c.problem);
  }
  auto failed = r.failed_params();
  if (r.pass())
    s += fmt::format("verify: PASS — tp {}, {} parameter gradients and the loss match the unsharded step\n", r.tp,
                     r.params.size());
  else
  {
    std::vector<std::string> bad_casts;
    for (const auto& c : r.casts)
      if (!c.pass) bad_casts.push_back(c.tensor);
    s += fmt::format("verify: FAIL — tp {}: {} of {} parameter gradients differ{}{}{}\n", r.tp, failed.size(),
                     r.params.size(), failed.empty() ? "" : ": " + fmt::format("{}", fmt::join(failed, ", ")),
                     r.loss_pass ? "" : "; the loss differs",
                     bad_casts.empty() ? "" : fmt::format("; float8 casts differ: {}", fmt::join(bad_casts, ", ")));
  }
  return s;
}

nlohmann::json to_json(const VerifyReport& r) {
  nlohmann::json j;
  j["pass"] = r.pass();
  j["tp"] = r.tp;
  j["seed"] = r.seed;
  j["float8"] = r.float8;
  j["loss"] = {{"sharded", r.loss},
               {"unsharded", r.reference_loss},
               {"rel_err", r.loss_rel_err},
               {"tolerance", r.loss_tolerance.value},
               {"pass", r.loss_pass}};
  j["params"] = nlohmann::json::array();
  for (const auto& p : r.params) {
    nlohmann::json q = {{"name", p.name},         {"shape", p.shape},           {"shard_dim", p.shard_dim},
                        {"ref_max", p.ref_max},   {"max_abs_err", p.max_abs_err}, {"max_rel_err", p.max_rel_err},
                        {"rel_l2_err", p.rel_l2_err}, {"tolerance_metric", p.tolerance.metric},
                        {"tolerance", p.tolerance.value}, {"pass", p.pass}};
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
  j["failed"] = r.failed_params();
  return j;
}

}  // namespace tptune
