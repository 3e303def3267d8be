#pragma once
// Export of a Plan as torchtitan configuration: the way back from a plan tptune chose to a training run.
//
// Three views of the same Plan:
//
//   export_torchtitan_cli(plan, ctx)  torchtitan 0.3 (`--format torchtitan`): a shell script that runs
//                                  `torchrun -m torchtitan.train --module llama3 --config <recipe>` with the overrides
//                                  of ConfigManager (--parallelism.tensor-parallel-degree, --parallelism.[no-]enable-
//                                  sequence-parallel, --parallelism.data-parallel-shard-degree, --training.local-batch-
//                                  size, --training.seq-len, --loss.num-chunks, --compile.[no-]enable,
//                                  --compile.[no-]enable-async-tensor-parallel, activation-checkpoint:MODE), and, for
//                                  what only Python sets (the float8 converter with filter_fqns=["lm_head"]; the 405B
//                                  recipe's converter), writes a config function wrapping the recipe first. It needs
//                                  the config (ExportContext): the recipe is the one whose model has the config
//                                  model's dimensions, torchrun starts nodes x gpus_per_node ranks (with a c10d
//                                  rendezvous at $MASTER_ADDR on several nodes). Errors, never an approximation:
//                                  float8 tensorwise (0.3 has rowwise recipes only), a model of no recipe, a world
//                                  other than the plan's, module styles other than the two of enable_sequence_parallel.
//                                  tests/integration/check_torchtitan_export.py feeds it through torchtitan's own
//                                  ConfigManager.
//
//   export_torchtitan_toml(plan, ctx) torchtitan before 0.3 (`--format torchtitan-toml`):   the job-config sections
//   torchtitan reads for this plan: [parallelism]
//                                  (tensor_parallel_degree, data_parallel_shard_degree, enable_async_tensor_parallel,
//                                  disable_loss_parallel), [activation_checkpoint] mode, [training] local_batch_size,
//                                  float8 ([model] converters + [quantize.linear.float8] recipe_name) and [compile]
//                                  when async TP needs it. Keys follow torchtitan's JobConfig as of its 2025 layout
//                                  (torchtitan/config/job_config.py: `quantize.linear.float8` replaced the older
//                                  top-level `[float8]`, and `[compile] enable/components` the older
//                                  `training.compile`). torchtitan's apply_tp always uses the sequence-parallel
//                                  module plan; for any other module plan (vanilla, a custom file) the TOML says so
//                                  in a NOTE and the python export is the faithful one.
//
//   export_python(plan, ctx)       the parallelize_module plan dict with its imports: ColwiseParallel(...),
//                                  RowwiseParallel(output_layouts=Shard(1)), SequenceParallel(),
//                                  PrepareModuleInput(...), and torchao's Float8ColwiseParallel /
//                                  Float8RowwiseParallel / PrepareFloat8ModuleInput for block modules when float8 is
//                                  tensorwise (as torchtitan does: the embedding and the output projection stay bf16).
//                                  Keys are the plan's FQN patterns; parallelize_module expands `*` itself.
//                                  Arguments equal to torch's defaults are left out.
//
// All are pure functions of the Plan and the context (no I/O). A config model torchtitan's llama3 cannot express
// (a head_dim other than dim / n_heads, q/k/v biases: torchtitan_llama3_lacks in plans/export/torchtitan_recipe.h) is
// refused by both torchtitan exports (one line naming the feature): they would train another model. The python
// export is the parallelize_module dict, which holds for such a model too (ColwiseParallel shards a bias S(0) with
// its weight); it never throws for a plan that load_plan accepts, and neither does the TOML export for a model
// torchtitan expresses. The torchtitan 0.3 command throws tptune::Error (one line) for what it cannot run exactly.
//
// Expert parallelism (Plan::ep_degree > 1): torchtitan's ParallelismConfig.expert_parallel_degree (the same key in
// 0.3.0's config/configs.py and the 2025 job config) in the TOML's [parallelism] and, by that name, in the python
// export's header (the MoE styles are torchtitan's fixed plan, not dict entries). With a config's model, export_plan
// checks the sparse mesh first (check_expert_mesh, one line). A MoE model is no llama3: the TOML skips the llama3
// checks and says so; --format torchtitan refuses it (one line), since it names llama3 recipes only.
//
// A model with tied embeddings (Model::tie_word_embeddings) is refused by both torchtitan formats, naming the feature:
// torchtitan before 0.3 has no tying in llama3, and 0.3 ties only its 1B and 3B flavors, which no recipe trains. The
// python export (the parallelize_module dict) is the way out: a tied model's plan shards tok_embeddings and the output
// alike (the lowering refuses any other).

