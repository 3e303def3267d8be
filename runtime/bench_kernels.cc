#include "runtime/bench_kernels.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>

#include "plans/util/checked_math.h"
#include "plans/util/error.h"
#include "runtime/tensor_init.h"

namespace tptune {
namespace {

using nlohmann::json;

// One op of the table in bench_kernels.h: its buffers are made by `setup` (which returns the call to time and the
// operand records) just before it is timed and freed after, so that only one op's tensors live at a time.
struct Timed {
  std::function<void()> call;
  json operands = json::array();
};
struct MemoryBoundOp {
  std::string name;
  std::function<int64_t()> bytes;
  std::function<Timed()> setup;
};

}  // namespace

const std::vector<std::string>& memory_bound_ops() {
  static const std::vector<std::string> names = {"rmsnorm_fwd",  "rmsnorm_bwd",   "rope_fwd",     "rope_bwd",
                                                 "residual_add", "swiglu_fwd",    "swiglu_bwd",   "ce_row_max",
                                                 "ce_sum_exp",   "ce_backward",   "fp8_amax",     "fp8_cast",
                                                 "adamw",        "embedding_fwd", "embedding_bwd"};
  return names;
}

nlohmann::json bench_memory_bound(Backend& be, const MemoryBoundShape& s, const BenchOptions& o) {
  json j = bench_header(be, "memory-bound", o);
  j["timing"]["method"] = fmt::format(
      "queued: each sample issued behind a {} MiB copy, no synchronization between "
      "samples (runtime/bench.h, time_queued_calls)",
      CacheFlush::kBytes >> 20);
  const char* what = "bench memory-bound";
  for (int64_t v : {s.rows, s.dim, s.ffn_dim, s.vocab, s.heads, s.head_dim})
    if (v < 1) throw Error(fmt::format("{}: every dimension must be at least 1", what));
  if (s.head_dim % 2 != 0) throw Error(fmt::format("{}: --head-dim must be even, got {}", what, s.head_dim));
  if (s.dtype != DType::bf16 && s.dtype != DType::fp32)
    throw Error(fmt::format("{}: --dtype: expected bf16 or fp32, got {}", what, to_string(s.dtype)));
  const Storage st = be.storage_for(s.dtype), f8 = be.storage_for(DType::fp8_e4m3);
  const int64_t e = storage_bytes(st), e8 = storage_bytes(f8);
  const int64_t R = s.rows, D = s.dim, F = s.ffn_dim, V = s.vocab, H = s.heads, d = s.head_dim;
  const int64_t RD = checked_mul(R, D, what), RF = checked_mul(R, F, what), RV = checked_mul(R, V, what),
                RHd = checked_mul({R, H, d}, what), FD = checked_mul(F, D, what), VD = checked_mul(V, D, what);
  const uint64_t seed = s.seed;
  const auto act = [&](const Buffer& b, const std::string& name) {
    return fill_bench_operand(be, b.ptr(), b.numel(), seed, name, BenchValues::activation);
  };
  const auto weight = [&](const Buffer& b, const std::string& name) {
    return fill_bench_operand(be, b.ptr(), b.numel(), seed, name, BenchValues::weight);
  };
  const auto ids = [&](const Buffer& b, const std::string& name, int64_t n) {
    std::vector<int32_t> h(size_t(b.numel()));
    const uint64_t key = seeded_key(seed, name);
    for (size_t i = 0; i < h.size(); ++i)
      h[i] = int32_t(uint64_t((seeded_uniform_keyed(key, int64_t(i)) + 1.0f) * 0.5f * float(n)) % uint64_t(n));
    be.upload(b.i32(), h.data(), b.numel());
    return json{{"name", name}, {"elements", b.numel()}, {"storage", "i32"}, {"distribution", "uniform ids"}};
  };
  // Row statistics a kernel reads (rstd, max, sumexp): computed by the kernel that writes them in a step.
  const auto stats = [&](const Buffer& x, int64_t rows, int64_t cols, Buffer& max, Buffer& sumexp) {
    be.ce_row_max(rows, cols, x.ptr(), max.f32());
    be.ce_sum_exp(rows, cols, x.ptr(), max.f32(), sumexp.f32());
  };
  // rope forward or backward (`fn`) over (1, R, H, d): one input, named `input` as the step names it, one output.
  const auto rope = [&](void (Backend::*fn)(const RopeShape&, DevPtr, DevPtr), const char* input) {
    Buffer in = be.alloc(RHd, st), out = be.alloc(RHd, st);
    Timed t;
    t.operands = {act(in, input)};
    const RopeShape rs{1, R, H, d, 0, 500000.0};
    t.call = [&be, fn, rs, in, out] { (be.*fn)(rs, in.ptr(), out.ptr()); };
    return t;
  };
  // y = fn(a, b) over n elements (the residual add, swiglu's forward).
  const auto binary = [&](void (Backend::*fn)(int64_t, DevPtr, DevPtr, DevPtr), int64_t n) {
    Buffer a = be.alloc(n, st), b = be.alloc(n, st), y = be.alloc(n, st);
    Timed t;
    t.operands = {act(a, "a"), act(b, "b")};
    t.call = [&be, fn, n, a, b, y] { (be.*fn)(n, a.ptr(), b.ptr(), y.ptr()); };
    return t;
  };

  std::vector<MemoryBoundOp> table = {
      {"rmsnorm_fwd", [&] { return 2 * RD * e + D * e + 4 * R; },
       [&] {
         Buffer x = be.alloc(RD, st), w = be.alloc(D, st), y = be.alloc(RD, st), rstd = be.alloc(R, Storage::f32);
         Timed t;
         t.operands = {act(x, "x")};
         be.fill(w.ptr(), D, 1.0f);  // a norm weight (ones, as torchtitan initializes it)
         t.call = [&be, R, D, x, w, y, rstd] { be.rmsnorm_fwd(R, D, 1e-5, x.ptr(), w.ptr(), y.ptr(), rstd.f32()); };
         return t;
       }},
      {"rmsnorm_bwd", [&] { return 3 * RD * e + 2 * D * e + 4 * R; },
       [&] {
         Buffer x = be.alloc(RD, st), w = be.alloc(D, st), dy = be.alloc(RD, st), dx = be.alloc(RD, st),
                dw = be.alloc(D, st), y = be.alloc(RD, st), rstd = be.alloc(R, Storage::f32);
         Timed t;
         t.operands = {act(x, "x"), act(dy, "dy")};
         be.fill(w.ptr(), D, 1.0f);
         be.rmsnorm_fwd(R, D, 1e-5, x.ptr(), w.ptr(), y.ptr(), rstd.f32());  // the rstd the forward saved
         t.call = [&be, R, D, x, w, rstd, dy, dx, dw] {
           be.rmsnorm_bwd(R, D, x.ptr(), w.ptr(), rstd.f32(), dy.ptr(), dx.ptr(), dw.ptr());
         };
         return t;
       }},
      {"rope_fwd", [&] { return 2 * RHd * e; }, [&] { return rope(&Backend::rope_fwd, "x"); }},
      {"rope_bwd", [&] { return 2 * RHd * e; }, [&] { return rope(&Backend::rope_bwd, "dy"); }},
      {"residual_add", [&] { return 3 * RD * e; }, [&] { return binary(&Backend::add, RD); }},
      {"swiglu_fwd", [&] { return 3 * RF * e; }, [&] { return binary(&Backend::swiglu_fwd, RF); }},
      {"swiglu_bwd", [&] { return 5 * RF * e; },
       [&] {
         Buffer a = be.alloc(RF, st), b = be.alloc(RF, st), dy = be.alloc(RF, st), da = be.alloc(RF, st),
                db = be.alloc(RF, st);
         Timed t;
         t.operands = {act(a, "a"), act(b, "b"), act(dy, "dy")};
         t.call = [&be, RF, a, b, dy, da, db] { be.swiglu_bwd(RF, a.ptr(), b.ptr(), dy.ptr(), da.ptr(), db.ptr()); };
         return t;
       }},
      {"ce_row_max", [&] { return RV * e + 4 * R; },
       [&] {
         Buffer x = be.alloc(RV, st), max = be.alloc(R, Storage::f32);
         Timed t;
         t.operands = {act(x, "logits")};
         t.call = [&be, R, V, x, max] { be.ce_row_max(R, V, x.ptr(), max.f32()); };
         return t;
       }},
      {"ce_sum_exp", [&] { return RV * e + 8 * R; },
       [&] {
         Buffer x = be.alloc(RV, st), max = be.alloc(R, Storage::f32), sumexp = be.alloc(R, Storage::f32);
         Timed t;
         t.operands = {act(x, "logits")};
         be.ce_row_max(R, V, x.ptr(), max.f32());
         t.call = [&be, R, V, x, max, sumexp] { be.ce_sum_exp(R, V, x.ptr(), max.f32(), sumexp.f32()); };
         return t;
       }},
      {"ce_backward", [&] { return 2 * RV * e + 12 * R; },
       [&] {
         Buffer x = be.alloc(RV, st), max = be.alloc(R, Storage::f32), sumexp = be.alloc(R, Storage::f32),
                targets = be.alloc(R, Storage::i32), dx = be.alloc(RV, st);
         Timed t;
         t.operands = {act(x, "logits"), ids(targets, "targets", V)};
         stats(x, R, V, max, sumexp);
         t.call = [&be, R, V, x, max, sumexp, targets, dx] {
           be.ce_backward(R, R, V, 0, x.ptr(), max.f32(), sumexp.f32(), targets.i32(), dx.ptr());
         };
         return t;
       }},
      {"fp8_amax", [&] { return RD * e + 4; },
       [&] {
         Buffer x = be.alloc(RD, st), amax = be.alloc(1, Storage::f32);
         Timed t;
         t.operands = {act(x, "x")};
         t.call = [&be, RD, x, amax] { be.fp8_amax(RD, x.ptr(), amax.f32()); };
         return t;
       }},
      {"fp8_cast", [&] { return RD * (e + e8) + 8; },
       [&] {
         Buffer x = be.alloc(RD, st), amax = be.alloc(1, Storage::f32), xq = be.alloc(RD, f8),
                scale = be.alloc(1, Storage::f32);
         Timed t;
         t.operands = {act(x, "x")};
         be.fp8_amax(RD, x.ptr(), amax.f32());  // the amax of the data: the scale training uses
         t.call = [&be, RD, x, amax, xq, scale] {
           be.fp8_cast(RD, DType::fp8_e4m3, x.ptr(), amax.f32(), xq.ptr(), scale.f32());
         };
         return t;
       }},
      {"adamw", [&] { return FD * (24 + e); },
       [&] {
         Buffer p = be.alloc(FD, Storage::f32), g = be.alloc(FD, st), m = be.alloc(FD, Storage::f32),
                v = be.alloc(FD, Storage::f32);
         Timed t;
         t.operands = {weight(p, "p"), act(g, "g")};
         be.fill(v.ptr(), FD, 1e-4f);  // second moments of a trained step, not zeros
         t.call = [&be, FD, p, g, m, v] { be.adamw(FD, AdamWParams{}, p.f32(), g.ptr(), m.f32(), v.f32()); };
         return t;
       }},
      {"embedding_fwd", [&] { return 4 * R + 2 * RD * e; },
       [&] {
         Buffer tok = be.alloc(R, Storage::i32), w = be.alloc(VD, st), out = be.alloc(RD, st);
         Timed t;
         t.operands = {ids(tok, "tokens", V), weight(w, "weight")};
         t.call = [&be, R, V, D, tok, w, out] { be.embedding_fwd(R, V, D, 0, false, tok.i32(), w.ptr(), out.ptr()); };
         return t;
       }},
      {"embedding_bwd", [&] { return 4 * R + RD * e + VD * e; },
       [&] {
         Buffer tok = be.alloc(R, Storage::i32), dout = be.alloc(RD, st), dw = be.alloc(VD, st);
         Timed t;
         t.operands = {ids(tok, "tokens", V), act(dout, "d_out")};
         t.call = [&be, R, V, D, tok, dout, dw] {
           be.embedding_bwd(R, V, D, 0, false, tok.i32(), dout.ptr(), dw.ptr());
         };
         return t;
       }},
  };

  std::vector<std::string> wanted = s.ops.empty() ? memory_bound_ops() : s.ops;
  for (const std::string& w : wanted)
    if (std::find(memory_bound_ops().begin(), memory_bound_ops().end(), w) == memory_bound_ops().end())
      throw Error(
          fmt::format("{}: --ops: unknown op '{}' (expected one of {})", what, w, fmt::join(memory_bound_ops(), ", ")));

  // The copies of the same run, device to device, each moving as many bytes as the op it is compared with (read
  // half, write half: a copy's rate depends on its size, 3.4 TB/s at 64 MiB and 4.2 at 1 GiB on the H200), and one of
  // an activation (at least 64 MiB) as the run's headline figure.
  const CacheFlush flush(be);      // each sample is queued behind it (time_queued_calls, runtime/bench.h)
  std::map<int64_t, json> copies;  // by elements copied
  const auto copy_of = [&](int64_t elems) -> const json& {
    auto it = copies.find(elems);
    if (it != copies.end()) return it->second;
    Buffer a = be.alloc(elems, st), b = be.alloc(elems, st);
    act(a, "copy");
    const OpTiming t = time_queued_calls(be, o, flush, [&] { be.copy2d(b.ptr(), elems, a.ptr(), elems, 1, elems); });
    const int64_t bytes = 2 * elems * e;
    return copies[elems] = {{"bytes", bytes},
                            {"time_us", timing_json(t)},
                            {"GBps", t.median > 0 ? double(bytes) / t.median / 1e3 : 0.0}};
  };
  const json copy = copy_of(std::max(RD, (int64_t(64) << 20) / e));
  json results = json::array();
  for (const MemoryBoundOp& op : table) {
    if (std::find(wanted.begin(), wanted.end(), op.name) == wanted.end()) continue;
    o.report(results.size(), wanted.size(), "ops");  // the ops timed before this one
    const int64_t bytes = op.bytes();
    OpTiming timing;
    json operands;
    {
      Timed t = op.setup();  // its buffers live in t.call until this scope ends
      be.synchronize();
      timing = time_queued_calls(be, o, flush, t.call);
      operands = t.operands;
    }
    const double gbps = timing.median > 0 ? double(bytes) / timing.median / 1e3 : 0.0;
    const double copy_gbps = copy_of(std::max<int64_t>(1, bytes / (2 * e)))["GBps"].get<double>();
    results.push_back({{"op", op.name},
                       {"bytes", bytes},
                       {"time_us", timing_json(timing)},
                       {"GBps", gbps},
                       {"copy_GBps", copy_gbps},
                       {"percent_of_copy", copy_gbps > 0 ? 100.0 * gbps / copy_gbps : 0.0},
                       {"operands", operands}});
  }
  j["data"] = bench_data_json(seed);
  j["shape"] = {{"rows", R},
                {"dim", D},
                {"ffn_dim", F},
                {"vocab", V},
                {"heads", H},
                {"head_dim", d},
                {"dtype", std::string(to_string(s.dtype))},
                {"storage", std::string(to_string(st))}};
  j["copy"] = copy;
  j["results"] = results;
  return j;
}

}  // namespace tptune
