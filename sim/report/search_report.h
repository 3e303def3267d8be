#pragma once
// What `tp-plan search` prints: the ranking table, the winner against two baselines, the JSON, and what to say
// when nothing fits.
//
// Baselines, at the winner's seq_len (search.seq_lens: the baselines train what the winner trains, so the speedup is
// the plan's):
//   vanilla              the seed plan (no sequence parallel, no loss parallel, no float8 or async TP) at its default
//                        TP degree, gpus_per_node (tp-plan simulate's default), with the config's training section
//   torchtitan default   when the model is one of torchtitan 0.3's llama3 recipes (plans/export/torchtitan_recipe.h, by
//                        dimensions): that recipe as torchtitan 0.3 runs it unchanged, in the torchtitan-0.3 family:
//                        enable_sp on, its tp, local batch, AC, float8 and compile/async TP (llama3_8b: tp 1, batch 1,
//                        selective AC; llama3_70b: tp 8, batch 8, full AC; llama3_405b: tp 8, batch 2, full AC, float8
//                        rowwise, async TP), dp_shard the rest of the world
//   sequence_parallel preset   otherwise (no recipe trains the model): sequence_parallel with loss parallel at the
//                        winner's TP degree, the config's training section, the plan's family
// The header's second line gives the model's parameter count, the winner's lines the parameters one GPU holds
// (plans/lower/parameter_count.h).
// With more than one search.seq_lens, the tables get a `seq` column, and the header lists the lengths.
// "Where the time went" compares milliseconds per 1000 tokens per GPU (step time x tp / (local batch x seq_len) x
// 1000), so that plans with different TP degrees and local batches compare: compute, exposed TP and exposed DP
// communication, winner vs each baseline (their sum is the inverse of the throughput).
//
// JSON (--json):
//   {"evaluated": N, "seq_lens": [...]? (when search.seq_lens is given), "feasible": M, "pruned": {"reason": count},
//   "elapsed_ms": T, "threads": n, "objective": "...",
//    "top": [{"rank": 1, "plan": {...}, "step_time_ms", "tokens_per_second_per_gpu", "mfu", "peak_memory_gib",
//             "parameters": {"total", "per_gpu"} (plans/lower/parameter_count.h), "exposed_comm_fraction",
//             "breakdown_ms":
//             {...}, "cost_per_million_tokens_usd"? (with gpu_hour_price)}],
//    "baselines": [{"name", "recipe"? (torchtitan default), "plan", "step_time_ms", ..., "fits_in_memory", "speedup"}],
//    "pareto": [{"plan", "tokens_per_second_per_gpu", "peak_memory_gib"}]   (by memory ascending; sim/search/pareto.h)
//    "lowering": {"lowered", "finished", "patched"}   (how the candidates' Programs were made; sim/search/search.h)
//    "phases_ms": {"constraints", "lower", "finish", "patch", "memory", "cost", "schedule", "report", "sweep"}
//    "closest": [{"plan", "reason", "detail", "peak_memory_gib"?}]   (only when nothing fits)}

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "plans/language/config.h"
#include "sim/search/search.h"

namespace tptune {

struct Baseline {
  std::string name;    // "vanilla" | "torchtitan default" | "sequence_parallel preset"
  std::string recipe;  // torchtitan default: the recipe's config_registry function ("llama3_70b")
  Plan plan;
  std::string error;  // lowering / simulation error; empty when `report` is set
  StepReport report;
  bool fits = false;  // with the search's headroom
};

// The two baselines at the winner's TP degree (see above). Empty when there is no winner.
std::vector<Baseline> search_baselines(const Config& cfg, const SearchResult& r, const CostParams& cost);
// The same two baselines, of `framework`'s plan family, for a plan of TP degree `tp` on `cluster` (tp-plan simulate
// --report). `global_batch_size` > 0 (a search with gradient_accumulation): each baseline accumulates
// global / (local batch x dp) microbatches when that is whole, so that it trains the same global batch.
std::vector<Baseline> plan_baselines(const Config& cfg, const ClusterSpec& cluster, int tp, double headroom_gib,
                                     const CostParams& cost, Framework framework = Framework::dtensor,
                                     int64_t global_batch_size = 0);

// The plan a candidate stands for (the one --out-plan writes).
Plan result_plan(const SearchResult& r, int index);
// The training section a candidate was simulated with: the config's, at the candidate's seq_len.
Training result_training(const Config& cfg, const SearchResult& r, int index);

// Header (model, cluster, counts, time), pruning reasons, and the top-`k` table.
std::string search_table(const Config& cfg, const SearchResult& r, size_t k);
// USD per million tokens at `gpu_hour_price` USD per GPU-hour (0 when the plan has no throughput).
double cost_per_million_tokens(const StepReport& s, double gpu_hour_price);
// The Pareto front (tokens/s per GPU vs peak memory), one line per plan; empty when nothing is feasible.
std::string pareto_text(const SearchResult& r);
// The winner against the baselines: a table and the per-sequence time deltas.
std::string explain_winner(const SearchResult& r, const std::vector<Baseline>& baselines);
// The pruned counts as printed: (reason text, candidates) in the order of the text (to_string(PruneCause)).
std::vector<std::pair<std::string, size_t>> pruned_by_text(const SearchResult& r);
// When nothing is feasible: why, and the `k` closest candidates with their reasons.
std::string nothing_fits_text(const Config& cfg, const SearchResult& r, size_t k);

nlohmann::json search_json(const SearchResult& r, const std::vector<Baseline>& baselines, size_t k);
// The plan's toggles as JSON: tp_degree, dp_shard, family, float8, async_tp, loss_parallel, activation_checkpointing,
// local_batch_size; dp_replicate, gradient_accumulation_steps and seq_len only when set.
nlohmann::json plan_summary_json(const Plan& p);

}  // namespace tptune
