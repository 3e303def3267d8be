// Executor: buffers, initialization, the step loop and the completion of pending collectives.
#include "runtime/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "plans/util/checked_math.h"
#include "plans/util/error.h"
#include "runtime/ring/cp_layout.h"
#include "runtime/tensor_init.h"

namespace tptune {
namespace {

// The storage of a flat tensor's buffer, and whether it has an fp32 master copy too.
Storage buffer_storage(const TensorDesc& d, const std::function<Storage(DType)>& storage_for) {
  return d.role == TensorRole::input ? Storage::i32 : storage_for(d.dtype);
}
bool has_master(const TensorDesc& d, Storage st) { return d.role == TensorRole::parameter && st != Storage::f32; }

}  // namespace

int64_t executor_buffer_bytes(const Program& program, const std::function<Storage(DType)>& storage_for) {
  const FlatProgram flat = expand(program);
  int64_t bytes = 0;
  for (const FlatTensor& t : flat.tensors) {
    const TensorDesc& d = program.tensor(t.template_id);
    const Storage st = buffer_storage(d, storage_for);
    const int64_t n = numel(d.local_shape);
    bytes = checked_add(bytes, checked_mul(n, storage_bytes(st), "bytes of the step's buffers"),
                        "bytes of the step's buffers");
    if (has_master(d, st))
      bytes = checked_add(bytes, checked_mul(n, 4, "bytes of the master weights"), "bytes of the step's buffers");
  }
  return bytes;
}

Executor::Executor(Program program, Backend& backend, ExecutorOptions options)
    : program_(std::move(program)), be_(backend), options_(options) {
  flat_ = expand(program_);  // after program_ is in place: flat ops point into its segments
  rank_ = be_.group_rank(Group::tp);
  tp_ = be_.group_size(Group::tp);
  if (options_.local_shapes_of_tp > 0) {
    if (tp_ != 1)
      throw Error(fmt::format("executor: local shapes of tp {} run on one process, but the backend's TP group has {}",
                              options_.local_shapes_of_tp, tp_));
    tp_ = options_.local_shapes_of_tp;  // rank 0 of tp N: its shards, offsets and ring slots
  }
  if (tp_ != program_.tp)
    throw Error(fmt::format("executor: the Program is lowered for tp {} but the backend's TP group has {} ranks",
                            program_.tp, tp_));
  // Backends have a TP and a DP communicator, no HSDP replicate group: tp-run runs one replica (dp_replicate 1).
  if (program_.dp_replicate > 1)
    throw Error(
        fmt::format("executor: the Program has dp_replicate {} (HSDP), but the runtime runs one data-parallel "
                    "replica; lower it with dp_replicate 1",
                    program_.dp_replicate));
  // Context parallelism runs on the backend's CP group, FSDP's collectives on its DP group (dp_shard x cp).
  cp_ = program_.cp;
  if (cp_ > 1) {
    if (be_.group_size(Group::cp) != cp_)
      throw Error(fmt::format("executor: the Program is lowered for cp {} but the backend's CP group has {} ranks", cp_,
                              be_.group_size(Group::cp)));
    cp_rank_ = be_.group_rank(Group::cp);
    cp_positions_ = cp_positions(program_.training.seq_len, cp_, cp_rank_,
                                 program_.plan.cp_load_balance ? SeqLayout::head_tail : SeqLayout::contiguous);
  }
  if (program_.dp > 1 && !skips_collectives() && be_.group_size(Group::dp) != program_.dp)
    throw Error(
        fmt::format("executor: the Program shards FSDP over {} ranks (dp_shard x cp) but the backend's DP "
                    "group has {}",
                    program_.dp, be_.group_size(Group::dp)));
  if (program_.ep > 1 && !skips_collectives() && be_.group_size(Group::ep) != program_.ep)
    throw Error(fmt::format("executor: the Program is lowered for ep {} but the backend's ep group has {} ranks",
                            program_.ep, be_.group_size(Group::ep)));
  if (program_.ep > 1 && program_.efsdp > 1 && !skips_collectives() && be_.group_size(Group::efsdp) != program_.efsdp)
    throw Error(fmt::format("executor: the Program shards experts over efsdp {} but the backend's group has {} ranks",
                            program_.efsdp, be_.group_size(Group::efsdp)));
  moe_setup();  // executor_moe.cc: the routed rows' buffers hold what routing may send (before the allocation)
  buffers_.reserve(flat_.tensors.size());
  masters_.resize(flat_.tensors.size());
  for (size_t t = 0; t < flat_.tensors.size(); ++t) {
    const TensorDesc& d = desc(static_cast<int>(t));
    const Storage st = buffer_storage(d, [this](DType t) { return be_.storage_for(t); });
    buffers_.push_back(be_.alloc(numel(d.local_shape), st));
    if (has_master(d, st)) masters_[t] = be_.alloc(numel(d.local_shape), Storage::f32);
  }
  scratch_.resize(flat_.ops.size());
  if (skips_collectives()) {
    // Seeded outputs persist between seedings unless a compute op writes one too (an in-place accumulate).
    std::vector<char> seeded(flat_.tensors.size(), 0);
    for (const FlatOp& op : flat_.ops)
      if (op.op->is_collective())
        for (int t : op.outputs)  // in place (FSDP's gradient reduction): its producer rewrites it every step
          if (std::find(op.inputs.begin(), op.inputs.end(), t) == op.inputs.end()) seeded[size_t(t)] = 1;
    for (const FlatOp& op : flat_.ops)
      if (!op.op->is_collective())
        for (int t : op.outputs) seeding_persists_ = seeding_persists_ && !seeded[size_t(t)];
  }
  // A pipeline stage holds the tokens (the first), the targets and the loss (the last) only where it uses them.
  loss_ = program_.loss < 0 ? -1 : flat_of(program_.loss, -1);
  tokens_ = program_.tokens < 0 ? -1 : flat_of(program_.tokens, -1);
  targets_ = program_.targets < 0 ? -1 : flat_of(program_.targets, -1);
}

const TensorDesc& Executor::desc(int flat_tensor) const {
  return program_.tensor(flat_.tensors.at(static_cast<size_t>(flat_tensor)).template_id);
}

int Executor::flat_of(TensorId t, int layer) const {
  for (size_t i = 0; i < flat_.tensors.size(); ++i)
    if (flat_.tensors[i].template_id == t && flat_.tensors[i].layer == layer) return static_cast<int>(i);
  throw Error(fmt::format("executor: the Program has no flat tensor for tensor {} in layer {}", t, layer));
}

DevPtr Executor::ptr(int t) const {
  const Buffer& b = buffers_[size_t(t)];
  if (b.storage() == Storage::i32)
    throw Error(
        fmt::format("executor: tensor '{}' holds token ids where floats are expected", flat_.tensors[size_t(t)].fqn));
  return b.ptr();
}

float* Executor::stat(int t) const {
  float* p = buffers_[size_t(t)].f32();
  if (!p)
    throw Error(fmt::format("executor: tensor '{}' ({}) is read as fp32 statistics but is stored as {}",
                            flat_.tensors[size_t(t)].fqn, to_string(desc(t).dtype),
                            to_string(buffers_[size_t(t)].storage())));
  return p;
}

float* Executor::master(int t) const {
  const Buffer& m = masters_[size_t(t)];
  return m.empty() ? stat(t) : m.f32();
}

const int32_t* Executor::i32(int t) const {
  const int32_t* p = buffers_[size_t(t)].i32();
  if (!p)
    throw Error(fmt::format("executor: tensor '{}' is read as token ids but is not an input tensor",
                            flat_.tensors[size_t(t)].fqn));
  return p;
}

Buffer& Executor::scratch(int op, int which, int64_t n, Storage storage) {
  auto& v = scratch_[size_t(op)];
  if (v.size() <= size_t(which)) v.resize(size_t(which) + 1);
  Buffer& b = v[size_t(which)];
  if (b.empty() || b.numel() < n || b.storage() != storage) b = be_.alloc(n, storage);
  return b;
}

void Executor::fail(const FlatOp& op, const std::string& what) const {
  throw Error(fmt::format("{}: {}", op.name, what));
}

void Executor::init(uint64_t seed) {
  complete_all();
  step_ = 0;
  const int64_t vocab = program_.model.vocab_size;
  // A mixture of experts' expert_bias buffers (each router's second input): seeded like a 1-D bias, as a checkpoint
  // holds them mid-training (torchtitan starts them at zero), so that the routers' choice depends on them.
  std::vector<char> expert_bias(flat_.tensors.size(), 0);
  for (const FlatOp& f : flat_.ops)
    if (const auto* e = std::get_if<ElementwiseOp>(&f.op->kind);
        e && e->fn == ElementwiseOp::Fn::moe_router && f.inputs.size() == 2)
      expert_bias[size_t(f.inputs[1])] = 1;
  for (size_t i = 0; i < flat_.tensors.size(); ++i) {
    const int t = static_cast<int>(i);
    const TensorDesc& d = desc(t);
    const int64_t n = numel(d.local_shape);
    if (d.role == TensorRole::parameter) {
      const std::string name = layer_fqn(flat_.tensors[i].layer, d.param.empty() ? d.name : d.param);
      auto local = init_parameter_shard(seed, name, d.global_shape, d.param_shard_dim, tp_, rank_);
      if (d.expert && program_.ep > 1)  // a routed expert: ep rank r holds experts [r E/ep, (r+1) E/ep) (Shard(0))
        local = shard_of(local, d.global_shape, 0, program_.ep, be_.group_rank(Group::ep));
      if (static_cast<int64_t>(local.size()) != n)
        throw Error(fmt::format("parameter '{}': a {} shard of {} has {} elements, the Program's local shape {} has {}",
                                name, d.param_shard_dim, to_string(d.global_shape), local.size(),
                                to_string(d.local_shape), n));
      be_.upload(ptr(t), local.data(), n);
      if (!masters_[i].empty()) be_.upload(masters_[i].ptr(), local.data(), n);
    } else if (d.role == TensorRole::input) {
      std::vector<int32_t> local;
      if (cp_ > 1) {
        // This cp rank's rows of the full batch (b, seq): the same seeded values as the unsharded reference's.
        const int64_t b = program_.training.local_batch_size, seq = program_.training.seq_len;
        auto full = init_tokens(seed, d.name, {b, seq}, vocab);
        for (int64_t bb = 0; bb < b; ++bb)
          for (int64_t pos : cp_positions_) local.push_back(full[size_t(bb * seq + pos)]);
      } else {
        auto full = init_tokens(seed, d.name, d.global_shape, vocab);
        int dim = d.placement.is_shard() ? d.placement.normalized_dim(static_cast<int>(d.global_shape.size())) : -1;
        local = shard_of(full, d.global_shape, dim, tp_, rank_);
      }
      if (static_cast<int64_t>(local.size()) != n)
        throw Error(fmt::format("input '{}': local shape {} does not match {} of global shape {}", d.name,
                                to_string(d.local_shape), to_string(d.placement), to_string(d.global_shape)));
      be_.upload(buffers_[i].i32(), local.data(), n);
    } else if (expert_bias[i]) {
      be_.upload(ptr(t), init_parameter(seed, flat_.tensors[i].fqn, d.global_shape).data(), n);
    } else {
      be_.fill(ptr(t), n, 0.0f);
    }
  }
  be_.synchronize();
}

void Executor::run_in_turn(int index, Timer* timer, const OpTimeFn& on_op) {
  if (!on_op) {
    run_op(index, false);
    // Drive the progress of collectives in flight (MPI progresses non-blocking calls inside MPI calls only).
    for (auto& p : pending_) p.request->test();
    return;
  }
  be_.synchronize();
  timer->start();
  run_op(index, true);
  timer->stop();
  on_op(index, timer->elapsed_us());
}

void Executor::step(const OpTimeFn& on_op) {
  ++step_;
  options_.adamw.step = step_;
  std::unique_ptr<Timer> timer = on_op ? be_.make_timer() : nullptr;
  for (size_t i = 0; i < flat_.ops.size(); ++i) {
    const FlatOp& op = flat_.ops[i];
    // Without the optimizer, its phase still runs its collectives (the all-reduce of a Partial gradient that DTensor
    // without FSDP issues when the optimizer step reads it belongs to the step's gradients; the tokens-per-expert
    // sums); the expert_bias update has its own switch.
    if (op.op->phase == Phase::optimizer && !op.op->is_collective()) {
      const auto* e = std::get_if<ElementwiseOp>(&op.op->kind);
      const bool bias_update = e && e->fn == ElementwiseOp::Fn::moe_bias_update;
      if (bias_update ? !options_.update_expert_bias : !options_.run_optimizer) continue;
    }
    if (const size_t end = on_op ? i : adamw_run_end(i); end > i + 1) {  // AdamW per dtype group, not per parameter
      run_adamw_group(i, end);
      for (; i < end; ++i)
        if (after_op_) after_op_(static_cast<int>(i));
      --i;
      continue;
    }
    run_in_turn(static_cast<int>(i), timer.get(), on_op);
    if (after_op_) after_op_(static_cast<int>(i));
  }
  complete_all();
  be_.synchronize();
}

void Executor::run_ops(const std::function<bool(int op)>& keep, const OpTimeFn& on_op) {
  std::unique_ptr<Timer> timer = on_op ? be_.make_timer() : nullptr;
  for (size_t i = 0; i < flat_.ops.size(); ++i) {
    if (keep(static_cast<int>(i))) run_in_turn(static_cast<int>(i), timer.get(), on_op);
  }
  complete_all_but_sends();
  be_.synchronize();
}

SegmentKind Executor::segment_of(int op) const {
  const Op* o = flat_.ops.at(static_cast<size_t>(op)).op;
  for (const Segment& s : program_.segments)
    if (!s.ops.empty() && o >= s.ops.data() && o < s.ops.data() + s.ops.size()) return s.kind;
  throw Error(fmt::format("executor: flat op {} belongs to no segment", op));
}

void Executor::run_op(int index, bool eager) {
  const FlatOp& op = flat_.ops[size_t(index)];
  try {
    if (op.op->is_collective()) {
      if (skips_collectives()) {  // single-rank mode: not run (the profiler records it as not measured), seeded
        if (seeding_ || !seeding_persists_) seed_skipped_collective(index);
        return;
      }
      issue_collective(index, eager);
    } else {
      wait_conflicts(chunk_regions(index, false), chunk_regions(index, true));
      run_compute(index);
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // kernel preconditions (std::invalid_argument) and the like
    fail(op, e.what());
  }
}

namespace {
bool overlaps(int t1, int s1, int t2, int s2) { return t1 == t2 && (s1 < 0 || s2 < 0 || s1 == s2); }
}  // namespace

void Executor::wait_conflicts(const std::vector<Region>& reads, const std::vector<Region>& writes) {
  for (size_t k = 0; k < pending_.size();) {
    const Pending& p = pending_[k];
    bool conflict = false;
    for (const Region& r : reads)
      for (const Region& w : p.writes) conflict |= overlaps(r.tensor, r.slot, w.tensor, w.slot);
    for (const Region& w : writes) {
      for (const Region& pw : p.writes) conflict |= overlaps(w.tensor, w.slot, pw.tensor, pw.slot);
      for (const Region& pr : p.reads) conflict |= overlaps(w.tensor, w.slot, pr.tensor, pr.slot);
    }
    if (conflict)
      complete(k);  // removes entry k
    else
      ++k;
  }
}

void Executor::complete(size_t k) {
  Pending p = std::move(pending_[k]);
  pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(k));
  wait_request(p);
  if (p.finish) p.finish();
}

void Executor::wait_request(Pending& p) {
  try {
    p.request->wait();
  } catch (const Error& e) {
    if (p.op < 0) throw;
    fail(flat_.ops[size_t(p.op)], e.what());
  }
}

void Executor::complete_all() {
  while (!pending_.empty()) complete(0);
}

void Executor::complete_all_but_sends() {
  for (size_t k = 0; k < pending_.size();)
    if (pending_[k].transfer_send)
      ++k;
    else
      complete(k);
}

std::vector<float> Executor::read(int t) const {
  const Buffer& b = buffers_.at(size_t(t));
  std::vector<float> v(static_cast<size_t>(b.numel()));
  if (b.storage() == Storage::i32) {
    std::vector<int32_t> ids(v.size());
    be_.download(ids.data(), b.i32(), b.numel());
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(ids[i]);
  } else {
    be_.download(v.data(), b.ptr(), b.numel());
  }
  return v;
}

void Executor::write(int t, const std::vector<float>& values) {
  const Buffer& b = buffers_.at(size_t(t));
  if (static_cast<int64_t>(values.size()) != b.numel())
    throw Error(fmt::format("executor: writing {} values into '{}' of {} elements", values.size(),
                            flat_.tensors[size_t(t)].fqn, b.numel()));
  if (b.storage() == Storage::i32) {
    // Token ids index the embedding table: a kernel cannot throw for one out of range (kernels/cuda/embedding.h),
    // so they are checked here, where they come from the host.
    const int64_t vocab = program_.model.vocab_size;
    for (float v : values)
      if (!(v >= 0 && v < float(vocab)) || v != std::floor(v))
        throw Error(fmt::format("executor: writing '{}': token id {} is not in [0, {})", flat_.tensors[size_t(t)].fqn,
                                v, vocab));
    std::vector<int32_t> ids(values.begin(), values.end());
    be_.upload(b.i32(), ids.data(), b.numel());
  } else {
    be_.upload(b.ptr(), values.data(), b.numel());
    if (!masters_[size_t(t)].empty()) be_.upload(masters_[size_t(t)].ptr(), values.data(), b.numel());
  }
}

std::vector<Executor::Param> Executor::parameters() const {
  std::vector<Param> out;
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < flat_.tensors.size(); ++i) {
    const TensorDesc& d = desc(static_cast<int>(i));
    if (d.role != TensorRole::parameter) continue;
    std::string name = layer_fqn(flat_.tensors[i].layer, d.param.empty() ? d.name : d.param);
    index[name] = out.size();
    out.push_back({name, static_cast<int>(i), -1});
  }
  for (size_t i = 0; i < flat_.tensors.size(); ++i) {
    const TensorDesc& d = desc(static_cast<int>(i));
    if (d.role != TensorRole::param_grad) continue;
    auto it = index.find(layer_fqn(flat_.tensors[i].layer, d.param));
    if (it != index.end()) out[it->second].grad = static_cast<int>(i);
  }
  return out;
}

float Executor::loss() const {
  if (loss_ < 0) throw Error("executor: the Program computes no loss (a pipeline stage other than the last)");
  return read(loss_).at(0);
}

}  // namespace tptune
