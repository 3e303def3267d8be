#include "tools/plan_options.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <vector>

#include "plans/language/nvlink_domain.h"
#include "plans/language/resolve/plan_resolve.h"
#include "plans/util/error.h"
#include "plans/util/json_text.h"
#include "plans/util/limits.h"
#include "plans/util/version.h"
#include "plans/util/yaml_util.h"

namespace tptune::tools {

namespace {

// The whole of `text` as a T (std::from_chars: no leading '+' or spaces, nothing after the number), or nothing.
template <class T>
std::optional<T> whole_number(const std::string& text) {
  T v{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

std::string integer_error(int64_t lo, int64_t hi, const std::string& text) {
  return fmt::format("expected an integer in {}..{}, got '{}'", lo, hi, yaml::shown(text, 40));
}

}  // namespace

CLI::Validator integer_option(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        const std::optional<int64_t> v = whole_number<int64_t>(text);
        return v && *v >= lo && *v <= hi ? std::string() : integer_error(lo, hi, text);
      },
      fmt::format("INT in {}..{}", lo, hi));
}

CLI::Validator integer_text(int64_t lo, int64_t hi, bool int32) {
  return CLI::Validator(
      [lo, hi, int32](std::string& text) -> std::string {
        const std::optional<int64_t> v = whole_number<int64_t>(text);
        const bool fits =
            v && (!int32 || (*v >= std::numeric_limits<int>::min() && *v <= std::numeric_limits<int>::max()));
        return fits ? std::string() : integer_error(lo, hi, text);
      },
      fmt::format("INT in {}..{}", lo, hi));
}

CLI::Validator number_option(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        const std::optional<double> v = whole_number<double>(text);
        if (v && std::isfinite(*v) && *v >= lo && *v <= hi) return {};
        return fmt::format("expected a number in [{}, {}], got '{}'", lo, hi, yaml::shown(text, 40));
      },
      fmt::format("NUMBER in [{}, {}]", lo, hi));
}

