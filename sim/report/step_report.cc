// Text and JSON forms of a StepReport.
#include "sim/report/step_report.h"

#include <fmt/format.h>

#include <cmath>
#include <iterator>

#include "plans/lower/parameter_count.h"
#include "plans/util/text_table.h"

namespace tptune {

namespace {

constexpr double kGiB = 1073741824.0;

// A rate rounded as "{:.0f}" does (to nearest, ties to even), with thousands separators
// (plans/lower/parameter_count.h).
std::string thousands(double v) {
  if (!std::isfinite(v) || std::fabs(v) >= 9e18) return fmt::format("{:.0f}", v);
  return with_thousands(static_cast<int64_t>(std::nearbyint(v)));
}

template <typename... T>
void append(std::string& o, fmt::format_string<T...> f, T&&... args) {
  fmt::format_to(std::back_inserter(o), f, std::forward<T>(args)...);
}

// The pipeline section of a PP plan's report (sim/pipeline/step.h).
std::string pipeline_text(const StepReport& r) {
  const PipelineReport& p = r.pipeline;
  std::string o;
  append(o, "\n  pipeline: {} on pp {}, {} stage{} per rank, {} microbatches of {} sequence{}\n", to_string(p.schedule),
         p.pp, p.stages_per_rank, p.stages_per_rank == 1 ? "" : "s", p.microbatches, p.microbatch_size,
         p.microbatch_size == 1 ? "" : "s");
  append(o,
         "    blocks per stage        [{}] (the first stage also holds the embedding, the last the norm and output)\n",
         fmt::join(p.stage_layers, ", "));
  append(o, "    p2p per microbatch      {:.1f} MiB over {}: {:.1f} us each way\n",
         static_cast<double>(p.p2p_bytes) / 1048576.0, p.p2p_network ? "the network" : "NVLink", p.p2p_us);
  append(o, "    schedule pass           {:10.2f} ms, bubble {:.1f} % (mean idle fraction over ranks)\n", p.schedule_ms,
         100 * p.bubble_fraction);
  append(o, "    FSDP exposed            {:10.2f} ms (first stage's all-gather, unhidden gradient reduction)\n",
         p.fsdp_exposed_ms);
  append(o, "    optimizer               {:10.2f} ms (gradient norm and AdamW, once per step)\n", p.optimizer_ms);
  TextTable ranks({{"    pp rank", 11},
                   {"stages", 8},
                   {"blocks", 6, Align::right},
                   {"busy ms", 10, Align::right},
                   {"idle ms", 10, Align::right},
                   {"held", 5, Align::right},
                   {"peak GiB", 9, Align::right},
                   {"ends ms", 0, Align::right, 2}});
  for (size_t k = 0; k < p.ranks.size(); ++k) {
    const PipelineRankReport& rr = p.ranks[k];
    ranks.row({fmt::format("    {}{}", k, static_cast<int>(k) == p.critical_rank ? " *" : ""),
               fmt::format("{}", fmt::join(rr.stages, ",")), std::to_string(rr.layers),
               fmt::format("{:.2f}", rr.busy_ms), fmt::format("{:.2f}", rr.idle_ms),
               std::to_string(rr.peak_activations), fmt::format("{:.2f}", rr.peak_memory / kGiB),
               fmt::format("{:.2f}", rr.end_ms)});
  }
  o += ranks.str("");
  o += "    (* ends last: the breakdown above is its; held: microbatch activations at its peak)\n";
  return o;
}

nlohmann::json pipeline_json(const PipelineReport& p) {
  using nlohmann::json;
  json ranks = json::array();
  for (const PipelineRankReport& rr : p.ranks)
    ranks.push_back({{"stages", rr.stages},
                     {"blocks", rr.layers},
                     {"busy_ms", rr.busy_ms},
                     {"idle_ms", rr.idle_ms},
                     {"peak_activations", rr.peak_activations},
                     {"activations_gib", rr.activations / kGiB},
                     {"peak_memory_gib", rr.peak_memory / kGiB},
                     {"end_ms", rr.end_ms}});
  json costs = json::array();
  for (const StageCost& c : p.stage_costs)
    costs.push_back({{"fwd_us", c.fwd_us}, {"bwd_us", c.bwd_us}, {"bwd_weight_us", c.bwd_weight_us}});
  return {{"pp_degree", p.pp},
          {"schedule", std::string(to_string(p.schedule))},
          {"stages_per_rank", p.stages_per_rank},
          {"microbatches", p.microbatches},
          {"microbatch_size", p.microbatch_size},
          {"stage_blocks", p.stage_layers},
          {"stage_costs", costs},
          {"p2p_bytes", p.p2p_bytes},
          {"p2p_us", p.p2p_us},
          {"p2p_over", p.p2p_network ? "network" : "nvlink"},
          {"schedule_ms", p.schedule_ms},
          {"bubble_fraction", p.bubble_fraction},
          {"fsdp_exposed_ms", p.fsdp_exposed_ms},
          {"optimizer_ms", p.optimizer_ms},
          {"critical_rank", p.critical_rank},
          {"ranks", ranks}};
}

}  // namespace

std::string peak_phase_text(std::string_view phase) {
  if (phase == "forward") return "a block's forward";
  if (phase == "backward") return "a block's backward";
  if (phase == "head") return "the output layer and loss";
  return std::string(phase);
}

std::string report_text(const StepReport& r) {
  std::string o;
  const std::string hsdp = r.dp_replicate > 1 ? fmt::format(" x dp_replicate {} (HSDP)", r.dp_replicate) : "";
  // Context-parallel plans only: "cp 4 (ring allgather, load-balanced), ".
  const std::string cp = r.cp_degree > 1 ? fmt::format("cp {} (ring {}{}), ", r.cp_degree, to_string(r.cp_rotate),
                                                       r.cp_load_balance ? ", load-balanced" : "")
                                         : "";
  // Pipeline-parallel plans only: "pp 8 (1F1B), ".
  const std::string pp = r.pp_degree > 1 ? fmt::format("pp {} ({}), ", r.pp_degree, to_string(r.pp_schedule)) : "";
  append(o, "{} on {} x {} {} ({}tp {}, {}dp {}{}), plan {}\n", r.model, r.nodes, r.gpus_per_node, r.gpu, pp,
         r.tp_degree, cp, r.dp_shard, hsdp, r.plan);
  append(o, "  float8 {}, async TP {}, loss parallel {}, activation checkpointing {}, local batch {} x seq {}\n\n",
         to_string(r.float8), r.async_tp ? "on" : "off", r.loss_parallel ? "on" : "off",
         ac_text(r.activation_checkpointing, r.ac_layers, r.n_layers), r.local_batch_size, r.seq_len);
  const MemoryReport& m = r.memory;
  append(o, "  step time          {:10.2f} ms\n", r.step_time_ms);
  // Only plans that accumulate say so: every other report reads as before.
  if (r.gradient_accumulation_steps > 1)
    append(o,
           "  gradient accum.    {:>10}   microbatches per optimizer step (each microbatch after the first adds the "
           "time to its last non-DP op; sim/accumulation.h)\n",
           r.gradient_accumulation_steps);
  append(o, "  tokens/s per GPU   {:>10}\n", thousands(r.tokens_per_second_per_gpu));
  append(o,
         "  MFU                {:10.1f} %   (torchtitan: 6 x P + 12 x L x H x D x S, P = params but an untied "
         "embedding; dense bf16)\n",
         100 * r.mfu);
  append(o, "  parameters         {} (per GPU {}: {})\n", with_thousands(r.parameters.total),
         with_thousands(r.parameters.per_rank), shard_text(r.parameters, r.tp_degree, r.dp_shard, r.cp_degree));
  if (m.fits)
    append(o, "  peak memory        {:10.2f} GiB of {:.2f} GiB, {:.2f} GiB free\n", m.peak / kGiB, m.capacity / kGiB,
           m.headroom() / kGiB);
  else
    append(o, "  peak memory        {:10.2f} GiB of {:.2f} GiB: DOES NOT FIT, over by {:.2f} GiB\n", m.peak / kGiB,
           m.capacity / kGiB, -m.headroom() / kGiB);
  append(o, "  trust              {}\n", trust_text(r.trust));

  const double step = r.step_time_ms > 0 ? r.step_time_ms : 1;
  append(o, "\n  time breakdown                    ms       %\n");
  append(o, "    compute                 {:10.2f} {:7.1f}\n", r.compute_ms, 100 * r.compute_ms / step);
  append(o, "    exposed TP communication{:10.2f} {:7.1f}\n", r.exposed_tp_comm_ms, 100 * r.exposed_tp_comm_ms / step);
  append(o, "    exposed DP communication{:10.2f} {:7.1f}\n", r.exposed_dp_comm_ms, 100 * r.exposed_dp_comm_ms / step);
  if (r.dp_replicate > 1)
    append(o,
           "    (communication streams busy: TP {:.2f} ms, DP {:.2f} ms, DP replicate {:.2f} ms; the rest overlaps "
           "compute)\n",
           r.tp_comm_busy_ms, r.dp_comm_busy_ms, r.dp_replicate_comm_busy_ms);
  else if (r.ep_degree > 1)
    append(o,
           "    (communication streams busy: TP {:.2f} ms, EP {:.2f} ms, DP {:.2f} ms; the rest overlaps compute; "
           "exposed EP time counts as TP's)\n",
           r.tp_comm_busy_ms, r.ep_comm_busy_ms, r.dp_comm_busy_ms);
  else if (r.cp_degree > 1)
    append(o,
           "    (communication streams busy: TP {:.2f} ms, CP {:.2f} ms, DP {:.2f} ms; the rest overlaps compute; "
           "exposed CP time counts as TP's)\n",
           r.tp_comm_busy_ms, r.cp_comm_busy_ms, r.dp_comm_busy_ms);
  else
    append(o, "    (communication streams busy: TP {:.2f} ms, DP {:.2f} ms; the rest overlaps compute)\n",
           r.tp_comm_busy_ms, r.dp_comm_busy_ms);
  if (r.pipeline.pp > 1) o += pipeline_text(r);
  append(o, "\n  per block                         ms\n");
  append(o, "    forward                 {:10.3f}\n", r.block_forward_ms);
  append(o, "    backward                {:10.3f}{}\n", r.block_backward_ms,
         r.activation_checkpointing == ActivationCheckpointing::none ? std::string()
         : r.ac_layers > 0 && r.ac_layers < r.n_layers
             ? fmt::format("   (mean of the {} blocks; the {} checkpointed ones include recompute)", r.n_layers,
                           r.ac_layers)
             : std::string("   (recompute included)"));

  append(o, "\n  memory per GPU                   GiB\n");
  append(o, "    parameters (fp32 master){:10.2f}\n", m.master_params / kGiB);
  append(o, "    gradients (fp32)        {:10.2f}\n", m.gradients / kGiB);
  append(o, "    optimizer (AdamW m, v)  {:10.2f}\n", m.optimizer / kGiB);
  if (m.dense_blocks > 0 && r.pipeline.pp > 1)  // (a pipeline rank holds some blocks' of some microbatches)
    append(o, "    activations             {:10.2f}   ({:.3f} GiB saved per MoE block, {:.3f} GiB per dense block)\n",
           m.activations / kGiB, m.saved_per_block / kGiB, m.saved_per_dense_block / kGiB);
  else if (m.dense_blocks > 0)  // a dense-first mixture of experts: its MoE and dense blocks save differently
    append(o,
           "    activations             {:10.2f}   ({:.3f} GiB saved per MoE block x {}, {:.3f} GiB per dense block "
           "x {})\n",
           m.activations / kGiB, m.saved_per_block / kGiB, r.n_layers - m.dense_blocks, m.saved_per_dense_block / kGiB,
           m.dense_blocks);
  else if (m.checkpointed_blocks > 0)  // ac_layers: the blocks without AC and the checkpointed ones save differently
    append(o,
           "    activations             {:10.2f}   ({:.3f} GiB saved per block without AC x {}, {:.3f} GiB per "
           "checkpointed block x {})\n",
           m.activations / kGiB, m.saved_per_block / kGiB, r.n_layers - m.checkpointed_blocks,
           m.saved_per_checkpointed_block / kGiB, m.checkpointed_blocks);
  else
    append(o, "    activations             {:10.2f}   ({:.3f} GiB saved per block)\n", m.activations / kGiB,
           m.saved_per_block / kGiB);
  append(o,
         "    working set             {:10.2f}   (temporaries at the peak, during {}; logits "
         "{:.2f} GiB)\n",
         m.working_set / kGiB, peak_phase_text(m.peak_phase), m.logits / kGiB);
  append(o, "    parameters in flight    {:10.2f}\n", m.params_in_flight / kGiB);
  append(o, "    runtime and allocator   {:10.2f}\n", m.runtime_overhead / kGiB);
  append(o, "    peak                    {:10.2f}\n", m.peak / kGiB);

  // One row per op of the Program: an op that runs in forward and again in backward (FSDP's all-gather of a block's
  // parameters) has a row per phase, told apart by the phase column. Names are whole, the column as wide as the
  // longest.
  TextTable ops({{"top ops by time", 50},
                 {"phase", 9},
                 {"count", 5, Align::right},
                 {"each us", 10, Align::right},
                 {"total ms", 10, Align::right},
                 {"% step", 7, Align::right},
                 {"stream", 0, Align::left, 2}});
  for (const OpSummary& op : r.top_ops)
    ops.row({fmt::format("  {}", op.name), op.phase, std::to_string(op.count), fmt::format("{:.1f}", op.time_us),
             fmt::format("{:.2f}", op.total_us / 1e3), fmt::format("{:.1f}", 100 * op.total_us / 1e3 / step),
             std::string(to_string(op.stream))});
  o += '\n';
  if (r.pipeline.pp > 1)  // the Program is the whole model's: the table is one rank's share of it (sim/pipeline/step.h)
    append(o,
           "  top ops of pp rank {} (the rank that ends last): its stages' ops, each microbatch's x {} microbatches{}; "
           "FSDP's once per pass\n",
           r.pipeline.critical_rank, r.pipeline.microbatches,
           r.gradient_accumulation_steps > 1 ? fmt::format(" x {} passes", r.gradient_accumulation_steps) : "");
  o += ops.str("  ");
  return o;
}

nlohmann::json plan_toggles_json(const PlanToggles& p) {
  nlohmann::json j = {{"tp_degree", p.tp_degree},
                      {"dp_shard", p.dp_shard},
                      {"float8", std::string(to_string(p.float8))},
                      {"async_tp", p.async_tp},
                      {"loss_parallel", p.loss_parallel},
                      {"activation_checkpointing", std::string(to_string(p.activation_checkpointing))},
                      {"local_batch_size", p.local_batch_size}};
  if (p.dp_replicate > 1) j["dp_replicate"] = p.dp_replicate;
  if (p.cp_degree > 1) {
    j["cp_degree"] = p.cp_degree;
    j["cp_rotate_method"] = std::string(to_string(p.cp_rotate));
    j["cp_load_balance"] = p.cp_load_balance;
  }
  if (p.ep_degree > 1) j["ep_degree"] = p.ep_degree;
  if (p.pp_degree > 1) {
    j["pp_degree"] = p.pp_degree;
    j["pp_schedule"] = std::string(to_string(p.pp_schedule));
    j["pp_microbatch_size"] = p.pp_microbatch_size;
  }
  if (p.gradient_accumulation_steps > 1) j["gradient_accumulation_steps"] = p.gradient_accumulation_steps;
  if (p.seq_len > 0) j["seq_len"] = p.seq_len;  // a StepReport's always; a search's plan only over search.seq_lens
  if (p.ac_layers > 0) j["ac_layers"] = p.ac_layers;
  return j;
}

nlohmann::json report_json(const StepReport& r) {
  using nlohmann::json;
  const MemoryReport& m = r.memory;
  json j;
  j["model"] = r.model;
  j["gpu"] = r.gpu;
  j["nodes"] = r.nodes;
  j["gpus_per_node"] = r.gpus_per_node;
  j["plan"] = plan_toggles_json(r);
  j["plan"]["name"] = r.plan;
  j["step_time_ms"] = r.step_time_ms;
  j["tokens_per_second_per_gpu"] = r.tokens_per_second_per_gpu;
  j["mfu"] = r.mfu;
  j["parameters"] = {{"total", r.parameters.total}, {"per_gpu", r.parameters.per_rank}};
  if (!r.parameters.per_pp_rank.empty()) j["parameters"]["per_pp_rank"] = r.parameters.per_pp_rank;  // PP plans only
  j["peak_memory_gib"] = m.peak / kGiB;
  j["memory_capacity_gib"] = m.capacity / kGiB;
  j["memory_headroom_gib"] = m.headroom() / kGiB;
  j["fits_in_memory"] = m.fits;
  j["trust"] = trust_json(r.trust);
  j["breakdown_ms"] = {
      {"compute", r.compute_ms}, {"exposed_tp_comm", r.exposed_tp_comm_ms}, {"exposed_dp_comm", r.exposed_dp_comm_ms}};
  j["comm_busy_ms"] = {{"tp", r.tp_comm_busy_ms}, {"dp", r.dp_comm_busy_ms}};
  // HSDP, CP, EP and PP keys only for plans that use them: every other report reads as before.
  if (r.dp_replicate > 1) j["comm_busy_ms"]["dp_replicate"] = r.dp_replicate_comm_busy_ms;
  if (r.cp_degree > 1) j["comm_busy_ms"]["cp"] = r.cp_comm_busy_ms;
  if (r.ep_degree > 1) j["comm_busy_ms"]["ep"] = r.ep_comm_busy_ms;
  if (r.pipeline.pp > 1) j["pipeline"] = pipeline_json(r.pipeline);
  j["per_block_ms"] = {{"forward", r.block_forward_ms}, {"backward", r.block_backward_ms}};
  j["memory_gib"] = {{"master_params", m.master_params / kGiB},
                     {"gradients", m.gradients / kGiB},
                     {"optimizer", m.optimizer / kGiB},
                     {"activations", m.activations / kGiB},
                     {"saved_per_block", m.saved_per_block / kGiB},
                     {"working_set", m.working_set / kGiB},
                     {"logits", m.logits / kGiB},
                     {"params_in_flight", m.params_in_flight / kGiB},
                     {"runtime_overhead", m.runtime_overhead / kGiB},
                     {"allocator_reserved", m.allocator_reserved / kGiB},
                     {"peak_phase", m.peak_phase}};
  if (m.checkpointed_blocks > 0) {
    j["memory_gib"]["saved_per_checkpointed_block"] = m.saved_per_checkpointed_block / kGiB;
    j["memory_gib"]["checkpointed_blocks"] = m.checkpointed_blocks;
  }
  if (m.dense_blocks > 0) {  // (saved_per_block is then a MoE block's)
    j["memory_gib"]["saved_per_dense_block"] = m.saved_per_dense_block / kGiB;
    j["memory_gib"]["dense_blocks"] = m.dense_blocks;
  }
  json ops = json::array();
  for (const OpSummary& op : r.top_ops)
    ops.push_back({{"name", op.name},
                   {"kind", op.kind},
                   {"phase", op.phase},
                   {"stream", std::string(to_string(op.stream))},
                   {"count", op.count},
                   {"time_us", op.time_us},
                   {"total_ms", op.total_us / 1e3}});
  j["top_ops"] = ops;
  return j;
}

}  // namespace tptune
