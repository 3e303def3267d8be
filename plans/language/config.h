#pragma once
// The config YAML: what the user trains (model, training shape), where (cluster) and, for `tp-plan search`, which
// plans to consider (search). Loading checks every key: unknown keys, wrong types and impossible values are
// tptune::Error with "<file>:<line>: <key>: expected ..., got ...".
//
//   model:    {preset: llama3-8b} | explicit dims | a preset with overrides (ffn_dim or ffn_dim_multiplier+multiple_of)
//             | {hf_config: path/to/config.json} (a transformers config, relative to this file;
//             plans/model/hf_config.h)
//   training: {seq_len: 8192, local_batch_size: 1, global_batch_size: 64, dtype: bf16, activation_checkpointing: none}
//   cluster:  {gpu: h100-sxm | {inline spec}, nodes: 1, gpus_per_node: 8,   (`device:` is a synonym of `gpu:`)
//              intra_node: {bandwidth_GBps, latency_us}, inter_node: {bandwidth_GBps, latency_us}}
//   search:   {tp_degrees, presets, plans, float8, async_tp, loss_parallel, activation_checkpointing,
//              local_batch_sizes | max_local_batch_size, seq_lens, objective, memory_headroom_gib, global_batch_size,
//              gradient_accumulation, min_tokens_per_second_per_gpu, gpu_hour_price, framework}

#include <yaml-cpp/yaml.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "plans/language/backends/sdpa_backend.h"
#include "plans/language/pipeline_parallel.h"
#include "plans/model/dtype.h"
#include "plans/model/model.h"

