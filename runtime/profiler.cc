#include "runtime/profiler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <thread>
#include <variant>

#include "plans/program/program_identity.h"
#include "plans/util/checked_math.h"
#include "plans/util/error.h"
#include "plans/util/version.h"
#include "runtime/executor.h"

#ifndef TPTUNE_BUILD_TYPE
#define TPTUNE_BUILD_TYPE "unknown"
#endif

namespace tptune {
namespace {

ProfileTensor tensor_of(const FlatProgram& flat, const Program& p, int t) {
  const FlatTensor& ft = flat.tensors[size_t(t)];
  return profile_tensor(ft.fqn, p.tensor(ft.template_id));
}

int64_t tensor_bytes(const FlatProgram& flat, const Program& p, int t) {
  const TensorDesc& d = p.tensor(flat.tensors[size_t(t)].template_id);
  int64_t n = 1;
  for (int64_t e : d.local_shape) n = checked_mul(n, e, "profile: tensor bytes");
  return checked_mul(n, int64_t(bytes_per_element(d.dtype)), "profile: tensor bytes");
}

// The bytes a memory-bound op without its own byte count moves (embedding, cross-entropy and float8 cast stages):
// every input read once and every output written once, except the embedding forward's weight, of which only the
// gathered rows are read (as many bytes as its output). Elementwise ops and collectives carry their own `bytes`.
std::optional<int64_t> moved_bytes(const FlatProgram& flat, const Program& p, const FlatOp& f) {
  const OpKind& kind = f.op->kind;
  if (!std::holds_alternative<EmbeddingOp>(kind) && !std::holds_alternative<CrossEntropyOp>(kind) &&
      !std::holds_alternative<CastFp8Op>(kind))
    return std::nullopt;
  const auto* emb = std::get_if<EmbeddingOp>(&kind);
  int64_t bytes = 0;
  for (int t : f.outputs) bytes = checked_add(bytes, tensor_bytes(flat, p, t), "profile: op bytes");
  const int64_t out = bytes;
  for (size_t k = 0; k < f.inputs.size(); ++k) {
    const bool gathered_weight = emb && !emb->backward && k == 1;  // {ids, weight} -> {out}
    bytes = checked_add(bytes, gathered_weight ? out : tensor_bytes(flat, p, f.inputs[k]), "profile: op bytes");
  }
  return bytes;
}

double percentile(const std::vector<double>& sorted, double q) {  // nearest rank
  if (sorted.empty()) return 0;
  size_t i = static_cast<size_t>(std::ceil(q * double(sorted.size()))) - (q > 0 ? 1 : 0);
  return sorted[std::min(i, sorted.size() - 1)];
}

}  // namespace

TimeSummary time_summary(const OpTiming& t) { return {t.median, t.min, t.p10, t.p90, t.max}; }

OpTiming summarize(std::vector<double> samples) {
  OpTiming t;
  t.samples = samples;
  if (samples.empty()) return t;
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  t.median = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
  t.min = samples.front();
  t.max = samples.back();
  t.p10 = percentile(samples, 0.10);
  t.p90 = percentile(samples, 0.90);
  return t;
}

nlohmann::json environment_json(Backend& backend) {
  BackendEnvironment env = backend.environment();
  nlohmann::json libs = nlohmann::json::object();
  for (const auto& [k, v] : env.libraries) libs[k] = v;
  nlohmann::json out = {{"backend", env.backend},
                        {"device", env.device},
                        {"threads_per_rank", env.threads},
                        {"ranks", backend.group_size(Group::tp) * backend.group_size(Group::dp)},
                        {"cores", static_cast<int>(std::thread::hardware_concurrency())},
                        {"libraries", libs},
                        {"git_hash", std::string(git_hash())},
                        {"build_type", TPTUNE_BUILD_TYPE}};
  // Device facts (GPU: sm_count, compute_capability, memory_bytes; device_preset when the GPU is one the simulator
  // has a preset for, which `tp-plan calibrate` fits against).
  for (const auto& [k, v] : env.details) out[k] = v;
  return out;
}

ProfileOp profile_op_record(const Executor& ex, size_t i, Backend& backend, int local_shapes_of_tp,
                            const std::vector<double>* samples) {
  return profile_op_record(ex.program(), ex.flat(), i, backend, local_shapes_of_tp, samples);
}

ProfileOp profile_op_record(const Program& program, const FlatProgram& flat, size_t i, Backend& backend,
                            int local_shapes_of_tp, const std::vector<double>* samples) {
  const FlatOp& f = flat.ops[i];
  const Op& op = *f.op;
  ProfileOp rec;
  rec.index = static_cast<int64_t>(i);
  rec.name = f.name;
  rec.module = f.module;
  rec.segment = "";
  for (const Segment& s : program.segments)  // FlatOp::op points into the executor's copy
    if (!s.ops.empty() && &op >= &s.ops.front() && &op <= &s.ops.back()) rec.segment = std::string(to_string(s.kind));
  rec.layer = f.layer;
  rec.template_op = op.id;
  rec.phase = std::string(to_string(op.phase));
  rec.kind = std::string(kind_name(op.kind));
  int gsize = 1;
  if (const auto* coll = std::get_if<CollectiveOp>(&op.kind))
    gsize = local_shapes_of_tp > 0 && coll->group == Group::tp ? local_shapes_of_tp : backend.group_size(coll->group);
  rec.op = op_descriptor(op.kind, gsize);
  if (const std::optional<int64_t> b = moved_bytes(flat, program, f)) rec.op["bytes"] = *b;
  rec.chunk = profile_chunk(op.chunk);
  for (const std::string& n : op.fused) rec.fused.push_back(layer_fqn(f.layer, n));
  for (int t : f.inputs) rec.inputs.push_back(tensor_of(flat, program, t));
  for (int t : f.outputs) rec.outputs.push_back(tensor_of(flat, program, t));
  if (!samples) {
    rec.measured = false;
  } else {
    OpTiming t = summarize(*samples);
    rec.time_us = time_summary(t);
    rec.samples_us = t.samples;
  }
  return rec;
}

Profile profile_program(const Program& program, Backend& backend, const ProfileOptions& options) {
  if (options.iters < 1) throw Error(fmt::format("--iters: expected at least 1, got {}", options.iters));
  if (options.warmup < 0) throw Error(fmt::format("--warmup: expected 0 or more, got {}", options.warmup));
  ExecutorOptions eo;
  eo.local_shapes_of_tp = options.local_shapes_of_tp;
  Executor ex(program, backend, eo);
  const bool single = ex.skips_collectives();
  ex.init(options.seed);
  const int total_steps = options.warmup + options.iters;
  for (int i = 0; i < options.warmup; ++i) {
    ex.step();
    if (options.on_step) options.on_step(i + 1, total_steps);
  }
  const FlatProgram& flat = ex.flat();
  const size_t n_ops = flat.ops.size();
  std::vector<std::vector<double>> samples(n_ops);
  Buffer local = backend.alloc(static_cast<int64_t>(n_ops), Storage::f32);
  Buffer worst = backend.alloc(static_cast<int64_t>(n_ops), Storage::f32);
  std::vector<float> times(n_ops);
  for (int it = 0; it < options.iters; ++it) {
    std::fill(times.begin(), times.end(), 0.0f);
    ex.step([&](int op, double us) { times[size_t(op)] = static_cast<float>(us); });
    // One op's time in this iteration: the slowest rank's.
    backend.upload(local.f32(), times.data(), static_cast<int64_t>(n_ops));
    try {
      backend.all_reduce(Group::tp, ReduceOp::max, local.f32(), worst.f32(), static_cast<int64_t>(n_ops))->wait();
    } catch (const Error& e) {  // a watchdog timeout
      throw Error(fmt::format("profile: the all-reduce (max) of iteration {}'s op times: {}", it, e.what()));
    }
    backend.download(times.data(), worst.f32(), static_cast<int64_t>(n_ops));
    for (size_t i = 0; i < n_ops; ++i) samples[i].push_back(times[i]);
    if (options.on_step) options.on_step(options.warmup + it + 1, total_steps);
  }
  // Whole steps with the overlap the Program allows (no per-op callback): each rank times its step after a
  // synchronizing all-reduce, and the step's time is the slowest rank's.
  std::vector<double> walls;
  {
    Buffer one = backend.alloc(1, Storage::f32), one_max = backend.alloc(1, Storage::f32);
    auto timer = backend.make_timer();
    // Single-GPU mode: the skipped collectives' outputs keep what the steps above seeded (Executor::set_seeding), so
    // that the compute-only step times the compute alone, not the seeding's copies (a collective's work).
    ex.set_seeding(false);
    for (int it = 0; it < options.iters; ++it) {
      backend.all_reduce(Group::tp, ReduceOp::max, one.f32(), one_max.f32(), 1)->wait();
      timer->start();
      ex.step();
      timer->stop();
      float us = static_cast<float>(timer->elapsed_us());
      backend.upload(one.f32(), &us, 1);
      backend.all_reduce(Group::tp, ReduceOp::max, one.f32(), one_max.f32(), 1)->wait();
      backend.download(&us, one_max.f32(), 1);
      walls.push_back(us);
    }
  }
  const float loss = ex.loss();  // replicated: the same on every rank

  Profile prof;
  prof.environment = environment_json(backend);
  prof.program = program_identity(program);  // what `tp-plan simulate --measured` compares
  // The loss after the last step (null when it is not finite: the run diverged and its times mean little).
  if (std::isfinite(loss) && !single) prof.final_loss = loss;
  prof.timing = ProfileTiming{options.warmup, options.iters};
  {
    OpTiming w = summarize(walls);
    // Without a whole step (single-GPU mode) what was timed is rank 0's compute without its collectives: named
    // apart so that nothing reads it as a step time.
    (single ? prof.compute_wall : prof.step_wall) = WallTimes{time_summary(w), w.samples};
  }
  if (single) {
    prof.local_shapes_of_tp = program.tp;
    prof.collectives = fmt::format(
        "not run: one process ran rank 0's compute ops at the local shapes of tp {}; the collectives need {} ranks, "
        "so their records say \"measured\": false and carry no time. What each would have written was seeded from "
        "rank 0's own data (\"seeded_from_local\": true: a gathered tensor holds its shard in every rank's slot, a "
        "reduced one the sum of the slices of its partial), so the compute ran on data shaped like a real run's; the "
        "values are not the tp {} run's (final_loss means nothing)",
        program.tp, program.tp, program.tp);
  }
  prof.ops.reserve(n_ops);
  for (size_t i = 0; i < n_ops; ++i) {
    // A collective the single-GPU mode did not run: not measured (see "collectives").
    const bool ran = !(single && flat.ops[i].op->is_collective());
    prof.ops.push_back(profile_op_record(ex, i, backend, single ? program.tp : 0, ran ? &samples[i] : nullptr));
    prof.ops.back().seeded_from_local = !ran;
  }
  return prof;
}

}  // namespace tptune