// The plan options' numbers are range-checked in resolve_plan() (check_option(), naming the option); integer_text()
// refuses here what is not a whole int64 ("abc", 99999999999999999999, which CLI11 would read as INT64_MAX).
void add_plan_options(CLI::App* cmd, PlanOptions& o, bool with_dp_shard) {
  const CLI::Validator degree = integer_text(limits::degree.lo, limits::degree.hi, true);
  cmd->add_option("config", o.config, "config YAML (model, training, cluster)")->required();
  cmd->add_option("--hf-config", o.hf_config, "a Hugging Face config.json that replaces the config's model section");
  auto* preset = cmd->add_option("--preset", o.preset, "plan preset: vanilla | sequence_parallel");
  auto* plan = cmd->add_option("--plan", o.plan_file, "plan YAML file");
  preset->excludes(plan);
  cmd->add_option("--framework", o.framework,
                  "dtensor (parallelize_module, the default) | torchtitan-0.3 (its sharding configs)");
  cmd->add_option("--tp", o.tp, "tensor-parallel degree")->check(degree);
  if (with_dp_shard) {
    cmd->add_option("--dp-shard", o.dp_shard, "data-parallel (FSDP) degree; default world/(tp x dp-replicate)")
        ->check(degree);
    cmd->add_option(
           "--dp-replicate", o.dp_replicate,
           "HSDP replicas of the dp-shard-sharded model (torchtitan data_parallel_replicate_degree); default 1")
        ->check(degree);
  }
  cmd->add_option("--cp", o.cp, "context-parallel degree (torchtitan context_parallel_degree); default 1")
      ->check(degree);
  cmd->add_option("--ep", o.ep,
                  "expert-parallel degree of a mixture of experts (torchtitan expert_parallel_degree); default 1");
  cmd->add_option("--cp-rotate", o.cp_rotate,
                  "how ring attention moves K/V: allgather (torch's default) | alltoall (a ring of cp-1 transfers)");
  cmd->add_flag("--no-cp-load-balance", o.no_cp_load_balance,
                "no head-tail load balancing of causal attention (torchtitan context_parallel_load_balancer None)");
  cmd->add_option("--pp", o.pp, "pipeline-parallel degree (torchtitan pipeline_parallel_degree); default 1")
      ->check(degree);
  cmd->add_option("--pp-schedule", o.pp_schedule,
                  "pipeline schedule: GPipe | 1F1B (default) | Interleaved1F1B | LoopedBFS | InterleavedZeroBubble | "
                  "ZBVZeroBubble | DualPipeV");
  cmd->add_option("--pp-microbatch-size", o.pp_microbatch_size,
                  "sequences per pipeline microbatch (torchtitan pipeline_parallel_microbatch_size); default 1")
      ->check(integer_text(limits::local_batch_size.lo, limits::local_batch_size.hi, false));
  cmd->add_option("--pp-stages-per-rank", o.pp_stages_per_rank,
                  "pipeline stages on each pp rank (virtual stages); default 1 for GPipe and 1F1B, 2 for the others")
      ->check(integer_text(limits::n_layers.lo, limits::n_layers.hi, true));
  cmd->add_option("--float8", o.float8, "none | tensorwise | rowwise | rowwise_with_gw_hp");
  cmd->add_option("--ac", o.ac, "activation checkpointing: none | selective | full");
  cmd->add_option("--ac-layers", o.ac_layers,
                  "checkpoint only the first N blocks (layers 0..N-1; Megatron-LM --recompute-method block "
                  "--recompute-num-layers N); 0: every block")
      ->check(integer_text(0, limits::n_layers.hi));
  cmd->add_option("--local-batch-size", o.local_batch_size, "sequences per data-parallel rank")
      ->check(integer_text(limits::local_batch_size.lo, limits::local_batch_size.hi));
  cmd->add_option("--global-batch-size", o.global_batch_size,
                  "sequences per optimizer step over all data-parallel ranks (torchtitan training.global_batch_size): "
                  "gradient accumulation steps = it / (local batch x dp-shard x dp-replicate)")
      ->check(integer_text(limits::global_batch_size.lo, limits::global_batch_size.hi));
  cmd->add_option("--loss-chunks", o.loss_chunks, "ChunkedLossWrapper chunks (torchtitan-0.3 default 8)")
      ->check(integer_text(1, 4096, true));
  auto* at = cmd->add_flag("--async-tp", o.async_tp, "micro-pipelined (async) TP; needs sequence parallel and compile");
  auto* nat = cmd->add_flag("--no-async-tp", o.no_async_tp, "no async TP (over a plan file's async_tp: true)");
  at->excludes(nat);
  auto* lp = cmd->add_flag("--loss-parallel", o.loss_parallel, "keep logits vocab-sharded for the loss");
  auto* nlp = cmd->add_flag("--no-loss-parallel", o.no_loss_parallel, "gather logits before the loss");
  lp->excludes(nlp);
  auto* c = cmd->add_flag("--compile", o.compile, "torch.compile the blocks (fused norms, rope, activations)");
  auto* nc = cmd->add_flag("--no-compile", o.no_compile, "eager blocks");
  c->excludes(nc);
}

CLI::App* add_plan_command(CLI::App& app, const std::string& name, const std::string& description, PlanOptions& o) {
  CLI::App* cmd = app.add_subcommand(name, description);
  add_plan_options(cmd, o);
  add_config_overrides(cmd, o.overrides);
  return cmd;
}

void add_config_overrides(CLI::App* cmd, ConfigOverrides& o) {
  cmd->add_option("--gpu", o.gpu,
                  "GPU preset replacing the config's cluster.gpu (h100-sxm, h200, b200, a100-sxm-80gb, cpu)");
  cmd->add_option("--nodes", o.nodes, "nodes, replacing the config's cluster.nodes")
      ->check(integer_text(limits::nodes.lo, limits::nodes.hi, true));
  cmd->add_option("--gpus-per-node", o.gpus_per_node, "GPUs per node, replacing the config's cluster.gpus_per_node")
      ->check(integer_text(limits::gpus_per_node.lo, limits::gpus_per_node.hi, true));
  cmd->add_option("--seq-len", o.seq_len, "tokens per sequence, replacing the config's training.seq_len")
      ->check(integer_text(limits::seq_len.lo, limits::seq_len.hi));
}

namespace {

// A command-line number must lie in its range (plans/util/limits.h), like the same key in a YAML file.
template <class T>
void check_option(const char* name, const std::optional<T>& v, limits::IntRange r) {
  if (v && (*v < r.lo || *v > r.hi))
    throw Error(fmt::format("{}: expected an integer in {}, got {}", name, yaml::range_text(r), *v));
}

// "<file>" when the config does not state the key (its default), "<file>:<line>" when known.
std::string config_at(const Config& cfg, const std::string& at) { return at.empty() ? cfg.path : at; }

}  // namespace

