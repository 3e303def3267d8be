#include "plans/lower/input_checks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "plans/language/context_parallel.h"
#include "plans/language/expert_parallel.h"
#include "plans/language/module_names.h"
#include "plans/lower/lower.h"
#include "plans/util/checked_math.h"
#include "plans/util/error.h"
#include "plans/util/limits.h"

namespace tptune {

namespace {

__int128 max_flops_wide() { return std::numeric_limits<int64_t>::max(); }

// Each quantity is in range, but their products need not be: the largest tensors and FLOP counts of the step,
// computed exactly (128-bit), must stay within limits::max_tensor_elements and int64, or the error names the keys.
void check_sizes(const Model& m, const Training& t, const Plan& plan) {
  using Wide = __int128;
  const Wide b = plan.local_batch_size, s = t.seq_len, tokens = b * s;
  // The messages are formatted only to be thrown (this runs on every lowering and every BatchProgram::at()).
  auto shape = [&] { return fmt::format("local_batch_size {} x seq_len {}", plan.local_batch_size, t.seq_len); };
  auto elements = [&](Wide n, auto what) {
    if (n > limits::max_tensor_elements)
      throw Error(
          fmt::format("{} ({:.3g} elements) is larger than tptune handles (2^48 elements per tensor): reduce "
                      "training.seq_len, the local batch size or the model dims",
                      what(), static_cast<double>(n)));
  };
  elements(tokens * std::max({m.dim, m.ffn_dim, m.n_heads * m.head_dim()}),
           [&] { return fmt::format("an activation of {} x dim {} / ffn_dim {}", shape(), m.dim, m.ffn_dim); });
  elements(tokens * m.vocab_size,
           [&] { return fmt::format("the logits of {} x vocab_size {}", shape(), m.vocab_size); });
  elements(Wide{m.vocab_size} * m.dim,
           [&] { return fmt::format("the embedding of vocab_size {} x dim {}", m.vocab_size, m.dim); });
  elements(Wide{m.ffn_dim} * m.dim,
           [&] { return fmt::format("a feed-forward weight of ffn_dim {} x dim {}", m.ffn_dim, m.dim); });
  elements(Wide{m.n_heads} * m.head_dim() * m.dim, [&] {
    return fmt::format("the q projection of n_heads {} x head_dim {} x dim {}", m.n_heads, m.head_dim(), m.dim);
  });
  if (m.moe.experts > 0) {
    // The routed token copies at the busiest rank (tokens x top_k x moe_imbalance) by dim or expert_ffn_dim, and the
    // router's logits (tokens x experts).
    const Wide copies = tokens * m.moe.top_k * static_cast<Wide>(std::ceil(t.moe_imbalance));
    elements(copies * std::max({m.dim, m.moe.expert_ffn_dim, m.moe.shared_ffn_dim}), [&] {
      return fmt::format("the routed copies of {} x top_k {} x moe_imbalance {} x dim {} / expert_ffn_dim {}", shape(),
                         m.moe.top_k, t.moe_imbalance, m.dim, m.moe.expert_ffn_dim);
    });
    elements(Wide{m.moe.experts} * m.moe.expert_ffn_dim * m.dim, [&] {
      return fmt::format("the routed experts' weights of experts {} x expert_ffn_dim {} x dim {}", m.moe.experts,
                         m.moe.expert_ffn_dim, m.dim);
    });
    elements(tokens * m.moe.experts,
             [&] { return fmt::format("the router's logits of {} x experts {}", shape(), m.moe.experts); });
    if (Wide{2} * copies * m.dim * std::max(m.moe.expert_ffn_dim, m.moe.shared_ffn_dim) > max_flops_wide())
      throw Error(
          fmt::format("the FLOPs of the grouped GEMMs ({} x top_k {} x dim {} x expert_ffn_dim {}) overflow "
                      "64-bit integers: reduce training.seq_len or the local batch size",
                      shape(), m.moe.top_k, m.dim, m.moe.expert_ffn_dim));
  }
  // FLOPs of one op: the output projection, the feed-forward and q/o GEMMs (2 x tokens x dim x max(vocab, ffn,
  // heads x head_dim)), and
  // causal attention backward (2.5 x 2 x batch x seq^2 x dim).
  const Wide max_flops = std::numeric_limits<int64_t>::max();
  if (Wide{2} * tokens * m.dim * std::max({m.vocab_size, m.ffn_dim, m.n_heads * m.head_dim()}) > max_flops)
    throw Error(
        fmt::format("the FLOPs of one GEMM ({} x dim {} x vocab/ffn) overflow 64-bit integers: reduce "
                    "training.seq_len or the local batch size",
                    shape(), m.dim));
  if (Wide{5} * b * s * s * m.n_heads * m.head_dim() > max_flops)
    throw Error(
        fmt::format("the FLOPs of attention ({} x seq_len x dim {}) overflow 64-bit integers: reduce "
                    "training.seq_len or the local batch size",
                    shape(), m.dim));
}

void in_range(const char* key, int64_t v, limits::IntRange r) {
  if (v < r.lo || v > r.hi) throw Error(fmt::format("{}: expected an integer in {}..{}, got {}", key, r.lo, r.hi, v));
}

void check_batch_positive(const Plan& plan) {
  if (plan.local_batch_size < 1)
    throw Error(fmt::format("{}: local_batch_size: expected >= 1, got {}", plan.source, plan.local_batch_size));
}

// A mixture-of-experts model: the sparse mesh (plans/language/expert_parallel.h) and what the lowering plans of it
// (plans/lower/experts.cc). One-line errors naming the key's origin or the module.
void check_moe(const Model& m, const Training& t, const Plan& plan) {
  const std::string where = plan_key_origin(plan, "ep_degree");
  const ExpertMesh x = check_expert_mesh(m, plan, where);
  if (m.moe.experts == 0) return;
  const std::string routed = "layers.0.moe.routed_experts";
  if (plan.async_tp && plan.tp_degree > 1)
    throw Error(
        fmt::format("{}: async_tp: not lowered for a mixture-of-experts model (its MoE blocks have no "
                    "micro-pipelined TP in torchtitan 0.3.0)",
                    plan_key_origin(plan, "async_tp")));
  if (plan.float8 == Float8Recipe::tensorwise)
    throw Error(
        fmt::format("{}: float8 tensorwise: a mixture-of-experts model's grouped GEMMs run torchao's rowwise "
                    "recipes only; expected none or rowwise",
                    plan_key_origin(plan, "float8")));
  const int tp = plan.tp_degree;
  if (x.ep == 1 && tp > 1 && m.moe.expert_ffn_dim % tp != 0)
    throw ModuleError(routed, fmt::format("tp {} does not divide expert_ffn_dim {}: with ep_degree 1 each expert's "
                                          "w1/w3 are Shard(1) and w2 Shard(2) on tp (models/common/moe_sharding.py)",
                                          tp, m.moe.expert_ffn_dim));
  if (tp > 1 && m.moe.shared_ffn_dim % tp != 0)
    throw ModuleError("layers.0.moe.shared_experts",
                      fmt::format("tp {} does not divide shared_ffn_dim {}: w1/w3 are colwise, w2 rowwise on tp", tp,
                                  m.moe.shared_ffn_dim));
  // With EP on the router's input is the tokens sequence-sharded over tp (Shard(1)).
  if (x.ep > 1 && tp > 1 && (t.seq_len / plan.cp_degree) % tp != 0)
    throw ModuleError("layers.0.moe.router",
                      fmt::format("tp {} does not divide the {} tokens of each sequence on a rank: with ep_degree > 1 "
                                  "the router's input is Shard(1) over tp",
                                  tp, t.seq_len / plan.cp_degree));
  if (!(t.moe_imbalance >= 1.0 && t.moe_imbalance <= 1024.0))
    throw Error(fmt::format("training.moe_imbalance: expected a factor in 1..1024 (1: balanced routing), got {}",
                            t.moe_imbalance));
}

// Multi-head latent attention (plans/lower/mla.cc): its sizes (a Model built in code is checked here; configs are
// range-checked when loaded) and what its lowering does not cover, in one line each.
void check_mla(const Model& m, const Training& t, const Plan& plan) {
  const MlaSpec& a = m.mla;
  if (a.kv_lora_rank == 0) return;
  in_range("model.mla.q_lora_rank", a.q_lora_rank, {0, limits::dim.hi});
  in_range("model.mla.kv_lora_rank", a.kv_lora_rank, limits::dim);
  in_range("model.mla.qk_nope_head_dim", a.qk_nope_head_dim, limits::head_dim);
  in_range("model.mla.qk_rope_head_dim", a.qk_rope_head_dim, limits::head_dim);
  in_range("model.mla.v_head_dim", a.v_head_dim, limits::head_dim);
  using Wide = __int128;
  const Wide b = plan.local_batch_size, s = t.seq_len;
  const Wide qk = a.qk_nope_head_dim + a.qk_rope_head_dim,
             widest = std::max<Wide>(qk, a.qk_nope_head_dim + a.v_head_dim);
  if (b * s * m.n_heads * widest > limits::max_tensor_elements)
    throw Error(
        fmt::format("latent attention's q and k of local_batch_size {} x seq_len {} x n_heads {} x {} features "
                    "are larger than tptune handles (2^48 elements per tensor): reduce training.seq_len or "
                    "the local batch size",
                    plan.local_batch_size, t.seq_len, m.n_heads, static_cast<int64_t>(widest)));
  if (Wide{5} * b * s * s * m.n_heads * (qk + a.v_head_dim) > std::numeric_limits<int64_t>::max())
    throw Error(
        fmt::format("the FLOPs of latent attention (local_batch_size {} x seq_len {}^2 x n_heads {}) overflow "
                    "64-bit integers: reduce training.seq_len or the local batch size",
                    plan.local_batch_size, t.seq_len, m.n_heads));
  if (plan.cp_degree > 1)
    throw Error(
        fmt::format("{}: cp_degree {}: context parallelism of multi-head latent attention (model.mla) is not "
                    "lowered (its ring attention has one head_dim for q, k and v)",
                    plan_key_origin(plan, "cp_degree"), plan.cp_degree));
  if (plan.async_tp && plan.tp_degree > 1)
    throw Error(fmt::format("{}: async_tp: not lowered for multi-head latent attention (model.mla)",
                            plan_key_origin(plan, "async_tp")));
  if (plan.float8 != Float8Recipe::none)
    throw Error(
        fmt::format("{}: float8 {}: the float8 casts of latent attention's replicated projections are not "
                    "lowered (model.mla); expected none",
                    plan_key_origin(plan, "float8"), to_string(plan.float8)));
}

}  // namespace

void check_inputs(const Model& m, const Training& t, const Plan& plan) {
  if (plan.tp_degree < 1) throw Error(fmt::format("{}: tp_degree: expected >= 1, got {}", plan.source, plan.tp_degree));
  if (plan.dp_shard < 1) throw Error(fmt::format("{}: dp_shard: expected >= 1, got {}", plan.source, plan.dp_shard));
  if (plan.dp_replicate < 1)
    throw Error(fmt::format("{}: dp_replicate: expected >= 1, got {}", plan.source, plan.dp_replicate));
  check_batch_positive(plan);
  // Configs are range-checked when loaded (plans/util/limits.h); a Model or Training built in code is checked here.
  auto in = in_range;
  in("model.dim", m.dim, limits::dim);
  in("model.n_layers", m.n_layers, limits::n_layers);
  in("model.n_heads", m.n_heads, limits::n_heads);
  in("model.n_kv_heads", m.n_kv_heads, limits::n_heads);
  in("model.ffn_dim", m.ffn_dim, limits::ffn_dim);
  in("model.vocab_size", m.vocab_size, limits::vocab_size);
  in("training.seq_len", t.seq_len, limits::seq_len);
  in("local_batch_size", plan.local_batch_size, limits::local_batch_size);
  in("tp_degree", plan.tp_degree, limits::degree);
  in("dp_shard", plan.dp_shard, limits::degree);
  in("dp_replicate", plan.dp_replicate, limits::degree);
  in("cp_degree", plan.cp_degree, limits::degree);
  if (plan.cp_degree > 1) {
    auto it = plan.provenance.find("cp_degree");
    // torchtitan's trainer counts tp in when sequence parallelism is on (a SequenceParallel style in the plan).
    const bool sp = plan.tp_degree > 1 && std::any_of(plan.modules.begin(), plan.modules.end(), [](const PlanEntry& e) {
                      return e.style.kind == StyleKind::sequence_parallel;
                    });
    const std::string where =
        fmt::format("{}: cp_degree {}", it != plan.provenance.end() ? it->second : plan.source, plan.cp_degree);
    check_cp_seq_len(t.seq_len, plan.cp_degree, plan.cp_load_balance, where);
    const int64_t chunks = (plan.cp_load_balance ? 2 : 1) * int64_t{plan.cp_degree} * plan.tp_degree;
    if (sp && t.seq_len % chunks != 0)
      throw Error(
          fmt::format("{}: seq_len {} is not divisible by tp {} x {}cp_degree = {}: sequence parallelism "
                      "splits each cp chunk over tp (torchtitan's trainer refuses it)",
                      where, t.seq_len, plan.tp_degree, plan.cp_load_balance ? "2 x " : "", chunks));
  }
  // torchtitan (the DTensor family's 2025 parallelize_llama) applies FSDP only when dp_shard > 1; with dp_shard 1
  // and dp_replicate > 1 it applies DDP instead, which it refuses beside TP ("DDP has not supported > 1D
  // parallelism") and runs without mixed precision: not a plan tptune models. torchtitan 0.3 always applies
  // fully_shard, so there dp_shard 1 x dp_replicate N is FSDP2's replicate path (an all-reduce per module group).
  if (plan.dp_replicate > 1 && plan.dp_shard == 1 && !plan.fsdp_always)
    throw Error(
        fmt::format("{}: dp_replicate {} with dp_shard 1: torchtitan applies DDP there, not HSDP (it refuses DDP with "
                    "TP, and tptune does not model DDP); use dp_shard > 1, or framework torchtitan-0.3 (FSDP2 "
                    "always applied)",
                    plan.source, plan.dp_replicate));
  in("ep_degree", plan.ep_degree, limits::degree);
  check_mla(m, t, plan);
  check_moe(m, t, plan);
  check_sizes(m, t, plan);
  check_plan_modules(plan, m);
  check_uniform_layers(plan, m);
  check_framework(plan);
  if (plan.async_tp && plan.tp_degree > 1 && t.compile.has_value() && !*t.compile)
    throw Error(
        fmt::format("{}: async_tp needs torch.compile (training.compile: true): the micro-pipelined TP is an "
                    "inductor pass (torchtitan: 'Async TP requires ... --compile.enable')",
                    plan.source));
  // The provenance of ac_layers ("plan file FILE:LINE", "option --ac-layers") or the plan's source.
  auto ac_origin = [&] {
    auto it = plan.provenance.find("ac_layers");
    return it != plan.provenance.end() ? it->second : plan.source;
  };
  if (plan.ac_layers < 0 || plan.ac_layers > m.n_layers)
    throw Error(fmt::format("{}: ac_layers: expected 1 to {} (the model's n_layers; 0 or absent: every block), got {}",
                            ac_origin(), m.n_layers, plan.ac_layers));
  if (plan.ac_layers > 0 && plan.activation_checkpointing == ActivationCheckpointing::none)
    throw Error(
        fmt::format("{}: ac_layers {}: checkpoints the first {} blocks with the plan's activation_checkpointing "
                    "policy, which is none; set activation_checkpointing to selective or full",
                    ac_origin(), plan.ac_layers, plan.ac_layers));
  if (plan.ac_layers > 0 && plan.ac_layers < m.n_layers) check_dense_first_ac_layers(m, plan.ac_layers, ac_origin());
  if (plan.loss_chunks < 0 || plan.loss_chunks > 4096)
    throw Error(fmt::format("{}: loss_chunks: expected 1 to 4096, got {}", plan.source, plan.loss_chunks));
}

void check_dense_first_ac_layers(const Model& m, int64_t ac_layers, const std::string& origin) {
  if (m.dense_first_blocks() <= 0 || ac_layers <= 0 || ac_layers >= m.n_layers) return;
  throw Error(
      fmt::format("{}: ac_layers {}: not lowered for a model with model.moe.dense_layers {} (its dense and MoE "
                  "blocks are two block templates, each checkpointed whole); expected 0 or {} (every block)",
                  origin, ac_layers, m.moe.dense_layers, m.n_layers));
}

void check_local_batch(const Model& model, const Training& training, const Plan& plan) {
  check_batch_positive(plan);
  in_range("local_batch_size", plan.local_batch_size, limits::local_batch_size);
  check_sizes(model, training, plan);
}

}  // namespace tptune