#include <optional>
#include <string>
#include <string_view>

#include "plans/language/config.h"
#include "plans/language/plan.h"
#include "plans/model/model.h"

namespace tptune {

enum class ExportFormat { torchtitan, torchtitan_toml, python };
// "torchtitan" | "torchtitan-toml" | "python"; throws tptune::Error naming `where` otherwise.
ExportFormat parse_export_format(const std::string& s, const std::string& where);

// What the exports need beyond the plan (from the config, when `tp-plan export --config` names one).
struct ExportContext {
  // The config's model. --format torchtitan needs it: the recipe is the torchtitan 0.3 llama3 recipe whose model has
  // exactly these dimensions (the name is not compared); any other model is refused (one line).
  std::optional<Model> model;
  int64_t seq_len = 0;          // 0: the recipe's
  std::optional<bool> compile;  // training.compile; unset: on exactly with async TP
  // The cluster; --format torchtitan needs it, and nodes x gpus_per_node must equal the plan's tp x dp_shard x
  // dp_replicate (torchrun starts that world).
  int nodes = 0, gpus_per_node = 0;
  int64_t n_layers = 0;  // the model's; 0: not known (a plan's ac_layers is then exported as AC on every block)
};
// The context of a config: its model, training seq_len and compile, cluster shape, n_layers.
ExportContext export_context(const Config& cfg);

// User text (a plan's family, its file name) for a comment line of generated code (shell, Python, TOML): every byte
// outside printable ASCII (newline, carriage return, other control characters, non-ASCII bytes) and the backslash
// as \xNN, so that the text cannot end the comment and become a line of code, and the file stays ASCII.
std::string comment_text(std::string_view text);
// A Python string literal of `text`: double-quoted, with the quote, the backslash and every byte outside printable
// ASCII written as \xNN, so that any text stays inside the literal (plan patterns, its use, are ASCII words).
std::string python_string(std::string_view text);

std::string export_torchtitan_cli(const Plan& plan, const ExportContext& ctx);
std::string export_torchtitan_toml(const Plan& plan, const ExportContext& ctx = {});
std::string export_python(const Plan& plan, const ExportContext& ctx = {});

// A plan's ac_layers = k (AC on the first k of L blocks) in torchtitan. torchtitan cannot name blocks; before 0.3 its
// layer-level selective AC (`[activation_checkpoint] mode = "selective"`, `selective_ac_option = "N"`) wraps every
// N-th block in full checkpointing: a counter incremented per block (layers.0 first) checkpoints when count % N == 0,
// i.e. layers N-1, 2N-1, ..., floor(L/N) blocks (torchtitan/distributed/activation_checkpoint.py, _apply_layer_sac;
// earlier _apply_ac_to_transformer_block in parallelize_llama.py). torchtitan 0.3 has no such option (FullAC and
// SelectiveAC wrap every block). With the full policy and floor(L/N) == k for some N the count, hence the recompute
// and the saved memory in tptune's model, is the same: `exact`, `every` the smallest such N. Otherwise `every` is the
// N whose floor(L/N) is closest to k (ties: more blocks), and the exports keep the policy on every block with a NOTE.
struct LayerAc {
  bool applies = false;  // 0 < k < L with a policy other than none (L known)
  bool exact = false;
  int64_t every = 0;   // N
  int64_t blocks = 0;  // floor(L / N)
};
LayerAc layer_ac(const Plan& plan, int64_t n_layers);
// The layers that setting checkpoints: "layers 1, 3, ..., 79" (N = 2, 40 blocks), "layer 79".
std::string every_nth_layers(const LayerAc& a);
std::string export_plan(const Plan& plan, ExportFormat f, const ExportContext& ctx = {});

// True when the plan's modules are exactly torchtitan's apply_tp plan (the `sequence_parallel` preset with the same
// loss_parallel), i.e. when the TOML alone reproduces the plan.
bool is_torchtitan_module_plan(const Plan& plan);

// The torch constructor expression of a placement: Replicate(), Shard(1), Shard(-1), Partial().
std::string torch_placement(const Placement& p);

}  // namespace tptune