std::vector<AppliedOverride> apply_config_overrides(Config& cfg, const ConfigOverrides& o) {
  check_option("--nodes", o.nodes, limits::nodes);
  check_option("--gpus-per-node", o.gpus_per_node, limits::gpus_per_node);
  check_option("--seq-len", o.seq_len, limits::seq_len);
  std::vector<AppliedOverride> applied;
  Cluster& c = cfg.cluster;
  if (o.gpu) {
    if (o.gpu->empty()) throw Error("--gpu: expected a GPU preset name, got ''");
    if (c.cores_per_node > 0 && *o.gpu != "cpu")
      throw Error(fmt::format("--gpu {}: the config {} sets cluster.cores_per_node, which is for device: cpu only",
                              yaml::shown(*o.gpu), cfg.path));
    const std::string was = c.gpu.empty() ? std::string("inline spec") : c.gpu;
    applied.push_back({"--gpu", *o.gpu, "cluster.gpu", fmt::format("{} ({})", was, config_at(cfg, c.source))});
    c.gpu = *o.gpu;
    c.gpu_inline = YAML::Node();
    c.source = "--gpu";  // resolve_cluster() names it in its errors
  }
  if (o.nodes) {
    applied.push_back(
        {"--nodes", std::to_string(*o.nodes), "cluster.nodes", fmt::format("{} ({})", c.nodes, cfg.path)});
    c.nodes = *o.nodes;
  }
  if (o.gpus_per_node) {
    applied.push_back({"--gpus-per-node", std::to_string(*o.gpus_per_node), "cluster.gpus_per_node",
                       fmt::format("{} ({})", c.gpus_per_node, cfg.path)});
    c.gpus_per_node = *o.gpus_per_node;
  }
  if ((o.nodes || o.gpus_per_node) && int64_t{c.nodes} * c.gpus_per_node > limits::world_size.hi)
    throw Error(fmt::format("{}: {} nodes x {} GPUs per node = {} GPUs; expected at most {}",
                            o.nodes ? "--nodes" : "--gpus-per-node", c.nodes, c.gpus_per_node,
                            int64_t{c.nodes} * c.gpus_per_node, limits::world_size.hi));
  if (o.nodes || o.gpus_per_node)  // the config's NVLink domain must still be whole nodes of whole domains
    if (const std::string m = nvlink_domain_mismatch(c.nvlink_domain_gpus, c.nodes, c.gpus_per_node); !m.empty())
      throw Error(fmt::format("{}: {}'s cluster.nvlink_domain_gpus: {}",
                              o.gpus_per_node ? "--gpus-per-node" : "--nodes", cfg.path, m));
  if (o.seq_len) {
    applied.push_back({"--seq-len", std::to_string(*o.seq_len), "training.seq_len",
                       fmt::format("{} ({})", cfg.training.seq_len, cfg.path)});
    cfg.training.seq_len = *o.seq_len;
    // A search at this length only: search.seq_lens, when the config lists lengths, is replaced too.
    if (auto it = cfg.search.stated_at.find("seq_lens"); it != cfg.search.stated_at.end())
      applied.push_back({"--seq-len", std::to_string(*o.seq_len), "search.seq_lens",
                         fmt::format("[{}] ({})", fmt::join(cfg.search.seq_lens, ", "), it->second)});
    cfg.search.seq_lens.clear();
  }
  return applied;
}

Config load_options_config(const PlanOptions& o) {
  Config cfg = load_config(o.config, o.hf_config);
  apply_config_overrides(cfg, o.overrides);
  return cfg;
}

std::string config_override_args(const ConfigOverrides& o) {
  std::string out;
  if (o.gpu) out += " --gpu " + *o.gpu;
  if (o.nodes) out += fmt::format(" --nodes {}", *o.nodes);
  if (o.gpus_per_node) out += fmt::format(" --gpus-per-node {}", *o.gpus_per_node);
  if (o.seq_len) out += fmt::format(" --seq-len {}", *o.seq_len);
  return out;
}

void check_plan_option_ranges(const PlanOptions& o) {
  check_option("--tp", o.tp, limits::degree);
  check_option("--dp-shard", o.dp_shard, limits::degree);
  check_option("--dp-replicate", o.dp_replicate, limits::degree);
  check_option("--cp", o.cp, limits::degree);
  check_option("--ep", o.ep, limits::degree);
  check_option("--pp", o.pp, limits::degree);
  check_option("--pp-microbatch-size", o.pp_microbatch_size, limits::local_batch_size);
  check_option("--pp-stages-per-rank", o.pp_stages_per_rank, limits::n_layers);
  check_option("--local-batch-size", o.local_batch_size, limits::local_batch_size);
  check_option("--global-batch-size", o.global_batch_size, limits::global_batch_size);
}

