#include "plans/language/pipeline_parallel.h"

#include <fmt/format.h>

#include <cctype>
#include <iterator>
#include <numeric>

#include "plans/language/plan.h"
#include "plans/model/model.h"
#include "plans/util/enum_names.h"
#include "plans/util/error.h"
#include "plans/util/limits.h"

namespace tptune {

namespace {

constexpr std::string_view kScheduleNames[] = {
    "GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV",
};
static_assert(std::size(kScheduleNames) == enum_count(PipelineScheduleKind::dual_pipe_v));

bool equal_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

}  // namespace

std::string_view to_string(PipelineScheduleKind kind) { return name_of(kScheduleNames, kind); }

const std::vector<PipelineScheduleKind>& all_pipeline_schedule_kinds() {
  static const std::vector<PipelineScheduleKind> kinds = [] {
    std::vector<PipelineScheduleKind> k;
    for (size_t i = 0; i < std::size(kScheduleNames); ++i) k.push_back(static_cast<PipelineScheduleKind>(i));
    return k;
  }();
  return kinds;
}

PipelineScheduleKind parse_pipeline_schedule(std::string_view name, const std::string& where) {
  for (size_t i = 0; i < std::size(kScheduleNames); ++i)
    if (equal_ignoring_case(kScheduleNames[i], name)) return static_cast<PipelineScheduleKind>(i);
  throw_unknown_name(kScheduleNames, std::size(kScheduleNames), name, where);
}

StagePlacement stage_placement(PipelineScheduleKind kind) {
  switch (kind) {
    case PipelineScheduleKind::gpipe:
    case PipelineScheduleKind::one_f_one_b:
      return StagePlacement::single;
    case PipelineScheduleKind::zbv_zero_bubble:
    case PipelineScheduleKind::dual_pipe_v:
      return StagePlacement::v;
    case PipelineScheduleKind::interleaved_1f1b:
    case PipelineScheduleKind::looped_bfs:
    case PipelineScheduleKind::interleaved_zero_bubble:
      break;
  }
  return StagePlacement::looped;
}

bool splits_backward(PipelineScheduleKind kind) {
  return kind == PipelineScheduleKind::interleaved_zero_bubble || kind == PipelineScheduleKind::zbv_zero_bubble ||
         kind == PipelineScheduleKind::dual_pipe_v;
}

int default_stages_per_rank(PipelineScheduleKind kind) {
  return stage_placement(kind) == StagePlacement::single ? 1 : 2;
}

int PipelineSplit::first_layer(int stage) const {
  int first = 0;
  for (int s = 0; s < stage && s < num_stages(); ++s) first += stage_layers[static_cast<size_t>(s)];
  return first;
}

std::string plan_key_origin(const Plan& plan, const std::string& key) {
  auto it = plan.provenance.find(key);
  if (it != plan.provenance.end()) return it->second;
  return plan.source.empty() ? std::string("plan") : plan.source;
}

std::vector<int> default_stage_layers(int64_t n_layers, int stages, int first_less, int last_less,
                                      const std::string& where) {
  if (stages < 1) throw Error(fmt::format("{}: expected at least 1 pipeline stage, got {}", where, stages));
  if (stages == 1) return {static_cast<int>(n_layers)};
  const int64_t effective = n_layers + first_less + last_less;
  if (stages > effective)
    throw Error(fmt::format(
        "{}: {} pipeline stages but only {} effective layers ({} blocks + first_stage_less_layers {} + "
        "last_stage_less_layers {}): torchtitan refuses more stages than effective layers; lower pp_degree or "
        "pp_stages_per_rank",
        where, stages, effective, n_layers, first_less, last_less));
  const int64_t per_stage = effective / stages;
  const int64_t extra = effective % stages;
  if (first_less > per_stage || last_less > per_stage)
    throw Error(fmt::format(
        "{}: first_stage_less_layers {} / last_stage_less_layers {} exceed the {} effective layers per stage of {} "
        "stages (torchtitan refuses an input or output weight above the smallest stage's share)",
        where, first_less, last_less, per_stage, stages));
  std::vector<int> layers;
  int64_t next = 0;
  for (int s = 0; s < stages; ++s) {
    int64_t share = per_stage + (s < extra ? 1 : 0);
    if (s == 0) share -= first_less;
    if (s == stages - 1) share -= last_less;
    const int64_t take = std::min(share, n_layers - next);
    layers.push_back(static_cast<int>(take));
    next += take;
  }
  // torchtitan hands out no block past the last one and drops none: with its checks above every block is placed.
  if (next != n_layers)
    throw Error(fmt::format("{}: torchtitan's split of {} blocks into {} stages places only {}", where, n_layers,
                            stages, next));
  return layers;
}

TorchtitanPipelineSplit torchtitan_pipeline_split(const Model& model, const Plan& plan) {
  TorchtitanPipelineSplit t;
  const PipelineSplit s = resolve_pipeline(model, plan);
  if (!plan.pp_split.empty()) {
    std::vector<int> generated;
    try {
      generated = default_stage_layers(model.n_layers, s.num_stages(), plan.pp_first_stage_less_layers,
                                       plan.pp_last_stage_less_layers, "pp_split");
    } catch (const Error&) {
      generated.clear();  // torchtitan cannot generate that many stages: only an explicit split says it
    }
    t.explicit_split = generated != s.stage_layers;
  }
  t.needs_layers_per_stage = s.stages_per_rank != default_stages_per_rank(plan.pp_schedule);
  if (!t.needs_layers_per_stage) return t;
  const int64_t effective = model.n_layers + plan.pp_first_stage_less_layers + plan.pp_last_stage_less_layers;
  const int64_t stages = s.num_stages();
  for (int64_t l = 1; l <= effective; ++l)
    if ((effective + l - 1) / l == stages) {
      t.layers_per_stage = static_cast<int>(l);
      break;
    }
  return t;
}

PipelineSplit resolve_pipeline(const Model& model, const Plan& plan) {
  PipelineSplit s;
  s.pp = plan.pp_degree;
  if (plan.pp_degree <= 1) {
    s.stage_layers = {static_cast<int>(model.n_layers)};
    s.microbatches = 1;
    return s;
  }
  if (model.tie_word_embeddings)
    throw Error(fmt::format(
        "{}: pp_degree {}: model '{}' ties its input and output embeddings (tie_word_embeddings), which torchtitan "
        "cannot place on the first and the last pipeline stage; use pp_degree 1",
        plan_key_origin(plan, "pp_degree"), plan.pp_degree, model.name));
  if (plan.local_batch_size % plan.pp_microbatch_size != 0)
    throw Error(fmt::format(
        "{}: pp_microbatch_size {} does not divide local_batch_size {} ({}): microbatches = local batch / microbatch "
        "size must be whole",
        plan_key_origin(plan, "pp_microbatch_size"), plan.pp_microbatch_size, plan.local_batch_size,
        plan_key_origin(plan, "local_batch_size")));
  s.microbatches = plan.local_batch_size / plan.pp_microbatch_size;
  const std::string schedule(to_string(plan.pp_schedule));
  if (!plan.pp_split.empty()) {
    const std::string where = plan_key_origin(plan, "pp_split");
    if (static_cast<int64_t>(plan.pp_split.size()) % plan.pp_degree != 0)
      throw Error(
          fmt::format("{}: pp_split has {} stages, not a multiple of pp_degree {} (each pp rank holds the same "
                      "number of stages)",
                      where, plan.pp_split.size(), plan.pp_degree));
    s.stages_per_rank = static_cast<int>(plan.pp_split.size() / static_cast<size_t>(plan.pp_degree));
    if (plan.pp_stages_per_rank > 0 && plan.pp_stages_per_rank != s.stages_per_rank)
      throw Error(fmt::format("{}: pp_split has {} stages = pp_degree {} x {}, but pp_stages_per_rank is {} ({})",
                              where, plan.pp_split.size(), plan.pp_degree, s.stages_per_rank, plan.pp_stages_per_rank,
                              plan_key_origin(plan, "pp_stages_per_rank")));
    const int64_t sum = std::accumulate(plan.pp_split.begin(), plan.pp_split.end(), int64_t{0});
    if (sum != model.n_layers)
      throw Error(
          fmt::format("{}: pp_split [{}] places {} blocks, but model '{}' has {}: the split must cover every "
                      "block exactly once",
                      where, fmt::join(plan.pp_split, ", "), sum, model.name, model.n_layers));
    s.stage_layers = plan.pp_split;
  } else {
    s.stages_per_rank =
        plan.pp_stages_per_rank > 0 ? plan.pp_stages_per_rank : default_stages_per_rank(plan.pp_schedule);
  }
  const std::string v_where = plan_key_origin(plan, plan.pp_split.empty() ? "pp_stages_per_rank" : "pp_split");
  switch (stage_placement(plan.pp_schedule)) {
    case StagePlacement::single:
      if (s.stages_per_rank != 1)
        throw Error(fmt::format("{}: pipeline schedule {} runs one stage per rank, got {} stages per rank", v_where,
                                schedule, s.stages_per_rank));
      break;
    case StagePlacement::v:
      if (s.stages_per_rank != 2)
        throw Error(fmt::format("{}: pipeline schedule {} runs exactly 2 stages per rank (a V), got {}", v_where,
                                schedule, s.stages_per_rank));
      break;
    case StagePlacement::looped:
      if (s.stages_per_rank < 2)
        throw Error(
            fmt::format("{}: pipeline schedule {} is a multi-stage schedule: torchtitan needs at least 2 "
                        "stages per rank, got {}",
                        v_where, schedule, s.stages_per_rank));
      break;
  }
  if (plan.pp_split.empty()) {
    const int64_t stages = int64_t{plan.pp_degree} * s.stages_per_rank;
    if (stages > limits::n_layers.hi + 2)
      throw Error(fmt::format("{}: pp_degree {} x {} stages per rank = {} stages: more than any model's layers",
                              v_where, plan.pp_degree, s.stages_per_rank, stages));
    s.stage_layers =
        default_stage_layers(model.n_layers, static_cast<int>(stages), plan.pp_first_stage_less_layers,
                             plan.pp_last_stage_less_layers, fmt::format("{} (schedule {})", v_where, schedule));
  }
  return s;
}

Plan pipeline_microbatch_plan(const Plan& plan) {
  Plan micro = plan;
  micro.local_batch_size = plan.pp_microbatch_size;
  micro.gradient_accumulation_steps = 1;
  micro.provenance["local_batch_size"] = plan_key_origin(plan, "pp_microbatch_size");
  return micro;
}

}  // namespace tptune
