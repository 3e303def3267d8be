#include "sim/report/explain.h"

#include <fmt/format.h>

#include <iterator>
#include <map>
#include <sstream>

#include "plans/lower/parameter_count.h"
#include "plans/util/checked_math.h"
#include "plans/util/text_table.h"
#include "plans/util/version.h"

namespace tptune {

namespace {

CollectiveRecord record_of(const Program& p, const Op& op, int layer) {
  const auto& c = std::get<CollectiveOp>(op.kind);
  CollectiveRecord r;
  const std::string module = op.module == "fsdp" ? "fsdp" : layer_fqn(layer, op.module);
  if (op.module == "fsdp") {
    // FSDP's all-gathers and reduce-scatters; under HSDP the all-reduce of this rank's fp32 reduce-scatter outputs
    r.tensor = c.group == Group::dp_replicate ? "gradient shards" : "parameters";
  } else if (!op.inputs.empty() || !op.outputs.empty()) {
    // what it sends, or for a receive (a pipeline stage's) what it writes; the gradient norm's and a mixture of
    // experts' token-count all-reduces over dp and dp_replicate name their own tensors
    const TensorDesc& t = p.tensor(op.inputs.empty() ? op.outputs[0] : op.inputs[0]);
    r.tensor = layer_fqn(t.per_layer ? layer : -1, t.name);
  } else {
    r.tensor = "parameters";
  }
  r.phase = op.phase;
  r.module = module;
  r.name = op.name;
  r.kind = c.kind;
  r.reduce = c.reduce;
  r.dtype = c.dtype;
  r.bytes = c.bytes;
  r.group = c.group;
  if (c.group == Group::tp && !op.outputs.empty())
    r.global_shape = p.tensor(op.outputs[0]).global_shape;
  else
    r.global_shape = {c.bytes / bytes_per_element(c.dtype)};
  return r;
}

const char* kKinds[] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p"};

std::string human_bytes(int64_t b) {
  if (b >= (int64_t{1} << 30)) return fmt::format("{:.2f} GiB", b / double(int64_t{1} << 30));
  if (b >= (1 << 20)) return fmt::format("{:.1f} MiB", b / double(1 << 20));
  if (b >= (1 << 10)) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{} B", b);
}

// Calls fn(record) for every collective of the step, every layer instantiated, in program order: one record at a
// time, so that nothing proportional to the number of layers is held.
template <class F>
void for_each_step_collective(const Program& p, F fn) {
  for (const Segment& s : p.segments) {
    const int n = segment_instances(p, s);
    for (int i = 0; i < n; ++i) {
      const int layer = instance_layer(p, s, i);
      for (const Op& op : s.ops)
        if (op.is_collective()) fn(record_of(p, op, layer));
    }
  }
}

// Count and bytes per (group, phase) over the whole step, from the block templates times the layer count (recompute
// counts as backward when `merge_recompute`).
using Totals = std::map<std::pair<std::string, std::string>, std::pair<int64_t, int64_t>>;
Totals step_totals(const Program& p, bool merge_recompute) {
  Totals totals;
  for (const Segment& s : p.segments) {
    const int64_t n = segment_instances(p, s);
    for (const Op& op : s.ops) {
      if (!op.is_collective()) continue;
      const auto& c = std::get<CollectiveOp>(op.kind);
      const Phase phase = merge_recompute && op.phase == Phase::recompute ? Phase::backward : op.phase;
      auto& t = totals[{std::string(to_string(c.group)), std::string(to_string(phase))}];
      t.first = checked_add(t.first, n, "collectives per step");
      t.second =
          checked_add(t.second, checked_mul(c.bytes, n, "collective bytes per step"), "collective bytes per step");
    }
  }
  return totals;
}

// A JSON string literal (what nlohmann::json's dump() writes for it: quotes, backslashes and control characters
// escaped, UTF-8 passed through).
void append_json_string(fmt::memory_buffer& out, std::string_view v) {
  out.push_back('"');
  for (char c : v) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (u < 0x20) {
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", u);
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
}

// One record as nlohmann::json would dump it (keys sorted), formatted directly: 10^7 records of a 10^6-layer step
// are written without building a json object each.
void append_record(fmt::memory_buffer& out, const CollectiveRecord& r) {
  fmt::format_to(std::back_inserter(out),
                 "{{\"bytes\":{},\"dtype\":\"{}\",\"global_shape\":[{}],\"group\":\"{}\",\"module\":", r.bytes,
                 to_string(r.dtype), fmt::join(r.global_shape, ","), to_string(r.group));
  append_json_string(out, r.module);
  fmt::format_to(std::back_inserter(out),
                 ",\"op\":\"{}\",\"phase\":\"{}\",\"reduce\":\"{}\",\"tensor\":", to_string(r.kind), to_string(r.phase),
                 r.reduce == ReduceOp::max ? "max" : "sum");
  append_json_string(out, r.tensor);
  out.push_back('}');
}

}  // namespace

std::vector<CollectiveRecord> step_collectives(const Program& p) {
  std::vector<CollectiveRecord> out;
  for_each_step_collective(p, [&](CollectiveRecord r) { out.push_back(std::move(r)); });
  return out;
}

const Segment* dense_block_forward(const Program& p) {
  const Segment* first = p.segment(SegmentKind::block_fwd);
  for (const Segment& s : p.segments)
    if (&s != first && s.kind == SegmentKind::block_fwd) return first;
  return nullptr;
}

namespace {
// The collectives of the block variant whose segments start at layer `first_layer` (forward, backward, optimizer).
std::vector<CollectiveRecord> variant_collectives(const Program& p, int first_layer) {
  std::vector<CollectiveRecord> out;
  for (SegmentKind kind : {SegmentKind::block_fwd, SegmentKind::block_bwd, SegmentKind::block_optimizer})
    for (const Segment& s : p.segments)
      if (s.kind == kind && s.first_layer == first_layer)
        for (const Op& op : s.ops)
          if (op.is_collective()) out.push_back(record_of(p, op, first_layer));
  return out;
}
}  // namespace

std::vector<CollectiveRecord> dense_block_collectives(const Program& p) {
  return dense_block_forward(p) ? variant_collectives(p, 0) : std::vector<CollectiveRecord>{};
}

const Segment* checkpointed_block_backward(const Program& p) {
  if (dense_block_forward(p)) return nullptr;  // (block variants: the second block.bwd is the dense blocks')
  const Segment* first = p.segment(SegmentKind::block_bwd);
  for (const Segment& s : p.segments)
    if (&s != first && s.kind == SegmentKind::block_bwd) return &s;
  return nullptr;
}

std::vector<CollectiveRecord> block_collectives(const Program& p) {
  if (const Segment* dense = dense_block_forward(p))  // block variants: the MoE blocks' (the layers after the dense)
    return variant_collectives(p, dense->layer_count);
  std::vector<CollectiveRecord> out;
  // The first block.bwd segment: every block, or with ac_layers the blocks without recompute (from layer k on).
  const Segment* bwd = p.segment(SegmentKind::block_bwd);
  const int layer = checkpointed_block_backward(p) && bwd ? bwd->first_layer : 0;
  for (const Segment* s : {p.segment(SegmentKind::block_fwd), bwd, p.segment(SegmentKind::block_optimizer)})
    if (s)
      for (const Op& op : s->ops)
        if (op.is_collective()) out.push_back(record_of(p, op, layer));
  return out;
}

std::vector<CollectiveRecord> checkpointed_block_collectives(const Program& p) {
  std::vector<CollectiveRecord> out;
  if (const Segment* s = checkpointed_block_backward(p))
    for (const Op& op : s->ops)
      if (op.is_collective()) out.push_back(record_of(p, op, s->first_layer));
  return out;
}

void write_explain_json(const Program& p, std::ostream& out, const nlohmann::json& extra) {
  nlohmann::json plan = {{"family", p.plan.family},
                         {"framework", std::string(to_string(p.plan.framework))},
                         {"loss_chunks", p.plan.chunks()},
                         {"float8", std::string(to_string(p.plan.float8))},
                         {"async_tp", p.plan.async_tp},
                         {"loss_parallel", p.plan.loss_parallel},
                         {"activation_checkpointing", std::string(to_string(p.plan.activation_checkpointing))},
                         {"local_batch_size", p.plan.local_batch_size}};
  if (p.plan.ac_layers > 0) plan["ac_layers"] = p.plan.ac_layers;  // only then: other documents read as before
  // TP collectives per phase of one block (recompute counts as backward).
  auto per_phase = [](const std::vector<CollectiveRecord>& rs, std::initializer_list<const char*> phases) {
    nlohmann::json per;
    for (const char* phase : phases) {
      nlohmann::json counts;
      for (const char* k : kKinds) counts[k] = 0;
      per[phase] = counts;
    }
    for (const auto& r : rs) {
      if (r.group != Group::tp) continue;
      const char* phase = r.phase == Phase::forward     ? "forward"
                          : r.phase == Phase::optimizer ? "optimizer"
                                                        : "backward";
      per[phase][std::string(to_string(r.kind))] = per[phase][std::string(to_string(r.kind))].get<int>() + 1;
    }
    return per;
  };
  const nlohmann::json per_block = per_phase(block_collectives(p), {"forward", "backward", "optimizer"});
  std::map<std::string, std::pair<int64_t, int64_t>> per_group;
  for (const auto& [key, v] : step_totals(p, false)) {
    auto& g = per_group[key.first];
    g.first += v.first;
    g.second = checked_add(g.second, v.second, "collective bytes per step");
  }
  nlohmann::json step;
  for (const char* g : {"tp", "dp"}) step[g] = {{"count", per_group[g].first}, {"bytes", per_group[g].second}};
  if (p.dp_replicate > 1)  // HSDP plans only: other plans' documents read as before
    step["dp_replicate"] = {{"count", per_group["dp_replicate"].first}, {"bytes", per_group["dp_replicate"].second}};
  if (p.cp > 1)  // likewise context-parallel plans only: ring attention's K/V and dK/dV transfers
    step["cp"] = {{"count", per_group["cp"].first}, {"bytes", per_group["cp"].second}};

  // The collectives list is written one record at a time; the small parts around it with nlohmann::json.
  out << "{\n  \"tp_degree\": " << p.tp << ",\n  \"dp_shard\": " << p.dp / p.cp;
  if (p.dp_replicate > 1) out << ",\n  \"dp_replicate\": " << p.dp_replicate;
  if (p.cp > 1)
    out << ",\n  \"cp_degree\": " << p.cp << ",\n  \"cp_rotate_method\": \"" << to_string(p.plan.cp_rotate)
        << "\",\n  \"cp_load_balance\": " << (p.plan.cp_load_balance ? "true" : "false");
  if (p.plan.ep_degree > 1) out << ",\n  \"ep_degree\": " << p.plan.ep_degree;
  const ParameterCount params = parameter_count(p);
  out << ",\n  \"plan\": " << plan.dump() << ",\n  \"parameters\": {\"per_gpu\":" << params.per_rank
      << ",\"total\":" << params.total;
  if (!params.per_pp_rank.empty())  // PP plans only: each pp rank's (per_gpu is the largest)
    out << ",\"per_pp_rank\":" << nlohmann::json(params.per_pp_rank).dump();
  out << "}"
      << ",\n  \"collectives\": [";
  bool first = true;
  fmt::memory_buffer buf;
  for_each_step_collective(p, [&](const CollectiveRecord& r) {
    buf.append(std::string_view(first ? "\n    " : ",\n    "));
    append_record(buf, r);
    first = false;
    if (buf.size() > (1 << 16)) {  // flush in 64 KiB pieces: memory stays bounded
      out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
      buf.clear();
    }
  });
  out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
  out << (first ? "]" : "\n  ]") << ",\n  \"per_block\": " << per_block.dump();
  if (checkpointed_block_backward(p))
    out << ",\n  \"per_checkpointed_block\": " << per_phase(checkpointed_block_collectives(p), {"backward"}).dump();
  if (dense_block_forward(p))
    out << ",\n  \"per_dense_block\": "
        << per_phase(dense_block_collectives(p), {"forward", "backward", "optimizer"}).dump();
  out << ",\n  \"per_step\": " << step.dump();
  if (extra.is_object())
    for (const auto& [key, value] : extra.items()) out << ",\n  " << nlohmann::json(key).dump() << ": " << value.dump();
  out << ",\n  \"" << kVersionStampKey << "\": " << version_stamp().dump() << "\n}\n";
}

nlohmann::json explain_json(const Program& p) {
  std::ostringstream out;
  write_explain_json(p, out);
  return nlohmann::json::parse(out.str());
}

std::string explain_text(const Program& p) {
  std::string out;
  auto line = [&](const std::string& s) { out += s + "\n"; };
  const Model& m = p.model;
  line(
      fmt::format("Plan {} (tp {}, dp_shard {}{}, float8 {}, async_tp {}, loss_parallel {}, AC {}) on {} "
                  "({} layers, dim {}, {} heads / {} kv, ffn {}, vocab {}), seq {} x local batch {}{}",
                  p.plan.family, p.tp, p.dp / p.cp,
                  (p.cp > 1 ? fmt::format(", cp {}", p.cp) : std::string()) +
                      (p.dp_replicate > 1 ? fmt::format(", dp_replicate {}", p.dp_replicate) : std::string()) +
                      (p.plan.ep_degree > 1 ? fmt::format(", ep {}", p.plan.ep_degree) : std::string()),
                  to_string(p.plan.float8), p.plan.async_tp ? "on" : "off", p.plan.loss_parallel ? "on" : "off",
                  ac_text(p.plan.activation_checkpointing, p.plan.ac_layers, m.n_layers), m.name, m.n_layers, m.dim,
                  m.n_heads, m.n_kv_heads, m.ffn_dim, m.vocab_size, p.training.seq_len, p.training.local_batch_size,
                  p.plan.gradient_accumulation_steps > 1
                      ? fmt::format(" x {} microbatches (gradient accumulation: the collectives below are one "
                                    "microbatch's, the optimizer's once per step)",
                                    p.plan.gradient_accumulation_steps)
                      : ""));
  const ParameterCount params = parameter_count(p);
  line(fmt::format("Parameters: {} in the model, {} per GPU ({})", with_thousands(params.total),
                   with_thousands(params.per_rank), shard_text(params, p.tp, p.dp / p.cp, p.cp)));
  auto table = [&](const std::vector<CollectiveRecord>& rs) {
    // Each column as wide as its longest cell (plans/util/text_table.h): a long module or tensor name never shifts the
    // columns after it.
    TextTable t({{"phase", 10},
                 {"module", 32},
                 {"op", 15},
                 {"tensor", 40},
                 {"dtype", 9},
                 {"global shape", 18},
                 {"bytes", 10, Align::right},
                 {"group", 0, Align::left, 2}});
    for (const auto& r : rs)
      t.row({std::string(to_string(r.phase)), r.module,
             std::string(to_string(r.kind)) + (r.reduce == ReduceOp::max ? "(max)" : ""), r.tensor,
             std::string(to_string(r.dtype)), to_string(r.global_shape), human_bytes(r.bytes),
             std::string(to_string(r.group))});
    out += t.str("  ");
    if (rs.empty()) line("  (none)");
  };
  line("");
  const Segment* ckpt = checkpointed_block_backward(p);
  if (const Segment* dense = dense_block_forward(p)) {
    // A dense-first mixture of experts: blocks k .. L-1 are MoE blocks, blocks 0 .. k-1 keep a dense MLP.
    const int k = dense->layer_count;
    line(fmt::format("One MoE block (layers.{}; layers {} to {} are the same):", k, k, m.n_layers - 1));
    table(block_collectives(p));
    line(
        fmt::format("One dense block (layers.0; {}: model.moe.dense_layers {}, a dense MLP of ffn {} before the MoE "
                    "blocks):",
                    k == 1 ? std::string("the only one") : fmt::format("layers 0 to {} are the same", k - 1),
                    m.moe.dense_layers, m.ffn_dim));
    table(dense_block_collectives(p));
  } else if (!ckpt) {
    line("One transformer block (layers.0; every layer is the same):");
    table(block_collectives(p));
  } else {
    // ac_layers = k: blocks k .. L-1 save every activation, blocks 0 .. k-1 recompute in their backward.
    const int k = ckpt->layer_count;
    line(
        fmt::format("One transformer block without activation checkpointing (layers.{}; layers {} to {} are the same, "
                    "they save every activation):",
                    k, k, m.n_layers - 1));
    table(block_collectives(p));
    line(
        fmt::format("Backward of a checkpointed block (layers.0; layers 0 to {} are the same: AC {} recomputes their "
                    "forward first; their forward is the one above):",
                    k - 1, to_string(p.plan.activation_checkpointing)));
    table(checkpointed_block_collectives(p));
  }
  bool at_optimizer = false;
  for_each_step_collective(p, [&](const CollectiveRecord& r) {
    // (a mixture of experts' tokens-per-expert all-reduce over tp, with EP, is no gradient's)
    at_optimizer |=
        r.phase == Phase::optimizer && r.group == Group::tp && r.name.find("tokens_per_expert") == std::string::npos;
  });
  bool norm_grad_in_backward = false;  // sequence-parallel norms only: replicated norms have no Partial gradient
  for (const auto& r : block_collectives(p))
    norm_grad_in_backward |= r.phase == Phase::backward && r.kind == CollectiveKind::all_reduce &&
                             r.module.ends_with("norm") && r.group == Group::tp;
  if (at_optimizer)
    line(
        fmt::format("  (optimizer: no FSDP wraps the model (dp_shard {}), so the Partial gradients of the sequence-"
                    "parallel norm weights stay Partial through backward; DTensor all-reduces them when the "
                    "optimizer step reads them)",
                    p.dp));
  else if (norm_grad_in_backward && p.plan.fsdp_always && p.tp > 1 && p.dp <= 1)
    line(
        "  (the norm-weight gradient all-reduces in backward are FSDP's post-backward: parallelize_llama applies "
        "fully_shard even on a data-parallel mesh of 1)");
  if (p.plan.chunks() > 1)
    line(
        fmt::format("  (loss: ChunkedLossWrapper with {} chunks, each a vocab-parallel cross-entropy with its own 3 "
                    "all-reduces over its [batch, seq / {}] rows)",
                    p.plan.chunks(), p.plan.chunks()));
  if (p.dp_replicate > 1)
    line(fmt::format(
        "  (HSDP, dp_replicate {}: parameters are sharded over dp_shard {} and replicated over {} replicas; after "
        "each FSDP gradient reduce-scatter{}, FSDP2 all-reduces this rank's fp32 gradient shard across the "
        "replicas (group dp_replicate: ranks {} apart), on its own stream, overlapping the next block's backward)",
        p.dp_replicate, p.dp, p.dp_replicate, p.dp > 1 ? "" : " (a local copy at dp_shard 1)",
        static_cast<int64_t>(p.tp) * p.dp));
  if (p.cp > 1) {
    const bool ring = p.plan.cp_rotate == CpRotate::alltoall;
    line(fmt::format(
        "  (context parallelism, cp {}: each rank holds {} of the {} tokens of a sequence ({}), so every token-wise op "
        "and activation is 1/{}; attention is torch's ring over the cp group (ranks {} apart): {}, {} attention "
        "blocks per direction, {}; backward rotates K/V again and passes the fp32 dK/dV accumulators around the ring "
        "({} p2p); FSDP shards over dp_shard {} x cp {} = {} ranks)",
        p.cp, p.local_seq_len(), p.training.seq_len,
        p.plan.cp_load_balance ? "its head and tail chunks: load-balanced" : "one contiguous chunk: not balanced", p.cp,
        p.tp,
        ring
            ? fmt::format("K/V passed to the next rank in {} p2p steps, each overlapping the block before it", p.cp - 1)
            : "K/V all-gathered once, overlapping only the diagonal block",
        p.cp,
        p.plan.cp_load_balance
            ? fmt::format("each rank's attention FLOPs the causal total / {}", p.cp)
            : fmt::format("rank {} computes the most ({} whole blocks beside the diagonal)", p.cp - 1, p.cp - 1),
        p.cp, p.dp / p.cp, p.cp, p.dp));
  }
  line("");
  line("Top-level modules (embedding, final norm, output, loss) and FSDP traffic outside the blocks:");
  std::vector<CollectiveRecord> top;
  for (const Segment& s : p.segments) {
    if (is_block(s.kind)) continue;
    for (const Op& op : s.ops)
      if (op.is_collective()) top.push_back(record_of(p, op, -1));
  }
  table(top);
  line("");
  line("Per step (every layer):");
  const int gw = p.dp_replicate > 1 ? 12 : 6;  // "dp_replicate" (HSDP plans only: other tables read as before)
  line(fmt::format("  {:<{}} {:<10} {:>7} {:>12}", "group", gw, "phase", "count", "bytes"));
  for (const auto& [k, v] : step_totals(p, true))
    line(fmt::format("  {:<{}} {:<10} {:>7} {:>12}", k.first, gw, k.second, v.first, human_bytes(v.second)));
  return out;
}

std::vector<TransferRecord> pipeline_transfers(const std::vector<Program>& stages,
                                               const std::vector<PipelineStageSpan>& spans) {
  std::vector<TransferRecord> out;
  for (size_t s = 0; s < stages.size(); ++s)
    for (const Segment& seg : stages[s].segments) {
      if (!is_pipeline_transfer(seg.kind)) continue;
      for (const Op& op : seg.ops) {
        const auto& c = std::get<CollectiveOp>(op.kind);
        TransferRecord r;
        r.stage = static_cast<int>(s);
        r.pp_rank = spans.at(s).rank;
        r.op = op.name;
        r.send = op.outputs.empty();
        const TensorDesc& t = stages[s].tensor(r.send ? op.inputs.at(0) : op.outputs.at(0));
        r.tensor = t.name;
        r.phase = op.phase;
        r.dtype = t.dtype;
        r.local_shape = t.local_shape;
        r.bytes = c.bytes;
        r.peer_stage = c.peer_stage;
        r.peer_rank = c.peer;
        out.push_back(std::move(r));
      }
    }
  return out;
}

std::string pipeline_transfers_text(const std::vector<TransferRecord>& transfers) {
  TextTable t({{"stage", 5},
               {"pp rank", 7},
               {"op", 11, Align::left, 2},
               {"tensor", 22, Align::left, 2},
               {"dtype", 5, Align::left, 2},
               {"local shape", 12, Align::left, 2},
               {"bytes", 9, Align::right, 2},
               {"peer", 0, Align::left, 2}});
  for (const TransferRecord& r : transfers)
    t.row({std::to_string(r.stage), std::to_string(r.pp_rank), r.op, r.tensor, std::string(to_string(r.dtype)),
           to_string(r.local_shape), human_bytes(r.bytes),
           fmt::format("{} stage {} (pp rank {}{})", r.send ? "to" : "from", r.peer_stage, r.peer_rank,
                       r.peer_rank == r.pp_rank ? ", this rank: a local hand-over" : "")});
  return "  transfers of each stage's Program, per microbatch (this tp rank's shard; plans/pipeline_stage.h):\n" +
         t.str("    ");
}

nlohmann::json pipeline_transfers_json(const std::vector<TransferRecord>& transfers) {
  nlohmann::json out = nlohmann::json::array();
  for (const TransferRecord& r : transfers)
    out.push_back({{"stage", r.stage},
                   {"pp_rank", r.pp_rank},
                   {"op", r.op},
                   {"phase", std::string(to_string(r.phase))},
                   {"tensor", r.tensor},
                   {"dtype", std::string(to_string(r.dtype))},
                   {"local_shape", r.local_shape},
                   {"bytes", r.bytes},
                   {r.send ? "to" : "from", {{"stage", r.peer_stage}, {"pp_rank", r.peer_rank}}}});
  return out;
}

}  // namespace tptune