void refuse_no_loss_parallel_under_torchtitan() {
  throw Error("--no-loss-parallel: torchtitan 0.3 always runs the vocab-parallel loss under TP (no switch)");
}

Plan resolve_plan(Config& cfg, const PlanOptions& o, int default_tp) {
  check_plan_option_ranges(o);
  const std::string from_config = fmt::format("config {}", cfg.path);
  Plan plan;
  if (!o.plan_file.empty()) {
    plan = load_plan(o.plan_file);
    // Values the file does not state come from the config (and the same defaults a preset gets), never from the
    // Plan struct's defaults.
    auto unstated = [&](const char* k) { return plan.stated.count(k) == 0; };
    if (unstated("tp_degree")) {
      plan.tp_degree = default_tp > 0 ? default_tp : cfg.cluster.gpus_per_node;
      plan.provenance["tp_degree"] = default_tp > 0 ? "MPI world size" : "cluster.gpus_per_node of the config";
    }
    if (unstated("dp_shard")) plan.dp_shard = 0;  // world / tp below
    if (unstated("activation_checkpointing")) {
      plan.activation_checkpointing = cfg.training.activation_checkpointing;
      plan.provenance["activation_checkpointing"] = from_config;
    }
    // ac_layers has no config key: a file that does not state it checkpoints every block (0).
    if (unstated("local_batch_size")) {
      plan.local_batch_size = cfg.training.local_batch_size;
      plan.provenance["local_batch_size"] = from_config;
    }
    // A plan chosen for a sequence length (tp-plan search over search.seq_lens) runs at it: the config's
    // training.seq_len is what the lowering, the reports and the exports read.
    // --seq-len (ConfigOverrides, applied to cfg already) takes precedence, as every option does.
    if (!unstated("seq_len") && !o.overrides.seq_len) {
      cfg.training.seq_len = plan.seq_len;
      plan.provenance["training.seq_len"] = plan.provenance["seq_len"];
    }
  } else {
    if (o.preset.empty()) throw Error("expected --preset NAME or --plan FILE");
    plan = preset_base_plan(cfg, o.preset, default_tp);  // dp_shard 0: filled below
  }
  auto option = [&](const char* key, const char* flag) { plan.provenance[key] = fmt::format("option {}", flag); };
  if (o.framework) {
    Framework f = parse_framework(*o.framework, "--framework");
    if (f != plan.framework) {
      plan.loss_chunks = 0;  // the new framework's default
      if (f == Framework::dtensor) plan.loss_parallel = o.preset == "sequence_parallel";
    }
    apply_framework(plan, f);
    option("framework", "--framework");
  }
  if (o.tp) plan.tp_degree = *o.tp, option("tp_degree", "--tp");
  if (plan.tp_degree < 1) throw Error(fmt::format("--tp: expected a positive integer, got {}", plan.tp_degree));
  if (o.float8) plan.float8 = parse_float8(*o.float8, "--float8"), option("float8", "--float8");
  if (o.ac)
    plan.activation_checkpointing = parse_activation_checkpointing(*o.ac, "--ac"),
    option("activation_checkpointing", "--ac");
  // The range against the model's n_layers, and the policy it needs, are lower()'s checks (naming this option).
  if (o.ac_layers) {
    if (*o.ac_layers < 0 || *o.ac_layers > limits::n_layers.hi)
      throw Error(fmt::format("--ac-layers: expected an integer in 0 to {} (0: every block), got {}",
                              limits::n_layers.hi, *o.ac_layers));
    plan.ac_layers = *o.ac_layers, option("ac_layers", "--ac-layers");
  }
  if (o.local_batch_size) plan.local_batch_size = *o.local_batch_size, option("local_batch_size", "--local-batch-size");
  if (o.loss_chunks) {
    if (*o.loss_chunks < 1 || *o.loss_chunks > 4096)
      throw Error(fmt::format("--loss-chunks: expected 1 to 4096, got {}", *o.loss_chunks));
    plan.loss_chunks = *o.loss_chunks, option("loss_chunks", "--loss-chunks");
  }
  if (o.async_tp) plan.async_tp = true, option("async_tp", "--async-tp");
  if (o.no_async_tp) plan.async_tp = false, option("async_tp", "--no-async-tp");
  if (o.overrides.seq_len) {
    if (plan.seq_len > 0) plan.seq_len = *o.overrides.seq_len;  // the plan file's is replaced
    option("training.seq_len", "--seq-len");
  }
  if (o.loss_parallel) plan.loss_parallel = true, option("loss_parallel", "--loss-parallel");
  if (o.no_loss_parallel) {
    if (plan.framework == Framework::torchtitan_0_3) refuse_no_loss_parallel_under_torchtitan();
    plan.loss_parallel = false, option("loss_parallel", "--no-loss-parallel");
  }
  if (o.dp_replicate) plan.dp_replicate = *o.dp_replicate, option("dp_replicate", "--dp-replicate");
  if (o.dp_shard) plan.dp_shard = *o.dp_shard, option("dp_shard", "--dp-shard");
  if (o.cp) plan.cp_degree = *o.cp, option("cp_degree", "--cp");
  if (o.ep) plan.ep_degree = *o.ep, option("ep_degree", "--ep");
  if (o.cp_rotate)
    plan.cp_rotate = parse_cp_rotate(*o.cp_rotate, "--cp-rotate"), option("cp_rotate_method", "--cp-rotate");
  if (o.no_cp_load_balance) plan.cp_load_balance = false, option("cp_load_balance", "--no-cp-load-balance");
  if (o.pp) plan.pp_degree = *o.pp, option("pp_degree", "--pp");
  if (o.pp_schedule)
    plan.pp_schedule = parse_pipeline_schedule(*o.pp_schedule, "--pp-schedule"), option("pp_schedule", "--pp-schedule");
  if (o.pp_microbatch_size)
    plan.pp_microbatch_size = *o.pp_microbatch_size, option("pp_microbatch_size", "--pp-microbatch-size");
  if (o.pp_stages_per_rank)
    plan.pp_stages_per_rank = *o.pp_stages_per_rank, option("pp_stages_per_rank", "--pp-stages-per-rank");
  check_parallel_keys(plan);  // before the mesh: --pp-schedule at pp 1 is that, not a mesh error
  resolve_dp_shard(cfg, plan, "--tp");
  resolve_gradient_accumulation(cfg, o.global_batch_size, plan);
  if (cfg.training.compile) plan.provenance["compile"] = from_config;
  if (o.compile) cfg.training.compile = true, option("compile", "--compile");
  if (o.no_compile) cfg.training.compile = false, option("compile", "--no-compile");
  if (!o.preset.empty()) plan = preset_plan(o.preset, plan);  // re-derive the modules with the final toggles
  return plan;
}

