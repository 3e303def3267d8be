#include "sim/memory.h"

#include <algorithm>
#include <variant>
#include <vector>

namespace tptune {

double tensor_bytes(const TensorDesc& t) {
  return static_cast<double>(numel(t.local_shape)) * bytes_per_element(t.dtype);
}

namespace {

bool is_state(const TensorDesc& d) { return d.role == TensorRole::parameter || d.role == TensorRole::optimizer_state; }

// Per-tensor facts memory_model() reads many times, by TensorId (the Program's tensors live in a deque; indexing it
// and recomputing numel() per use cost more than the model itself in the search).
struct TensorFacts {
  std::vector<double> bytes;  // tensor_bytes()
  std::vector<char> state;    // is_state()
  std::vector<char> per_layer;
};

// Peak over the ops of `seg` of the bytes of live tensors, skipping `exclude` and parameters / optimizer states.
// A tensor lives from its first write in the segment (from the start when it is read before being written: it comes
// from outside) to its last access (to the end when another segment or the next instance reads it).
// `escapes(t)`: another segment or the next instance reads t.
template <class Escapes>
double working_set(const TensorFacts& f, const Segment& seg, const std::vector<char>& exclude, Escapes escapes) {
  const int n = static_cast<int>(seg.ops.size());
  if (n == 0) return 0;
  const size_t nt = f.bytes.size();
  // Scratch reused across calls on this thread (the search models thousands of Programs; large temporaries cost more
  // in the allocator than the work).
  thread_local std::vector<int> first, last;
  thread_local std::vector<char> starts_outside;
  thread_local std::vector<double> delta;
  first.assign(nt, -1);
  last.assign(nt, -1);
  starts_outside.assign(nt, 0);
  for (int i = 0; i < n; ++i) {
    const Op& op = seg.ops[static_cast<size_t>(i)];
    for (TensorId t : op.inputs) {
      auto u = static_cast<size_t>(t);
      if (first[u] < 0) {
        first[u] = i;
        starts_outside[u] = 1;
      }
      last[u] = i;
    }
    for (TensorId t : op.outputs) {
      auto u = static_cast<size_t>(t);
      if (first[u] < 0) first[u] = i;
      last[u] = i;
    }
  }
  delta.assign(static_cast<size_t>(n) + 1, 0.0);
  for (size_t t = 0; t < nt; ++t) {
    if (first[t] < 0 || exclude[t] || f.state[t]) continue;
    int a = starts_outside[t] ? 0 : first[t];
    int b = escapes(t) ? n - 1 : last[t];
    double bytes = f.bytes[t];
    delta[static_cast<size_t>(a)] += bytes;
    delta[static_cast<size_t>(b) + 1] -= bytes;
  }
  double live = 0, peak = 0;
  for (int i = 0; i < n; ++i) {
    live += delta[static_cast<size_t>(i)];
    peak = std::max(peak, live);
  }
  return peak;
}

}  // namespace

MemoryParts memory_parts(const Program& p, const CostParams& c) {
  MemoryParts r;
  const double L = static_cast<double>(p.model.n_layers);
  const double dp = std::max(1, p.dp);
  const size_t nt = p.tensors.size();
  // Scratch reused across calls on this thread (see working_set()).
  thread_local TensorFacts facts;
  thread_local std::vector<int> reader, canonical;
  thread_local std::vector<char> chain_out, saved, saved_plain, written_fwd, recomputed, fwd_chain_in, exclude_fwd,
      none;
  facts.bytes.resize(nt);
  facts.state.resize(nt);
  facts.per_layer.resize(nt);

  // Model states: 16 B per element of the local TP shard, sharded over dp (fp32 master, fp32 grad, AdamW m, v).
  // A routed expert's parameters under expert parallelism are sharded over efsdp instead (Program::fsdp_degree).
  double elems = 0, expert_elems = 0, later_variant_params = 0;
  auto desc = p.tensors.begin();  // (an iterator: cheaper than indexing the deque)
  for (size_t t = 0; t < nt; ++t, ++desc) {
    const TensorDesc& d = *desc;
    const int64_t n = numel(d.local_shape);
    facts.bytes[t] = static_cast<double>(n) * bytes_per_element(d.dtype);  // tensor_bytes(d)
    facts.state[t] = is_state(d);
    facts.per_layer[t] = d.per_layer;
    if (d.role != TensorRole::parameter) continue;
    // (a block variant's per-layer tensor: in its layers only, TensorDesc::layer_count)
    (d.expert && p.ep > 1 ? expert_elems : elems) +=
        static_cast<double>(n) * (d.per_layer ? (d.layer_count > 0 ? d.layer_count : L) : 1.0);
    if (d.per_layer) (d.first_layer > 0 ? later_variant_params : r.block_params) += facts.bytes[t];
  }
  r.block_params = std::max(r.block_params, later_variant_params);  // block variants: the larger one's
  const double efsdp = std::max(1, p.efsdp);
  r.master_params = 4 * elems / dp + 4 * expert_elems / efsdp;
  r.gradients = 4 * elems / dp + 4 * expert_elems / efsdp;
  r.optimizer = 8 * elems / dp + 8 * expert_elems / efsdp;

  // The block backward: one segment, or two when a plan's ac_layers splits it (the blocks without recompute, then
  // the checkpointed ones; plans/program/program.h).
  // A dense-first mixture of experts has two block forwards (the dense blocks', then the MoE blocks') and two block
  // backwards (the MoE blocks', then the dense ones'), one per block variant.
  const Segment* fwd = p.segment(SegmentKind::block_fwd);
  const Segment* head = p.segment(SegmentKind::head);
  const Segment* bwd[2] = {nullptr, nullptr};
  const Segment* fwd2 = nullptr;
  for (const Segment& s : p.segments) {
    if (s.kind == SegmentKind::block_bwd) bwd[bwd[0] ? 1 : 0] = &s;
    if (s.kind == SegmentKind::block_fwd && &s != fwd) fwd2 = &s;
  }
  // Segments of one kind (the split backward) count as one reader: the same tensors, read by other layers.
  canonical.assign(p.segments.size(), 0);
  for (size_t s = 0; s < p.segments.size(); ++s) {
    canonical[s] = static_cast<int>(s);
    for (size_t e = 0; e < s; ++e)
      if (p.segments[e].kind == p.segments[s].kind) {
        canonical[s] = static_cast<int>(e);
        break;
      }
  }
  // The segment reading each tensor: -1 none, -2 several.
  reader.assign(nt, -1);
  for (size_t s = 0; s < p.segments.size(); ++s)
    for (const Op& op : p.segments[s].ops)
      for (TensorId t : op.inputs) {
        int& r = reader[static_cast<size_t>(t)];
        r = (r == -1 || r == canonical[s]) ? canonical[s] : -2;
      }
  chain_out.assign(nt, 0);
  for (const LayerChain& ch : p.chains) chain_out[static_cast<size_t>(ch.out)] = 1;

  // Saved activations of one block of a backward segment: what it reads that the forward wrote (or the block input
  // on the residual chain), unless its recompute ops write it again.
  if (fwd) {
    written_fwd.assign(nt, 0);
    for (const Segment* f : {fwd, fwd2})
      if (f)
        for (const Op& op : f->ops)
          for (TensorId t : op.outputs) written_fwd[static_cast<size_t>(t)] = 1;
    fwd_chain_in.assign(nt, 0);
    for (const LayerChain& ch : p.chains)
      if (written_fwd[static_cast<size_t>(ch.out)]) fwd_chain_in[static_cast<size_t>(ch.in)] = 1;
  }
  auto saved_by = [&](const Segment* b, std::vector<char>& out) {
    out.assign(nt, 0);
    double bytes = 0;
    if (!fwd || !b) return bytes;
    recomputed.assign(nt, 0);
    for (const Op& op : b->ops)
      if (op.phase == Phase::recompute)
        for (TensorId t : op.outputs) recomputed[static_cast<size_t>(t)] = 1;
    for (const Op& op : b->ops)
      for (TensorId t : op.inputs) {
        auto u = static_cast<size_t>(t);
        if (out[u] || !facts.per_layer[u] || facts.state[u] || recomputed[u]) continue;
        if (written_fwd[u] || fwd_chain_in[u]) out[u] = 1;
      }
    for (size_t t = 0; t < nt; ++t)
      if (out[t]) bytes += facts.bytes[t];
    return bytes;
  };
  r.saved_per_block = saved_by(bwd[0], saved_plain);
  r.blocks = bwd[0] ? segment_instances(p, *bwd[0]) : static_cast<int>(p.model.n_layers);
  if (bwd[1] && fwd2) {
    r.saved_per_dense_block = saved_by(bwd[1], saved);
    r.dense_blocks = segment_instances(p, *bwd[1]);
  } else if (bwd[1]) {
    r.saved_per_checkpointed_block = saved_by(bwd[1], saved);
    r.checkpointed_blocks = segment_instances(p, *bwd[1]);
  }

  // Working sets. In a block segment a tensor escapes when another segment reads it or it is on the residual chain
  // (the next layer reads it); the forward's chain output is the next layer's saved input, so it is excluded there.
  // The forward's last block (layer L-1) saves what the first backward segment reads.
  auto escapes_of = [&](const Segment* s) {
    const int si = canonical[static_cast<size_t>(s - p.segments.data())];
    return [si](size_t t) { return (reader[t] != -1 && reader[t] != si) || chain_out[t]; };
  };
  exclude_fwd.assign(saved_plain.begin(), saved_plain.end());
  for (size_t t = 0; t < nt; ++t)
    if ((chain_out[t] && fwd) || (fwd2 && saved[t])) exclude_fwd[t] = 1;  // (block variants: both saved sets)
  none.assign(nt, 0);
  r.ws_forward = fwd ? working_set(facts, *fwd, exclude_fwd, escapes_of(fwd)) : 0;
  if (fwd2) r.ws_forward = std::max(r.ws_forward, working_set(facts, *fwd2, exclude_fwd, escapes_of(fwd2)));
  r.ws_backward = bwd[0] ? working_set(facts, *bwd[0], saved_plain, escapes_of(bwd[0])) : 0;
  if (bwd[1] && fwd2)
    r.ws_dense_backward = working_set(facts, *bwd[1], saved, escapes_of(bwd[1]));
  else if (bwd[1])
    r.ws_checkpointed_backward = working_set(facts, *bwd[1], saved, escapes_of(bwd[1]));
  r.ws_head = head ? working_set(facts, *head, none, escapes_of(head)) : 0;

  // FSDP2's reduce-scatter input: foreach_reduce chunk_cats a unit's gradients into a reduce_dtype (fp32) buffer on
  // the compute stream and frees the gradients; the buffer is kept (FSDPCommContext.reduce_scatter_state) until the
  // next unit's post-backward waits for that reduce-scatter, so one unit's fp32 gradients stay alive through the
  // backward beside the Program's tensors.
  if (p.dp > 1 || (p.ep > 1 && p.efsdp > 1))
    for (const Segment& s : p.segments)
      for (const Op& op : s.ops)
        if (auto* col = std::get_if<CollectiveOp>(&op.kind); col &&
                                                             (col->group == Group::dp || col->group == Group::efsdp) &&
                                                             col->kind == CollectiveKind::reduce_scatter)
          r.fsdp_reduce_scatter_input = std::max(r.fsdp_reduce_scatter_input, static_cast<double>(col->bytes));

  // The head's own parameters (unsharded while it runs) and its logits.
  if (head) {
    none.assign(nt, 0);  // the head's parameters, each once, summed in TensorId order
    for (const Op& op : head->ops)
      for (TensorId t : op.inputs)
        if (p.tensor(t).role == TensorRole::parameter) none[static_cast<size_t>(t)] = 1;
    for (size_t t = 0; t < nt; ++t)
      if (none[t]) r.head_params += facts.bytes[t];
    if (p.model.tie_word_embeddings && p.dp > 1) r.resident_params = r.head_params;
    double logit_elems = 0;
    bool loss_parallel = false;
    for (const Op& op : head->ops)  // the logits: what the cross-entropy reads
      if (const auto* ce = std::get_if<CrossEntropyOp>(&op.kind); ce && !op.inputs.empty()) {
        r.logits = std::max(r.logits, tensor_bytes(p.tensor(op.inputs[0])));
        logit_elems = std::max(logit_elems, static_cast<double>(numel(p.tensor(op.inputs[0]).local_shape)));
        loss_parallel = loss_parallel || ce->vocab_sharded;
      }
    // torchtitan's fp32 loss (cross_entropy(pred.float(), ...)), per logit element at the loss backward's peak, on top
    // of the Program's bf16 logits and d_logits (2 + 2 bytes):
    //   aten (one rank holds the vocabulary): the saved fp32 log-probs, nll_loss's fp32 gradient and
    //   log_softmax_backward's fp32 output: 4 + 4 + 4 = 12 bytes, 8 beyond the Program's 4;
    //   loss_parallel (vocab-sharded DTensor; torch/distributed/tensor/parallel/loss.py,
    //   _nll_loss_and_log_softmax_backward): the saved fp32 log-probs, grad_input = zeros_like (4), exp(x) (4) and
    //   grad_input + exp(x) (4) live together before the product: 16 bytes, 12 beyond.
    if (c.loss_in_fp32) r.ws_head += (loss_parallel ? 12 : 8) * logit_elems;
  }
  return r;
}

MemoryReport memory_from_parts(const MemoryParts& m, const GpuSpec& gpu, const CostParams& c) {
  MemoryReport r;
  r.master_params = m.master_params;
  r.gradients = m.gradients;
  r.optimizer = m.optimizer;
  r.saved_per_block = m.saved_per_block;
  r.saved_per_checkpointed_block = m.saved_per_checkpointed_block;
  r.checkpointed_blocks = m.checkpointed_blocks;
  r.saved_per_dense_block = m.saved_per_dense_block;
  r.dense_blocks = m.dense_blocks;
  const double checkpointed = m.saved_per_checkpointed_block * m.checkpointed_blocks;
  const double dense = m.saved_per_dense_block * m.dense_blocks;
  r.activations = m.saved_per_block * m.blocks + checkpointed;
  if (m.dense_blocks > 0) r.activations += dense;
  r.logits = m.logits;
  // Parameters in flight: unsharded compute copies (the block being computed plus the prefetched ones; the head's
  // own parameters while it runs).
  const double in_flight = std::max(1, c.blocks_in_flight);
  struct Phase {
    const char* name;
    double saved, working, params;
  };
  // Every block's saved tensors are alive from the end of the forward until the backward reaches the checkpointed
  // blocks (the last to run backward), which then hold only their own.
  const Phase phases[] = {
      {"forward", r.activations, m.ws_forward, in_flight * m.block_params + m.resident_params},
      {"head", r.activations, m.ws_head, m.head_params + (in_flight - 1) * m.block_params},
      {"backward", r.activations, m.ws_backward + m.fsdp_reduce_scatter_input,
       in_flight * m.block_params + m.resident_params},
      {"backward", m.checkpointed_blocks > 0 ? checkpointed : 0.0,
       m.checkpointed_blocks > 0 ? m.ws_checkpointed_backward + m.fsdp_reduce_scatter_input : 0.0,
       m.checkpointed_blocks > 0 ? in_flight * m.block_params + m.resident_params : 0.0},
      // (block variants: the dense blocks' backward, the last; their own saved tensors)
      {"backward", m.dense_blocks > 0 ? dense : 0.0,
       m.dense_blocks > 0 ? m.ws_dense_backward + m.fsdp_reduce_scatter_input : 0.0,
       m.dense_blocks > 0 ? in_flight * m.block_params + m.resident_params : 0.0},
  };
  double best = -1;
  for (const Phase& ph : phases) {
    double v = ph.saved + ph.working + ph.params;
    if (v > best) {
      best = v;
      r.peak_phase = ph.name;
      r.working_set = ph.working;
      r.params_in_flight = ph.params;
    }
  }
  double tensors = r.model_states() + best;
  r.allocator_reserved = tensors * (1 + c.memory_fragmentation);
  r.runtime_overhead = c.memory_runtime_overhead_GiB * 1073741824.0 + c.memory_fragmentation * tensors;
  r.peak = tensors + r.runtime_overhead;
  r.capacity = gpu.memory_bytes();
  r.fits = r.peak <= r.capacity;
  return r;
}

MemoryReport memory_model(const Program& p, const GpuSpec& gpu, const CostParams& c) {
  return memory_from_parts(memory_parts(p, c), gpu, c);
}

}  // namespace tptune
