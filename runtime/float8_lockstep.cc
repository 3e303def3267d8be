#include "runtime/float8_lockstep.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/float8.h"
#include "runtime/gather.h"

namespace tptune {
namespace {

// float8 cast checks. Scales: every rank must hold the same scale (the amax all-reduce makes them bit-identical;
// 1e-6 allows for a reduction that is not), and it must equal the reference's up to the fp32 noise of the amax
// (<= 1e-6 measured, 1e-4 allowed). Flips: the reference input must lie within 1e-4 of the tensor's largest scaled
// value of the midpoint between the two float8 values (fp32 noise before a cast is <= ~1e-6 of that). Both 1e-4
// bounds are the constructor's `noise`: bf16 storage widens them (verifier.cc).
constexpr double kRankScaleSpread = 1e-6;

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

}  // namespace

Float8Lockstep::Float8Lockstep(Backend& be, const Executor& sharded, Executor& ref, VerifyReport& report, double noise)
    : be_(be), sharded_(sharded), ref_(ref), report_(report), tp_(be.group_size(Group::tp)), noise_(noise) {
  const FlatProgram& f = sharded.flat();
  for (size_t i = 0; i < f.ops.size(); ++i)
    if (const CastFp8Op* c = cast_stage(f.ops[i]))
      casts_.emplace(std::make_pair(global_name(input_name(sharded.program(), f.ops[i], 0)), c->to),
                     static_cast<int>(i));
}

void Float8Lockstep::after_reference_op(int index) {
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
      if (adjacent(a, b, fmt8) && std::abs(double(x[size_t(i)]) / sr - mid) <= noise_ * xmax)
        ++k.flips;
      else
        ++k.bad;
    }
    ref_.write(rop.outputs[0], q);  // the reference continues with the sharded run's float8 values
    ref_.write(rop.outputs[1], {s0});
  }
  if (k.problem.empty() && k.rank_scale_spread > kRankScaleSpread)
    k.problem = fmt::format(
        "the ranks quantize with different scales (spread {:.2e}): the amax of a sharded tensor "
        "was not all-reduced (max)",
        k.rank_scale_spread);
  if (k.problem.empty() && k.scale_rel_err > noise_)
    k.problem = fmt::format("scale {:.6e} differs from the unsharded model's {:.6e}", s0, sr);
  if (k.problem.empty() && k.bad > 0)
    k.problem = fmt::format("{} of {} float8 values differ from the unsharded model's beyond rounding flips", k.bad, n);
  k.pass = k.problem.empty();
  report_.casts.push_back(std::move(k));
}

}  // namespace tptune
