#pragma once
// Pipeline parallelism (PP) in a plan: which schedule, how many microbatches, and which layers each stage holds, as
// torchtitan builds them (pytorch/torchtitan b5bcd76, torchtitan/distributed/pipeline_parallel.py; the schedules
// themselves, each rank's ordered actions, are sim/pipeline/schedule.h).
//
// The mesh (torchtitan/distributed/parallel_dims.py): [pp, dp_replicate, dp_shard, cp, tp], row-major, pp outermost,
// so world = pp x dp_replicate x dp_shard x cp x tp and the pp group is pp ranks with stride world / pp: its
// neighbours share a node only when the whole mesh of one pp rank is smaller than a node.
//
// Plan keys (plans/language/plan_toggles.h):
//   pp_degree                    torchtitan's parallelism.pipeline_parallel_degree (1: no PP)
//   pp_schedule                  parallelism.pipeline_parallel_schedule, torch's names (default 1F1B, torchtitan's)
//   pp_microbatch_size           parallelism.pipeline_parallel_microbatch_size (default 1): microbatches =
//                                local_batch_size / pp_microbatch_size, which must be whole
//   pp_stages_per_rank           stages on each pp rank (virtual stages); 0: torchtitan's default (1 for GPipe and
//                                1F1B, 2 for the others). torchtitan derives it from pipeline_parallel_layers_per_stage
//                                (stages = ceil((layers + first_less + last_less) / layers_per_stage)), whose only
//                                effect is that count: the export writes the layers_per_stage that gives it.
//   pp_first_stage_less_layers   parallelism.pipeline_parallel_first_stage_less_layers (default 1): the embedding
//                                counts as that many layers in the default split
//   pp_last_stage_less_layers    ..._last_stage_less_layers (default 1): the final norm and output head likewise
//   pp_split                     an explicit split: the number of transformer blocks of each stage, in stage order
//                                (torchtitan's module_fqns_per_model_part with the embedding on the first stage and
//                                norm + output on the last); empty: torchtitan's default split
//
// torchtitan's default split (_generate_llm_fqn_per_model_part): with S stages, effective = layers + first_less +
// last_less; each stage gets effective / S effective layers, the first effective % S stages one more; stage 0 gives
// first_less of its share to the embedding, stage S-1 last_less of its share to norm + output, and blocks are handed
// out in order (none past the last). Refused as torchtitan refuses: S > effective, first_less or last_less above
// effective / S. One stage: everything.
//
// Single-stage schedules (GPipe, 1F1B) need stages_per_rank 1 and the V schedules (ZBVZeroBubble, DualPipeV)
// exactly 2, as torch's schedule classes do; the looped ones accept any count, and torchtitan asks for at least 2.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tptune {

struct Model;
struct Plan;

enum class PipelineScheduleKind {
  gpipe,
  one_f_one_b,
  interleaved_1f1b,
  looped_bfs,
  interleaved_zero_bubble,
  zbv_zero_bubble,
  dual_pipe_v,
};

// torchtitan's spelling (the keys of torch's get_schedule_class()): "GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS",
// "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV".
std::string_view to_string(PipelineScheduleKind kind);
// All kinds in declaration order.
const std::vector<PipelineScheduleKind>& all_pipeline_schedule_kinds();
// The kind named `name`, matched case-insensitively as torch's get_schedule_class() does; otherwise tptune::Error
// "WHERE: expected one of GPipe, 1F1B, ..., got 'NAME'".
PipelineScheduleKind parse_pipeline_schedule(std::string_view name, const std::string& where);

// How a schedule places stages on ranks (torch's generate_stage_to_rank_mapping() styles).
enum class StagePlacement {
  single,  // one stage per rank: stage r on rank r
  looped,  // stage s on rank s % pp
  v,       // two stages per rank: rank r holds r and 2pp-1-r
};
StagePlacement stage_placement(PipelineScheduleKind kind);
// Whether the schedule splits backward into I and W (InterleavedZeroBubble, ZBVZeroBubble, DualPipeV).
bool splits_backward(PipelineScheduleKind kind);
// torchtitan's stages per rank when pipeline_parallel_layers_per_stage is not set: 1 for the single-stage schedules,
// 2 for the others.
int default_stages_per_rank(PipelineScheduleKind kind);

// A plan's pipeline, resolved on a model.
struct PipelineSplit {
  int pp = 1;
  int stages_per_rank = 1;
  int64_t microbatches = 1;       // local_batch_size / pp_microbatch_size
  std::vector<int> stage_layers;  // [stage] transformer blocks of each stage; stage 0 also holds the embedding,
                                  // the last stage the final norm and the output head
  int num_stages() const { return static_cast<int>(stage_layers.size()); }
  int first_layer(int stage) const;  // the first block of `stage` (blocks are consecutive, in stage order)
};

// torchtitan's default split of `n_layers` blocks into `stages` stages (see above); tptune::Error (one line, starting
// with `where`) when torchtitan refuses it.
std::vector<int> default_stage_layers(int64_t n_layers, int stages, int first_less, int last_less,
                                      const std::string& where);

// The plan's pipeline on the model: its stages per rank, microbatches and split. tptune::Error, one line naming the
// key's origin (the plan file's line, the option, or the plan's source; Plan::provenance), when the microbatch size
// does not divide the local batch, the stages per rank do not suit the schedule, the split does not cover the
// model's blocks (or has not pp x stages_per_rank entries), the schedule needs more stages than the model has
// (effective) layers, or the model ties its input and output embeddings (which torchtitan cannot put on two stages).
// A plan with pp_degree 1 gives one stage of every block.
PipelineSplit resolve_pipeline(const Model& model, const Plan& plan);

// How torchtitan is told a split (the exports, plans/export_*.cc): its stages per rank through
// pipeline_parallel_layers_per_stage, the smallest count L with ceil((n_layers + first_less + last_less) / L) =
// pp x stages_per_rank (torchtitan's _get_pipeline_metadata), 0 when none gives that many stages; `explicit_split`
// true when the plan's pp_split is not the default split of its stage count (then only module_fqns_per_model_part
// says it).
struct TorchtitanPipelineSplit {
  int layers_per_stage = 0;  // 0: not needed (the schedule's default stages per rank) or impossible (see exact)
  bool needs_layers_per_stage = false;
  bool explicit_split = false;
};
TorchtitanPipelineSplit torchtitan_pipeline_split(const Model& model, const Plan& plan);

// The plan of one microbatch of the whole model, the Program every stage's ops are taken from (sim/pipeline/step.h,
// tp-run's pipeline): local_batch_size = pp_microbatch_size, gradient_accumulation_steps 1 (its provenance the
// pp_microbatch_size key's).
Plan pipeline_microbatch_plan(const Plan& plan);

// Where a plan key came from, for errors: its provenance ("plan FILE:LINE", "option --pp"), else the plan's source.
std::string plan_key_origin(const Plan& plan, const std::string& key);

}  // namespace tptune