std::string effective_values_text(const Config& cfg, const Plan& plan, std::string_view gpu_architecture) {
  auto src = [&](const char* k, const char* fallback) {
    auto it = plan.provenance.find(k);
    return it != plan.provenance.end() ? it->second : std::string(fallback);
  };
  const char* dflt = plan.source.starts_with("preset:") ? "preset" : "default (not in the plan file)";
  const std::string from_config = fmt::format("config {}", cfg.path);
  std::string out = "effective values (value, where it came from):\n";
  auto row = [&](const char* k, const std::string& v, const std::string& from) {
    out += fmt::format("  {:<26} {:<12} {}\n", k, v, from);
  };
  row("framework", std::string(to_string(plan.framework)), src("framework", dflt));
  row("tp_degree", std::to_string(plan.tp_degree), src("tp_degree", dflt));
  row("dp_shard", std::to_string(plan.dp_shard), src("dp_shard", dflt));
  if (plan.dp_replicate != 1 || plan.provenance.count("dp_replicate"))
    row("dp_replicate", std::to_string(plan.dp_replicate), src("dp_replicate", dflt));
  if (plan.cp_degree != 1 || plan.provenance.count("cp_degree")) {
    row("cp_degree", std::to_string(plan.cp_degree), src("cp_degree", dflt));
    row("cp_rotate_method", std::string(to_string(plan.cp_rotate)), src("cp_rotate_method", dflt));
    row("cp_load_balance", plan.cp_load_balance ? "true" : "false", src("cp_load_balance", dflt));
  }
  if (plan.ep_degree != 1 || plan.provenance.count("ep_degree"))
    row("ep_degree", std::to_string(plan.ep_degree), src("ep_degree", dflt));
  if (plan.pp_degree != 1 || plan.provenance.count("pp_degree")) {
    row("pp_degree", std::to_string(plan.pp_degree), src("pp_degree", dflt));
    row("pp_schedule", std::string(to_string(plan.pp_schedule)), src("pp_schedule", dflt));
    row("pp_microbatch_size", std::to_string(plan.pp_microbatch_size), src("pp_microbatch_size", dflt));
    row("pp_stages_per_rank",
        plan.pp_stages_per_rank > 0 ? std::to_string(plan.pp_stages_per_rank)
                                    : std::to_string(default_stages_per_rank(plan.pp_schedule)),
        src("pp_stages_per_rank", "the schedule's default"));
    if (!plan.pp_split.empty())
      row("pp_split", fmt::format("[{}]", fmt::join(plan.pp_split, ", ")), src("pp_split", dflt));
  }
  row("local_batch_size", std::to_string(plan.local_batch_size), src("local_batch_size", dflt));
  if (plan.gradient_accumulation_steps != 1 || plan.provenance.count("gradient_accumulation_steps"))
    row("gradient_accumulation_steps", std::to_string(plan.gradient_accumulation_steps),
        src("gradient_accumulation_steps", dflt));
  row("activation_checkpointing", std::string(to_string(plan.activation_checkpointing)),
      src("activation_checkpointing", dflt));
  if (plan.ac_layers > 0 || plan.provenance.count("ac_layers"))
    row("ac_layers", std::to_string(plan.ac_layers), src("ac_layers", dflt));
  row("float8", std::string(to_string(plan.float8)), src("float8", dflt));
  row("async_tp", plan.async_tp ? "true" : "false", src("async_tp", dflt));
  row("loss_parallel", plan.loss_parallel ? "true" : "false",
      plan.framework == Framework::torchtitan_0_3 ? "torchtitan 0.3 (always on)" : src("loss_parallel", dflt));
  row("loss_chunks", std::to_string(plan.chunks()), src("loss_chunks", "framework default"));
  if (cfg.model.gqa != Gqa::enable_gqa && cfg.model.n_kv_heads < cfg.model.n_heads)  // the default is not listed
    row("model.gqa", std::string(to_string(cfg.model.gqa)), from_config);
  row("training.dtype", std::string(to_string(cfg.training.dtype)), fmt::format("config {}", cfg.path));
  row("training.seq_len", std::to_string(cfg.training.seq_len), src("training.seq_len", from_config.c_str()));
  row("training.compile", cfg.training.compiled(plan.async_tp) ? "true" : "false",
      src("compile", "default (torchtitan's llama3 recipes: on exactly with async TP)"));
  const Training& t = cfg.training;
  const SdpaBackend kernel =
      resolve_sdpa_backend(t.sdpa_backend, plan.attention_kernel, t.torch_version, gpu_architecture, t.sdpa_backend_at);
  const std::string reason =
      sdpa_backend_reason(t.sdpa_backend, plan.attention_kernel, t.torch_version, gpu_architecture);
  row("training.sdpa_backend", kernel == SdpaBackend::auto_ ? "device" : std::string(to_string(kernel)),
      t.sdpa_backend == SdpaBackend::auto_ ? reason : from_config);
  if (t.torch_version) row("training.torch_version", t.torch_version->str(), from_config);
  return out;
}

nlohmann::json sdpa_backend_json(const Training& t, const Plan& plan, std::string_view gpu_architecture) {
  const SdpaBackend kernel =
      resolve_sdpa_backend(t.sdpa_backend, plan.attention_kernel, t.torch_version, gpu_architecture, t.sdpa_backend_at);
  nlohmann::json j = {
      {"value", kernel == SdpaBackend::auto_ ? "device" : std::string(to_string(kernel))},
      {"setting", std::string(to_string(t.sdpa_backend))},
      {"why", sdpa_backend_reason(t.sdpa_backend, plan.attention_kernel, t.torch_version, gpu_architecture)}};
  if (t.torch_version) j["torch_version"] = t.torch_version->str();
  return j;
}

std::vector<NamedPath> plan_inputs(const PlanOptions& o) {
  return {{"config", o.config}, {"--hf-config", o.hf_config}, {"--plan", o.plan_file}};
}

void write_json(const nlohmann::json& j, const std::string& where, const std::string& option) {
  const std::string text = json_dump(with_version_stamp(j), 2) + "\n";
  if (where == "-") {
    std::cout << text;
    return;
  }
  write_output(option, where, text);
}

}  // namespace tptune::tools
