#include "runtime/profiler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "plans/error.h"
#include "plans/program_identity.h"
#include "plans/version.h"
#include "runtime/executor.h"

#ifndef TPTUNE_BUILD_TYPE
#define TPTUNE_BUILD_TYPE "unknown"
#endif

namespace tptune {
namespace {

std::string_view role_name(TensorRole r) {
  switch (r) {
    case TensorRole::input:
      return "input";
    case TensorRole::activation:
      return "activation";
    case TensorRole::gradient:
      return "gradient";
    case TensorRole::parameter:
      return "parameter";
    case TensorRole::param_grad:
      return "param_grad";
    case TensorRole::scale:
      return "scale";
    case TensorRole::loss:
      return "loss";
    case TensorRole::optimizer_state:
      return "optimizer_state";
  }
  return "?";
}

std::string_view pattern_name(ChunkRef::Pattern p) {
  switch (p) {
    case ChunkRef::Pattern::none:
      return "none";
    case ChunkRef::Pattern::all_gather:
      return "all_gather";
    case ChunkRef::Pattern::reduce_scatter:
      return "reduce_scatter";
  }
  return "?";
}

nlohmann::json describe_tensor(const FlatProgram& flat, const Program& p, int t) {
  const FlatTensor& ft = flat.tensors[size_t(t)];
  const TensorDesc& d = p.tensor(ft.template_id);
  return {{"name", ft.fqn},
          {"shape", d.local_shape},
          {"global_shape", d.global_shape},
          {"dtype", std::string(to_string(d.dtype))},
          {"placement", to_string(d.placement)},
          {"role", std::string(role_name(d.role))}};
}

double percentile(const std::vector<double>& sorted, double q) {  // nearest rank
  if (sorted.empty()) return 0;
  size_t i = static_cast<size_t>(std::ceil(q * double(sorted.size()))) - (q > 0 ? 1 : 0);
  return sorted[std::min(i, sorted.size() - 1)];
}

}  // namespace

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

nlohmann::json describe_kind(const OpKind& kind, int group_size) {
  using nlohmann::json;
  return std::visit(
      [&](const auto& k) -> json {
        using K = std::decay_t<decltype(k)>;
        if constexpr (std::is_same_v<K, GemmOp>) {
          return {{"m", k.m},
                  {"n", k.n},
                  {"k", k.k},
                  {"a_dtype", std::string(to_string(k.a_dtype))},
                  {"b_dtype", std::string(to_string(k.b_dtype))},
                  {"c_dtype", std::string(to_string(k.c_dtype))},
                  {"trans_a", k.trans_a},
                  {"trans_b", k.trans_b},
                  {"accumulate", k.accumulate},
                  {"flops", k.flops()}};
        } else if constexpr (std::is_same_v<K, AttentionOp>) {
          return {{"batch", k.batch},           {"seq", k.seq},           {"n_heads", k.n_heads},
                  {"n_kv_heads", k.n_kv_heads}, {"head_dim", k.head_dim}, {"causal", k.causal},
                  {"backward", k.backward},     {"flops", k.flops()}};
        } else if constexpr (std::is_same_v<K, ElementwiseOp>) {
          return {{"fn", std::string(to_string(k.fn))}, {"bytes", k.bytes}, {"flops", k.flops}, {"dim", k.dim}};
        } else if constexpr (std::is_same_v<K, EmbeddingOp>) {
          return {{"tokens", k.tokens},
                  {"vocab_local", k.vocab_local},
                  {"dim_local", k.dim_local},
                  {"vocab_sharded", k.vocab_sharded},
                  {"backward", k.backward}};
        } else if constexpr (std::is_same_v<K, CrossEntropyOp>) {
          return {{"stage", std::string(to_string(k.stage))},
                  {"tokens", k.tokens},
                  {"vocab_local", k.vocab_local},
                  {"vocab_sharded", k.vocab_sharded}};
        } else if constexpr (std::is_same_v<K, CastFp8Op>) {
          return {{"stage", k.stage == CastFp8Op::Stage::amax ? "amax" : "cast"},
                  {"to", std::string(to_string(k.to))},
                  {"elements", k.elements},
                  {"rowwise", k.rowwise}};
        } else {
          return {{"collective", std::string(to_string(k.kind))},
                  {"group", std::string(to_string(k.group))},
                  {"group_size", group_size},
                  {"reduce", k.reduce == ReduceOp::sum ? "sum" : "max"},
                  {"dtype", std::string(to_string(k.dtype))},
                  {"bytes", k.bytes},
                  {"gather_dim", k.gather_dim},
                  {"scatter_dim", k.scatter_dim}};
        }
      },
      kind);
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

nlohmann::json profile_program(const Program& program, Backend& backend, const ProfileOptions& options) {
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

  using nlohmann::json;
  json j;
  j["format"] = "tptune-profile";
  j["version"] = 1;
  j["environment"] = environment_json(backend);
  j["program"] = program_identity(program);  // what `tp-plan simulate --measured` compares
  // The loss after the last step (null when it is not finite: the run diverged and its times mean little).
  j["final_loss"] = std::isfinite(loss) && !single ? nlohmann::json(loss) : nlohmann::json(nullptr);
  j["timing"] = {{"warmup", options.warmup}, {"iters", options.iters},     {"unit", "us"},
                 {"mode", "serialized"},     {"reduce_over_ranks", "max"}, {"step_wall_mode", "overlapped"}};
  {
    OpTiming w = summarize(walls);
    json wall = {{"median", w.median}, {"min", w.min}, {"p10", w.p10}, {"p90", w.p90}, {"max", w.max}};
    if (!single) {
      j["step_wall_us"] = wall;
      j["step_wall_samples_us"] = w.samples;
    } else {
      // No whole step ran: what was timed is rank 0's compute without its collectives. Named apart so that nothing
      // reads it as a step time.
      j["compute_wall_us"] = wall;
      j["compute_wall_samples_us"] = w.samples;
    }
  }
  if (single) {
    j["local_shapes_of_tp"] = program.tp;
    j["collectives"] = fmt::format(
        "not run: one process ran rank 0's compute ops at the local shapes of tp {}; the collectives need {} ranks, "
        "so their records say \"measured\": false and carry no time, and the tensor values (final_loss) mean nothing",
        program.tp, program.tp);
  }
  json ops = json::array();
  for (size_t i = 0; i < n_ops; ++i) {
    const FlatOp& f = flat.ops[i];
    const Op& op = *f.op;
    std::string segment;
    for (const Segment& s : ex.program().segments)  // FlatOp::op points into the executor's copy
      if (!s.ops.empty() && &op >= &s.ops.front() && &op <= &s.ops.back()) segment = s.name;
    json rec = {{"index", i},
                {"name", f.name},
                {"module", f.module},
                {"segment", segment},
                {"layer", f.layer},
                {"template_op", op.id},
                {"phase", std::string(to_string(op.phase))},
                {"kind", std::string(kind_name(op.kind))}};
    int gsize = 1;
    const auto* coll = std::get_if<CollectiveOp>(&op.kind);
    if (coll) gsize = single && coll->group == Group::tp ? program.tp : backend.group_size(coll->group);
    rec["op"] = describe_kind(op.kind, gsize);
    if (op.chunk.pattern != ChunkRef::Pattern::none)
      rec["chunk"] = {
          {"pattern", std::string(pattern_name(op.chunk.pattern))}, {"step", op.chunk.step}, {"count", op.chunk.count}};
    json ins = json::array(), outs = json::array();
    for (int t : f.inputs) ins.push_back(describe_tensor(flat, program, t));
    for (int t : f.outputs) outs.push_back(describe_tensor(flat, program, t));
    rec["inputs"] = ins;
    rec["outputs"] = outs;
    if (single && coll) {
      rec["measured"] = false;  // not run on one process (see "collectives")
      rec["time_us"] = nullptr;
    } else {
      OpTiming t = summarize(samples[i]);
      rec["time_us"] = {{"median", t.median}, {"min", t.min}, {"p10", t.p10}, {"p90", t.p90}, {"max", t.max}};
      rec["samples_us"] = t.samples;
    }
    ops.push_back(std::move(rec));
  }
  j["ops"] = std::move(ops);
  return j;
}

}  // namespace tptune
