#include "sim/search/constraints.h"

#include <fmt/format.h>

#include <cctype>

#include "plans/language/pipeline_parallel.h"

namespace tptune {

namespace {

// A mixture-of-experts candidate: what plans/lower/input_checks.cc (check_moe) and check_expert_mesh()
// (plans/language/expert_parallel.h) refuse for every plan family (the MoE styles are torchtitan's, not the family's).
Verdict check_moe(const Model& m, const Candidate& c, bool with_detail) {
  auto fail = [with_detail](PruneReason reason, auto&& detail) {
    return with_detail ? Verdict{reason, detail()} : Verdict{reason, {}};
  };
  const int tp = c.tp_degree, ep = c.ep_degree;
  if (ep < 1 || m.moe.experts % ep)
    return fail(PruneReason::ep_experts, [&] { return fmt::format("ep {} vs {} experts", ep, m.moe.experts); });
  // dp_shard x cp x tp <= world <= 2^20: no overflow.
  const int64_t dense = int64_t{c.dp_shard} * c.cp_degree * tp;
  if (dense % ep)
    return fail(PruneReason::ep_mesh, [&] {
      return fmt::format("ep {} vs dp_shard {} x cp {} x tp {} = {}", ep, c.dp_shard, c.cp_degree, tp, dense);
    });
  if (c.async_tp && tp > 1)
    return fail(PruneReason::moe_async_tp, [&] { return fmt::format("async TP at tp {}", tp); });
  if (c.float8 == Float8Recipe::tensorwise)
    return fail(PruneReason::moe_float8, [&] { return std::string("float8 tensorwise"); });
  if (ep == 1 && tp > 1 && m.moe.expert_ffn_dim % tp)
    return fail(PruneReason::expert_ffn,
                [&] { return fmt::format("tp {} vs expert_ffn_dim {}", tp, m.moe.expert_ffn_dim); });
  if (tp > 1 && m.moe.shared_ffn_dim % tp)
    return fail(PruneReason::shared_ffn,
                [&] { return fmt::format("tp {} vs shared_ffn_dim {}", tp, m.moe.shared_ffn_dim); });
  if (ep > 1 && tp > 1 && (c.seq_len / c.cp_degree) % tp)
    return fail(PruneReason::moe_router_tokens, [&] {
      return fmt::format("tp {} vs seq_len {} / cp {} = {} tokens", tp, c.seq_len, c.cp_degree,
                         c.seq_len / c.cp_degree);
    });
  return {};
}

}  // namespace

Verdict check_static(const Config& cfg, const ClusterSpec& cluster, const ResolvedSpace& s, const Candidate& c,
                     bool with_detail) {
  // The detail is formatted only when asked for: the search drops statically pruned candidates (most of a large space)
  // and rebuilds one's detail when it is read.
  auto fail = [with_detail](PruneReason reason, auto&& detail) {
    return with_detail ? Verdict{reason, detail()} : Verdict{reason, {}};
  };
  const Model& m = cfg.model;
  const int tp = c.tp_degree, gpn = cluster.domain_gpus();  // TP stays inside an NVLink domain
  if (tp <= 0 || s.world_size % tp != 0)
    return fail(PruneReason::world, [&] { return fmt::format("tp {} vs {} GPUs", tp, s.world_size); });
  if (c.dp_shard <= 0)
    return fail(c.dp_replicate > 1 ? PruneReason::replicate_world : PruneReason::world, [&] {
      return c.cp_degree > 1 ? fmt::format("tp {} x cp {} x dp_replicate {} vs {} GPUs", tp, c.cp_degree,
                                           c.dp_replicate, s.world_size)
                             : fmt::format("tp {} x dp_replicate {} vs {} GPUs", tp, c.dp_replicate, s.world_size);
    });
  // local batch (<= 2^16) x dp_shard x dp_replicate (their product <= world <= 2^20): no overflow.
  const int64_t global = c.local_batch_size * c.dp_shard * c.dp_replicate;
  if (s.gradient_accumulation && s.global_batch_size > 0 && s.global_batch_size % global != 0)
    return fail(PruneReason::global_batch_multiple, [&] {
      return fmt::format("global_batch_size {} vs local batch {} x dp {} x dp_replicate {} = {}", s.global_batch_size,
                         c.local_batch_size, c.dp_shard, c.dp_replicate, global);
    });
  if (!s.gradient_accumulation && s.global_batch_size > 0 && global != s.global_batch_size)
    return fail(PruneReason::global_batch, [&] {
      return c.dp_replicate > 1
                 ? fmt::format("local batch {} x dp {} x dp_replicate {} = {} vs global_batch_size {}",
                               c.local_batch_size, c.dp_shard, c.dp_replicate, global, s.global_batch_size)
                 : fmt::format("local batch {} x dp {} = {} vs global_batch_size {}", c.local_batch_size, c.dp_shard,
                               global, s.global_batch_size);
    });
  if (tp % gpn != 0 && gpn % tp != 0)
    return fail(PruneReason::straddle, [&] {
      return fmt::format("tp {} vs {} GPUs per {}", tp, gpn, cluster.nvlink_domain_gpus > 0 ? "NVLink domain" : "node");
    });
  const PlanFamily& family = s.families.at(static_cast<size_t>(c.family));
  const bool fsdp_always = family.preset ? s.framework != "dtensor" : family.file_plan.fsdp_always;
  if (c.dp_replicate > 1 && c.dp_shard == 1 && !fsdp_always)
    return fail(PruneReason::replicate_ddp,
                [&] { return fmt::format("dp_replicate {} x dp_shard 1: torchtitan applies DDP", c.dp_replicate); });
  if (c.cp_degree > 1) {
    // torchtitan's trainer: seq_len % ((tp with sequence parallel, else 1) x 2 cp) under the head-tail balancer.
    const PlanFamily& f = s.families.at(static_cast<size_t>(c.family));
    const int64_t sp = tp > 1 && f.sequence_parallel ? tp : 1;
    const int64_t chunks = (c.cp_load_balance ? 2 : 1) * int64_t{c.cp_degree} * sp;
    if (c.seq_len % chunks)
      return fail(PruneReason::cp_seq, [&] { return fmt::format("seq_len {} vs {}", c.seq_len, chunks); });
  }
  if (c.float8 != Float8Recipe::none && !cluster.gpu.has_float8())
    return fail(PruneReason::float8_gpu,
                [&] { return fmt::format("{} has no float8 tensor cores", cluster.gpu.name); });
  const PlanFamily& fam = s.families.at(static_cast<size_t>(c.family));
  if (tp > 1 && fam.preset) {
    // What both presets shard over tp: heads (wq/wk/wv colwise, wo rowwise), the MLP hidden dim (w1/w3 colwise, w2
    // rowwise), the vocabulary (tok_embeddings rowwise on rows, output colwise on its vocab outputs).
    if (m.n_heads % tp)
      return fail(PruneReason::heads, [&] { return fmt::format("tp {} vs n_heads {}", tp, m.n_heads); });
    if (m.n_kv_heads % tp)
      return fail(PruneReason::kv_heads, [&] { return fmt::format("tp {} vs n_kv_heads {}", tp, m.n_kv_heads); });
    if (m.moe.experts == 0 && m.ffn_dim % tp)  // (a MoE model's blocks have no dense MLP: check_moe() below)
      return fail(PruneReason::ffn, [&] { return fmt::format("tp {} vs ffn_dim {}", tp, m.ffn_dim); });
    if (m.vocab_size % tp)
      return fail(PruneReason::vocab, [&] { return fmt::format("tp {} vs vocab_size {}", tp, m.vocab_size); });
    if (fam.sequence_parallel && c.seq_len % tp)  // the candidate's (search.seq_lens), not training.seq_len
      return fail(PruneReason::seq, [&] { return fmt::format("tp {} vs seq_len {}", tp, c.seq_len); });
    if (c.async_tp && !fam.sequence_parallel)
      return fail(PruneReason::async_needs_sp,
                  [&] { return fmt::format("plan family {} has no sequence-parallel collectives", fam.name); });
  }
  if (c.pp_degree > 1) {
    const int spr = c.pp_stages_per_rank > 0 ? c.pp_stages_per_rank : default_stages_per_rank(c.pp_schedule);
    const StagePlacement placement = stage_placement(c.pp_schedule);
    if ((placement == StagePlacement::single && spr != 1) || (placement == StagePlacement::v && spr != 2) ||
        (placement == StagePlacement::looped && spr < 2))
      return fail(PruneReason::pp_stages_schedule,
                  [&] { return fmt::format("{} with {} stages per rank", to_string(c.pp_schedule), spr); });
    const int64_t stages = int64_t{c.pp_degree} * spr;  // each at most 2^20: no overflow
    const int64_t effective = m.n_layers + c.pp_first_stage_less_layers + c.pp_last_stage_less_layers;
    if (stages > effective)
      return fail(PruneReason::pp_stages_layers, [&] {
        return fmt::format("pp {} x {} stages per rank = {} stages vs {} effective layers", c.pp_degree, spr, stages,
                           effective);
      });
  }
  if (m.moe.experts > 0)
    if (Verdict v = check_moe(m, c, with_detail); !v.ok()) return v;
  if (tp == 1) {
    Candidate rep = tp1_representative(s, c);
    if (rep.family != c.family || rep.async_tp != c.async_tp || rep.loss_parallel != c.loss_parallel)
      return fail(PruneReason::redundant, [&] {
        return fmt::format("same program as tp 1 {} async_tp={} loss_parallel={}",
                           s.families.at(static_cast<size_t>(rep.family)).name, rep.async_tp, rep.loss_parallel);
      });
  }
  return {};
}

Candidate tp1_representative(const ResolvedSpace& s, const Candidate& c) {
  if (c.tp_degree != 1) return c;
  Candidate r = c;
  r.family = 0;
  r.async_tp = s.async_tp.front();
  const PlanFamily& f0 = s.families.front();
  r.loss_parallel = f0.preset ? s.loss_parallel.front() : f0.file_plan.loss_parallel;
  if (r.family == c.family && r.async_tp == c.async_tp && r.loss_parallel == c.loss_parallel) return c;
  r.index = -1;  // the caller looks it up
  return r;
}

PruneCause error_reason(PruneReason stage, const std::string& message, const std::string& plan_source) {
  std::string m = message;
  if (!plan_source.empty() && m.rfind(plan_source + ": ", 0) == 0) m = m.substr(plan_source.size() + 2);
  // Keep "<module>: <first clause>", or just the first clause when the message does not start with a module FQN
  // (an FQN has no spaces) or a pipeline schedule's name (sim/pipeline/schedule.h's errors).
  size_t first = m.find(": ");
  if (first != std::string::npos) {
    const bool module = m.substr(0, first).find(' ') == std::string::npos || m.rfind("pipeline schedule ", 0) == 0;
    size_t cut = module ? m.find(": ", first + 2) : first;
    if (cut != std::string::npos) m = m.substr(0, cut);
  }
  // Numbers become N so that causes group; a word with letters ("1F1B", "h100", "fp8_e4m3") stays as it is.
  auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  std::string out;
  for (size_t i = 0; i < m.size();) {
    size_t end = i;
    while (end < m.size() && word_char(m[end])) ++end;
    if (end == i) {
      out += m[i++];
      continue;
    }
    bool letters = false;
    for (size_t k = i; k < end; ++k) letters |= std::isalpha(static_cast<unsigned char>(m[k])) || m[k] == '_';
    if (letters) {
      out.append(m, i, end - i);
      i = end;
      continue;
    }
    // A number, with its decimal part when a digit follows the point.
    out += 'N';
    i = end;
    while (i + 1 < m.size() && m[i] == '.' && std::isdigit(static_cast<unsigned char>(m[i + 1]))) {
      ++i;
      while (i < m.size() && std::isdigit(static_cast<unsigned char>(m[i]))) ++i;
    }
  }
  return PruneCause(stage, std::move(out));
}

}  // namespace tptune
