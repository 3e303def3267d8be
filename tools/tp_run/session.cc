#include "tools/tp_run/session.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "plans/language/pipeline_parallel.h"
#include "plans/language/resolve/shrink.h"
#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "plans/util/input_file.h"
#include "plans/util/limits.h"
#include "plans/util/yaml_util.h"
#include "tools/tp_run/watchdog.h"

namespace tptune::tools {

World mpi_world() {
  World w;
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.size);
  set_process_rank(w.rank, w.size);
  MPI_Comm node;
  {
    const WatchdogScope watch("MPI_Comm_split_type (finding the ranks on this node, collective over every rank)");
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w.rank, MPI_INFO_NULL, &node);
  }
  MPI_Comm_rank(node, &w.local_rank);
  MPI_Comm_size(node, &w.local_size);
  MPI_Comm_free(&node);
  w.launch = detect_launch();
  return w;
}

void print0(const World& w, const std::string& text) {
  if (w.rank != 0) return;
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
}

void refuse_stdout_through_launcher(const World& w, std::string_view option, const std::string& path) {
  if (path == "-" && stdout_through_launcher(w.launch))
    throw Error(fmt::format(
        "{} -: standard output passes through {}, which loses what it cannot write without an error (exit 0); "
        "write the JSON to a file: {} FILE",
        option, w.launch.launcher, option));
}