namespace tptune {

enum class ActivationCheckpointing { none, selective, full };
std::string_view to_string(ActivationCheckpointing a);
ActivationCheckpointing parse_activation_checkpointing(std::string_view s, const std::string& where);

// rowwise_with_gw_hp: torchao's recipe that keeps the weight-gradient GEMM in bf16 (the other two GEMMs rowwise).
enum class Float8Recipe { none, tensorwise, rowwise, rowwise_with_gw_hp };
std::string_view to_string(Float8Recipe f);
// rowwise and rowwise_with_gw_hp: per-row scales computed locally, bf16 collectives.
inline bool is_rowwise(Float8Recipe f) { return f == Float8Recipe::rowwise || f == Float8Recipe::rowwise_with_gw_hp; }
Float8Recipe parse_float8(std::string_view s, const std::string& where);
// The float8 recipes search.float8 takes, and its default list: the dtensor presets' none, tensorwise and rowwise;
// torchtitan 0.3's none, rowwise and rowwise_with_gw_hp (its Float8LinearConverter has no tensorwise TP styles).
std::vector<Float8Recipe> search_float8_recipes(bool torchtitan_0_3);

struct Training {
  int64_t seq_len = 8192;
  int64_t local_batch_size = 1;  // sequences per data-parallel rank per step (per microbatch)
  // torchtitan's training.global_batch_size: sequences per optimizer step over all data-parallel ranks; 0 (no key,
  // torchtitan's -1): local_batch_size x dp degree, one microbatch. The tools turn it into the plan's
  // gradient_accumulation_steps = global / (local_batch_size x dp_shard x dp_replicate)
  // (plans/language/resolve/plan_resolve.h), an error naming global_batch_size_at ("<file>:<line>") when that is not
  // whole.
  int64_t global_batch_size = 0;
  std::string global_batch_size_at;
  DType dtype = DType::bf16;
  ActivationCheckpointing activation_checkpointing = ActivationCheckpointing::none;
  // torch.compile of the blocks (torchtitan `--compile.enable`, components model+loss): norms, rope, activations and
  // float8 casts run as fused kernels. Unset: as torchtitan's llama3 recipes (8B, 70B: off; 405B: on with async TP),
  // i.e. on exactly when the plan uses async TP, which needs it. Explicit false with async TP is an error.
  std::optional<bool> compile;
  bool compiled(bool async_tp) const { return compile.value_or(async_tp); }
  // Which attention kernel SDPA runs (plans/language/backends/sdpa_backend.h): `auto` resolves it by the GPU's
  // architecture and torch_version (absent: the current torch); sdpa_backend_at is the key's "<file>:<line>" (empty:
  // the default).
  SdpaBackend sdpa_backend = SdpaBackend::auto_;
  std::string sdpa_backend_at;
  std::optional<TorchVersion> torch_version;
  // Mixture of experts: how tokens spread over the experts, an input never assumed (YAML training.moe_imbalance).
  // 1 (the default): balanced routing, every expert gets top_k x tokens / experts rows, as torchtitan's forced-balance
  // benchmarks run (_debug_force_load_balance); f > 1: the busiest ep rank receives f times its balanced share of rows
  // (its dispatch and combine all-to-alls and grouped GEMMs f times larger), the step waiting for it.
  double moe_imbalance = 1.0;
};

struct LinkSpec {
  double bandwidth_GBps = 0;  // per GPU, per direction
  double latency_us = 0;
};

struct Cluster {
  std::string gpu;        // preset name; empty when gpu_inline is used
  YAML::Node gpu_inline;  // an inline spec with the keys of a GPU preset file (sim/ reads it)
  std::string source;     // "<file>:<line>" of the cluster.gpu key, for errors raised when resolving the spec
  int nodes = 1;
  int gpus_per_node = 8;
  // CPU ranks only (`device: cpu`): the cores of each node when the ranks outnumber them (they take turns;
  // sim/shared_machine.h). 0 (absent): one core per rank.
  int cores_per_node = 0;
  // GPUs in one NVLink domain (`cluster.nvlink_domain_gpus`, e.g. 72 for GB200 NVL72 racks of 4-GPU hosts): whole
  // nodes, dividing the cluster (or larger than it). 0 (absent): one node is the domain. sim/cluster_spec.h.
  int nvlink_domain_gpus = 0;
  std::optional<LinkSpec> intra_node;  // overrides the preset's NVLink figures
  std::optional<LinkSpec> inter_node;  // per GPU (one NIC per GPU)
  int world_size() const { return nodes * gpus_per_node; }
};

// cost_per_token ranks as tokens_per_second does (price per GPU-hour / tokens per GPU-hour) and reports the price.
enum class Objective { tokens_per_second, step_time, memory, cost_per_token };
std::string_view to_string(Objective o);

struct SearchSpace {
  std::vector<int> tp_degrees;  // default: divisors of world size up to 2 x gpus_per_node
  // HSDP replicate degrees (torchtitan's data_parallel_replicate_degree): each candidate's dp_shard is world / (tp x
  // dp_replicate). Default {1}: FSDP over the whole data-parallel dimension, as before HSDP existed.
  std::vector<int> dp_replicate = {1};
  // Context-parallel degrees (torchtitan's context_parallel_degree; plans/language/context_parallel.h): each
  // candidate's dp_shard is world / (tp x cp x dp_replicate), with the default rotate method (allgather) and load
  // balancing. Default {1}: no CP, the space as before CP existed.
  std::vector<int> cp_degrees = {1};
  // Expert-parallel degrees (torchtitan's expert_parallel_degree; plans/language/expert_parallel.h): each candidate
  // routes its experts over ep ranks of the sparse mesh. The default: a dense model {1} (any other value is refused in
  // one line); a mixture-of-experts model every degree its sparse mesh may take (default_ep_degrees(),
  // sim/search/space.h), which resolve_space() puts in place of an empty list and of this {1} when the key is not in
  // stated_at (neither the file nor --ep gave it).
  std::vector<int> ep_degrees = {1};
  // Pipeline parallelism (plans/language/pipeline_parallel.h): degrees, schedules (torch's names), microbatch sizes and
  // stages per rank, each pipeline candidate with torchtitan's default split of its stages; dp_shard = world / (pp x tp
  // x cp x dp_replicate). A pp 1 candidate ignores the schedules, microbatch sizes and stages per rank. Default {1}: no
  // PP, the space as before.
  std::vector<int> pp_degrees = {1};
  std::vector<PipelineScheduleKind> pp_schedules = {PipelineScheduleKind::one_f_one_b};
  std::vector<int64_t> pp_microbatch_sizes = {1};
  // Stages per pp rank (virtual stages, Plan::pp_stages_per_rank): 0 is the schedule's default (1 for GPipe and 1F1B,
  // 2 for the others); a value a schedule does not take, or more stages than the model's layers, is pruned.
  std::vector<int> pp_stages_per_rank = {0};
  std::vector<std::string> presets = {"vanilla", "sequence_parallel"};
  std::vector<std::string> plan_files;  // user plan files, resolved relative to the config file
  std::vector<Float8Recipe> float8 = search_float8_recipes(false);
  std::vector<bool> async_tp = {false, true};
  std::vector<bool> loss_parallel = {false, true};
  std::vector<ActivationCheckpointing> activation_checkpointing = {
      ActivationCheckpointing::none, ActivationCheckpointing::selective, ActivationCheckpointing::full};
  std::vector<int64_t> local_batch_sizes = {1, 2, 4};
  // > 0 (max_local_batch_size: N; instead of local_batch_sizes): each plan at its largest local batch in 1..N that
  // fits memory with the headroom, found by bisection (sim/search/search.h), not every size enumerated.
  int64_t max_local_batch_size = 0;
  // Sequence lengths (tokens per sequence) to search: each candidate lowers and simulates with training.seq_len set
  // to its own. Empty (no key): training.seq_len only. Each in limits::seq_len, no duplicates. Candidates at
  // different lengths compare per token (tokens/s per GPU, MFU); search.global_batch_size still counts sequences
  // (torchtitan's training.global_batch_size counts samples).
  std::vector<int64_t> seq_lens;
  // Activation checkpointing on the first k blocks only (Plan::ac_layers), as an axis: every policy but none is
  // searched on every block and on the first k blocks for each k listed (ascending, each in 1..n_layers - 1; the
  // config's n_layers itself is every block and is dropped). `all` in the file: every k in 1..n_layers - 1. Empty
  // (no key): every block only.
  std::vector<int64_t> ac_layers;
  Objective objective = Objective::tokens_per_second;
  double memory_headroom_gib = 2.0;
  // Constraints. global_batch_size (sequences per optimizer step, 0: none): local_batch_size x dp_shard x
  // dp_replicate must equal it, or, with gradient_accumulation true, divide it (the quotient is the candidate's
  // gradient_accumulation_steps; true needs global_batch_size). min_tokens_per_second_per_gpu (0: none): slower plans
  // are pruned after their simulation.
  int64_t global_batch_size = 0;
  bool gradient_accumulation = false;
  double min_tokens_per_second_per_gpu = 0;
  // USD per GPU-hour: objective cost_per_token needs it; with it, reports show the cost per million tokens.
  double gpu_hour_price = 0;
  // "dtensor" | "torchtitan-0.3": the family of the presets searched. torchtitan 0.3's knobs only: float8 defaults
  // to {none, rowwise, rowwise_with_gw_hp} (tensorwise is refused), loss_parallel is always on (the key is
  // refused), and the presets are its sharding with enable_sp false / true; compile follows training.compile (async
  // TP candidates compile).
  std::string framework = "dtensor";
  // The keys the config's search section states, each with "<file>:<line>" of the key: the others hold the defaults
  // above. For tools that replace a key's value with an option (tp-plan search --tp 4) and say what they replaced.
  std::map<std::string, std::string> stated_at;
};

struct Config {
  std::string path;  // the file it was loaded from ("<string>" for load_config_string)
  Model model;
  Training training;
  Cluster cluster;
  SearchSpace search;
  bool has_search = false;
};

// `hf_config`, when not empty, is a transformers config.json (plans/model/hf_config.h) that replaces the file's model
// section (the `--hf-config` option of the tools); the file may then omit `model`.
Config load_config(const std::string& path, const std::string& hf_config = {});
// For tests and tools: parse YAML text; `name` stands in for the file name in errors, and `base_dir` is where
// relative paths (model.hf_config, search.plans) are resolved from. `hf_config_text`, when given, is the text of the
// model's hf_config file as a run recorded it (a profile's program.hf_config_json, plans/language/config_record.h),
// read in place of the file; a model without hf_config is then an error.
Config load_config_string(const std::string& yaml, const std::string& name = "<string>",
                          const std::string& base_dir = {},
                          const std::optional<std::string>& hf_config_text = std::nullopt);

}  // namespace tptune