namespace {

// Completes `req` or, after the watchdog timeout, prints one line naming `what` and aborts every rank.
void wait_or_abort(const World& w, MPI_Request& req, const char* what) {
  using Clock = std::chrono::steady_clock;
  const double timeout_s = process_timeout();
  if (timeout_s <= 0) {
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    return;
  }
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  int done = 0;
  while (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) {
    if (Clock::now() > deadline) {
      std::fprintf(stderr,
                   "tp-run: error (rank %d of %d): %s did not complete within %g s (tp-run --timeout): a peer rank "
                   "is stopped, hung or slower than the timeout\n",
                   w.rank, w.size, what, timeout_s);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
}

}  // namespace

void add_timeout_option(CLI::App* cmd, double& seconds) {
  cmd->add_option("--timeout", seconds,
                  "seconds a collective may wait for its peers before every rank is ended with an error naming it "
                  "(default 300; 0 waits forever)");
}

void set_watchdog_timeout(double seconds) {
  if (!(seconds >= 0 && seconds <= 1e6))
    throw Error(fmt::format("--timeout: expected seconds in [0, 1e6] (0 waits forever), got {}", seconds));
  set_process_timeout(seconds);
}

double watchdog_timeout() { return process_timeout(); }

bool agree_on_error(const World& w, const std::string& error) {
  int mine = error.empty() ? w.size : w.rank, first = w.size, failed = error.empty() ? 0 : 1, n_failed = 0;
  MPI_Request reqs[2];
  MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &reqs[0]);
  MPI_Iallreduce(&failed, &n_failed, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &reqs[1]);
  wait_or_abort(w, reqs[0], "agreeing on errors (an all-reduce of every rank's status)");
  wait_or_abort(w, reqs[1], "agreeing on errors (an all-reduce of every rank's status)");
  if (first == w.size) return true;
  if (w.rank == first) {
    if (n_failed == w.size)
      std::fprintf(stderr, "tp-run: error: %s\n", yaml::shown(error, 2000).c_str());
    else
      std::fprintf(stderr, "tp-run: error (rank %d of %d): %s\n", w.rank, w.size, yaml::shown(error, 2000).c_str());
    std::fflush(stderr);
  }
  return false;
}

bool agreed(const World& w, const std::function<void()>& fn) {
  std::string error;
  try {
    fn();
  } catch (const Error& e) {
    error = e.what();
  } catch (const std::exception& e) {
    error = fmt::format("internal error: {}", e.what());
  }
  return agree_on_error(w, error);
}

void or_abort(const World& w, const std::function<void()>& fn) {
  std::string error;
  try {
    fn();
    return;
  } catch (const Error& e) {
    error = e.what();
  } catch (const std::exception& e) {
    error = fmt::format("internal error: {}", e.what());
  }
  std::fprintf(stderr, "tp-run: error (rank %d of %d): %s\n", w.rank, w.size, yaml::shown(error, 2000).c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 2);
}

void maybe_inject_failure(const World& w) {
  const char* v = std::getenv("TPTUNE_TP_RUN_FAIL_RANK");
  if (v && std::atoi(v) == w.rank)
    throw Error(
        fmt::format("injected failure (TPTUNE_TP_RUN_FAIL_RANK={}): one rank fails while its peers wait in a "
                    "collective",
                    w.rank));
}

namespace {

uint64_t fnv1a(const std::string& s, uint64_t h = 0xCBF29CE484222325ull) {
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

void refuse_unsupported(const Program& p) {
  if (p.model.mla.kv_lora_rank > 0)  // (its attention's v heads differ from q's: AttentionOp::v_head_dim)
    throw Error(
        fmt::format("{}: multi-head latent attention (model.mla) is simulated and explained only; the CPU "
                    "runtime does not execute it",
                    p.plan.source));
  if (p.model.dense_first_blocks() > 0 && p.model.dense_first_blocks() < p.model.n_layers)  // two block templates
    throw Error(
        fmt::format("{}: model.moe.dense_layers {}: dense blocks before the MoE blocks are simulated and explained "
                    "only; the CPU runtime does not execute them",
                    p.plan.source, p.model.moe.dense_layers));
  if (p.plan.framework != Framework::dtensor || p.plan.fused_qkv || p.plan.loss_chunks > 1)
    throw Error(
        fmt::format("{}: the {} plan family (fused wqkv, chunked loss) is simulated and explained only; the "
                    "CPU runtime executes DTensor-family plans (framework: dtensor)",
                    p.plan.source, to_string(p.plan.framework)));
  for (const Segment& s : p.segments)
    for (const Op& op : s.ops)
      if (const auto* c = std::get_if<CastFp8Op>(&op.kind); c && c->rowwise)
        throw Error(
            fmt::format("{}: float8 rowwise is modelled by the simulator only; the CPU runtime runs float8 "
                        "none or tensorwise (--float8 tensorwise)",
                        op.name));
}

}  // namespace

RunSetup make_setup(const World& w, PlanOptions o, bool with_reference, const std::string& command, bool shrink) {
  RunSetup s;
  s.config = load_config(o.config, o.hf_config);
  const bool asked_dp = o.dp_shard.has_value() && *o.dp_shard != 1;
  // --dp-replicate is noted and dropped below; out of its range resolve_plan() names it, otherwise it must not make
  // the default dp_shard (world / (tp x dp_replicate)) fail for a value tp-run does not use.
  const std::optional<int> asked_replicate_value = o.dp_replicate;
  if (o.dp_replicate && *o.dp_replicate >= limits::degree.lo && *o.dp_replicate <= limits::degree.hi)
    o.dp_replicate.reset();
  // A global batch (--global-batch-size or training.global_batch_size) is noted and dropped too: tp-run runs one
  // microbatch, and its divisibility by tp-run's own data-parallel degree (1) is not the simulated plan's.
  std::string asked_global;
  if (o.global_batch_size && *o.global_batch_size >= limits::global_batch_size.lo &&
      *o.global_batch_size <= limits::global_batch_size.hi) {
    asked_global = fmt::format("--global-batch-size {}", *o.global_batch_size);
    o.global_batch_size.reset();
  } else if (!o.global_batch_size && s.config.training.global_batch_size > 0) {
    asked_global = fmt::format("training.global_batch_size {} ({})", s.config.training.global_batch_size,
                               s.config.training.global_batch_size_at);
  }
  s.config.training.global_batch_size = 0;
  // A preset, or a plan file that states no tp_degree, runs at the world size (over --cp and --pp) unless told
  // otherwise.
  const int asked_cp = o.cp && *o.cp >= 1 && w.size % *o.cp == 0 ? *o.cp : 1;
  const int asked_pp = o.pp && *o.pp >= 1 && w.size / asked_cp % *o.pp == 0 ? *o.pp : 1;
  s.plan = resolve_plan(s.config, o, w.size / asked_cp / asked_pp);
  const int cp = s.plan.cp_degree, pp = s.plan.pp_degree;
  if (cp > 1) {
    auto it = s.plan.provenance.find("cp_degree");
    const std::string where =
        fmt::format("{}: cp_degree {}", it != s.plan.provenance.end() ? it->second : s.plan.source, cp);
    if (command != "verify")
      throw Error(fmt::format("{}: tp-run {} does not run context parallelism yet; `tp-run verify` does (on CPU)",
                              where, command));
    if (s.plan.float8 != Float8Recipe::none)
      throw Error(
          fmt::format("{}: float8 with context parallelism is simulated only; verify the plan with "
                      "--float8 none",
                      where));
  }
  if (pp > 1) {
    const std::string where = fmt::format("{}: pp_degree {}", plan_key_origin(s.plan, "pp_degree"), pp);
    if (command != "verify" && command != "profile")
      throw Error(fmt::format(
          "{}: tp-run {} does not run pipeline parallelism yet; `tp-run verify` and `tp-run profile` do (on CPU)",
          where, command));
    if (cp > 1)
      throw Error(fmt::format("{}: pipeline with context parallelism is simulated only; tp-run verify runs one of them",
                              where));
    if (s.plan.float8 != Float8Recipe::none)
      throw Error(
          fmt::format("{}: float8 with pipeline parallelism is simulated only; verify the plan with "
                      "--float8 none",
                      where));
  }
  if (s.config.model.moe.experts > 0) {
    // A mixture of experts runs in `tp-run verify` on the CPU backend, its ep group inside the TP group (tp-run runs
    // dp_shard 1, so ep divides tp); what else it needs is not built.
    const std::string where = fmt::format("{}: a mixture-of-experts model (model.moe)", s.plan.source);
    if (command != "verify")
      throw Error(fmt::format("{}: tp-run {} does not run it yet; `tp-run verify` does (on CPU)", where, command));
    if (pp > 1)  // (the lowering plans it: tp-plan simulates, explains and exports it)
      throw Error(
          fmt::format("{}: pp_degree {}: the pipeline runtime (runtime/pipeline/) does not run a mixture of "
                      "experts' stages; simulated and explained only",
                      where, pp));
    if (s.plan.ep_degree > 1 && (cp > 1 || s.plan.tp_degree % s.plan.ep_degree != 0))
      throw Error(
          fmt::format("{}: tp-run verify runs ep_degree {} inside the TP group: ep must divide tp ({}) and cp be 1 "
                      "(tp-run runs dp_shard 1)",
                      where, s.plan.ep_degree, s.plan.tp_degree));
    if (s.plan.float8 != Float8Recipe::none)
      throw Error(
          fmt::format("{}: float8 with mixture of experts is simulated only; verify with --float8 none", where));
  }
  if (asked_dp || (!o.plan_file.empty() && !o.dp_shard && s.plan.stated.count("dp_shard") && s.plan.dp_shard != 1))
    s.notes.push_back(
        fmt::format("note: dp_shard {} forced to 1: tp-run runs one data-parallel replica (one MPI "
                    "process per TP rank)",
                    s.plan.dp_shard));
  s.plan.dp_shard = 1;
  const int replicate = asked_replicate_value.value_or(s.plan.dp_replicate);
  if (replicate != 1)
    s.notes.push_back(
        fmt::format("note: dp_replicate {} forced to 1: tp-run runs one data-parallel replica (one MPI "
                    "process per TP rank; HSDP's replicate all-reduces are simulated only)",
                    replicate));
  s.plan.dp_replicate = 1;
  if (s.plan.gradient_accumulation_steps != 1)
    s.notes.push_back(fmt::format(
        "note: gradient_accumulation_steps {} forced to 1: tp-run runs one microbatch (one forward and backward per "
        "step; accumulation is simulated only)",
        s.plan.gradient_accumulation_steps));
  else if (!asked_global.empty())
    s.notes.push_back(fmt::format(
        "note: {} not applied: tp-run runs one microbatch (gradient_accumulation_steps 1; accumulation is simulated "
        "only)",
        asked_global));
  s.plan.gradient_accumulation_steps = 1;
  if (w.size == 1 && w.launch.size > 1)
    throw Error(fmt::format(
        "{} started {} processes but MPI sees a world of 1 (this is one of {} singletons): tp-run's MPI library "
        "cannot talk to the launcher; with srun add --mpi=pmix (see `srun --mpi=list`), or use the mpirun of the MPI "
        "tp-run was built with",
        w.launch.launcher, w.launch.size, w.launch.size));
  const int64_t ranks = int64_t{s.plan.tp_degree} * cp * pp;
  if ((cp > 1 || pp > 1) && ranks != w.size) {
    const std::string mesh =
        fmt::format("tp {}{}{} = {} ranks", s.plan.tp_degree, cp > 1 ? fmt::format(" x cp {}", cp) : "",
                    pp > 1 ? fmt::format(" x pp {}", pp) : "", ranks);
    if (w.size == 1 && ranks <= limits::world_size.hi)
      throw Error(
          fmt::format("the plan has {} but tp-run runs one MPI process per rank and this is a single "
                      "process: start it as `{}`",
                      mesh, start_hint(w.launch, int(ranks), command)));
    throw Error(
        fmt::format("the plan has {} but mpirun started {} processes: tp-run runs one MPI process per rank "
                    "of the mesh (mpirun -np {}, or a --tp that makes {})",
                    mesh, w.size, ranks, w.size));
  }
  if (cp == 1 && pp == 1 && s.plan.tp_degree != w.size) {
    if (w.size == 1)
      throw Error(
          fmt::format("the plan has tp {} but tp-run runs one MPI process per TP rank and this is a single "
                      "process: start it as `{}`",
                      s.plan.tp_degree, start_hint(w.launch, s.plan.tp_degree, command)));
    throw Error(
        fmt::format("the plan has tp {} but mpirun started {} processes: tp must equal the number of MPI "
                    "processes (mpirun -np {}, or --tp {})",
                    s.plan.tp_degree, w.size, s.plan.tp_degree, w.size));
  }
  if (w.size == 1)
    s.notes.push_back(
        fmt::format("note: one MPI process, so tp 1: the sharded and the unsharded step are the same "
                    "Program (start with `mpirun -np N tp-run {} ...` for tp N)",
                    command));
  const int64_t n_layers_before = s.config.model.n_layers;
  if (shrink) {
    const Shrunk small = shrink_for_verify(s.config.model, s.config.training, s.plan);
    s.config.model = small.model;
    s.config.training = small.training;
    s.notes.push_back(
        fmt::format("shrunk for --shrink (same plan, tp {}, head grouping {}:1): {}", s.plan.tp_degree,
                    small.model.n_heads / small.model.n_kv_heads,
                    small.changes.empty() ? "nothing to shrink" : fmt::format("{}", fmt::join(small.changes, ", "))));
  }
  if (pp > 1 && shrink && s.plan.pp_split.empty()) {
    // Enough blocks for every stage of torchtitan's default split (one per stage), at most the real model's.
    const int64_t stages = int64_t{pp} * (s.plan.pp_stages_per_rank > 0 ? s.plan.pp_stages_per_rank
                                                                        : default_stages_per_rank(s.plan.pp_schedule));
    const int64_t layers = std::max(s.config.model.n_layers, std::min(stages, n_layers_before));
    if (layers != s.config.model.n_layers)
      s.notes.push_back(fmt::format("shrunk model keeps {} blocks: one per stage of pp {} x {} stages per rank", layers,
                                    pp, stages / pp));
    s.config.model.n_layers = layers;
  }
  if (pp > 1) {
    // One microbatch of the whole model: the pipeline runs it once per (stage, microbatch) action.
    Plan micro = pipeline_microbatch_plan(s.plan);
    micro.pp_degree = 1;
    s.sharded = lower(s.config.model, s.config.training, micro);
  } else {
    s.sharded = lower(s.config.model, s.config.training, s.plan);
  }
  refuse_unsupported(s.sharded);
  if (with_reference) {
    Plan ref = s.plan;
    ref.tp_degree = 1;
    ref.cp_degree = 1;     // the whole sequence on one rank
    ref.pp_degree = 1;     // every layer, the whole local batch at once
    ref.ep_degree = 1;     // every expert on the one rank
    ref.async_tp = false;  // a ring of one step is the plain GEMM; lowering drops TP at tp 1 anyway
    s.reference = lower(s.config.model, s.config.training, ref);
    refuse_unsupported(s.reference);
  }
  return s;
}

void check_same_everywhere(const World& w, const std::string& config_path, const Model& model, const Plan& plan,
                           const std::string& options) {
  maybe_stop_at("consistency");
  // Nothing may throw before the broadcast: a rank that skipped it would leave its peers waiting.
  uint64_t mine[3] = {0, 0, 0};
  std::string error;
  try {
    mine[0] =
        fnv1a(read_input_file(config_path, "config YAML") +
              fmt::format("\nmodel {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}", model.name, model.dim, model.n_layers,
                          model.n_heads, model.n_kv_heads, model.ffn_dim, model.vocab_size, to_string(model.mlp),
                          to_string(model.norm), model.norm_eps, model.rope_theta, model.explicit_head_dim,
                          model.qkv_bias, model.tie_word_embeddings, to_string(model.gqa)));
    mine[1] = fnv1a(plan_to_yaml(plan));
    mine[2] = fnv1a(options);
  } catch (const std::exception& e) {
    error = e.what();
  }
  uint64_t root[3] = {mine[0], mine[1], mine[2]};
  MPI_Request req;
  MPI_Ibcast(root, 3, MPI_UINT64_T, 0, MPI_COMM_WORLD, &req);
  wait_or_abort(w, req, "checking that every rank runs the same config (a broadcast from rank 0)");
  if (!error.empty()) throw Error(error);
  std::vector<std::string> what;
  if (mine[0] != root[0]) what.push_back(fmt::format("the config file {} (or the model it resolves to)", config_path));
  if (mine[1] != root[1]) what.push_back("the resolved plan");
  if (mine[2] != root[2]) what.push_back("the options (seed, warm-up, iterations)");
  if (!what.empty())
    throw Error(fmt::format(
        "{} differ{} from rank 0's (hashes of config, plan, options {:016x} {:016x} {:016x}, "
        "rank 0 {:016x} {:016x} {:016x}): every rank must run the same config and plan",
        fmt::join(what, " and "), what.size() == 1 ? "s" : "", mine[0], mine[1], mine[2], root[0], root[1], root[2]));
}

}  // namespace tptune::tools
