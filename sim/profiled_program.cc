// A tp-run profile checked against the Program it is a profile of; see profiled_program.h.
#include "sim/profiled_program.h"

#include <fmt/format.h>

#include "plans/language/pipeline_parallel.h"
#include "plans/lower/lower.h"
#include "plans/lower/rewrite/pipeline_stage.h"
#include "plans/program/program_identity.h"
#include "plans/util/error.h"
#include "plans/util/json_text.h"
#include "plans/util/yaml_util.h"
#include "sim/pipeline/schedule.h"

namespace tptune {

namespace {

std::string quoted(const std::string& s) { return fmt::format("'{}'", yaml::shown(s, 80)); }

// Each record is the op of expand(program) at its index: its name, and the segment, template op and kind it states.
void check_ops(const Profile& prof, const Program& program, const JsonDoc& doc, std::string_view program_is) {
  const FlatProgram flat = expand(program);
  const size_t n = flat.ops.size();
  for (size_t i = 0; i < prof.ops.size(); ++i) {
    const std::string w = fmt::format("ops[{}]", i);
    const ProfileOp& rec = prof.ops[i];
    if (i >= n)
      doc.fail(w, fmt::format("{} is past the {} ops of {} (one record per op, in execution order)", quoted(rec.name),
                              n, program_is));
    const FlatOp& f = flat.ops[i];
    if (rec.name != f.name)
      doc.fail(w + ".name",
               fmt::format("expected {} (op {} of {}), got {}", quoted(f.name), i, program_is, quoted(rec.name)));
    const Op& op = *f.op;
    const Segment* seg = nullptr;
    for (const Segment& s : program.segments)
      if (!s.ops.empty() && &op >= &s.ops.front() && &op <= &s.ops.back()) seg = &s;
    if (seg && rec.segment && *rec.segment != to_string(seg->kind))
      doc.fail(w + ".segment", fmt::format("expected '{}' (the segment of op {} of {}), got {}", to_string(seg->kind),
                                           i, program_is, quoted(*rec.segment)));
    // tp-run writes both: the layer is the op's instance of a per-layer segment (-1 outside blocks).
    if (rec.segment && rec.layer != f.layer)
      doc.fail(w + ".layer", fmt::format("expected {} (op {} of {}), got {}", f.layer, i, program_is, rec.layer));
    if (rec.template_op && *rec.template_op != op.id)
      doc.fail(w + ".template_op",
               fmt::format("expected {} (op {}'s index in its segment{}), got {}", op.id, i,
                           seg ? fmt::format(" {}", to_string(seg->kind)) : std::string(), *rec.template_op));
    if (rec.kind && *rec.kind != kind_name(op.kind))
      doc.fail(w + ".kind", fmt::format("expected '{}' (op {} of {}), got {}", kind_name(op.kind), i, program_is,
                                        quoted(*rec.kind)));
  }
  if (prof.ops.size() < n)
    doc.fail("ops",
             fmt::format("{} records, expected {} (one per op of {}, in execution order): op {} ({}) and the "
                         "ones after it are missing",
                         prof.ops.size(), n, program_is, prof.ops.size(), quoted(flat.ops[prof.ops.size()].name)));
}

std::string action_text(int64_t stage, const std::string& kind, int64_t microbatch) {
  return fmt::format("{}{}{}", stage, kind, microbatch);
}

// The "pipeline" block against the pipeline plan: what tp-run ran (tools/tp_run/pipeline.cc builds the same split,
// placement and schedule).
void check_pipeline(const ProfilePipeline& pl, const Plan& plan, const Program& program, const JsonDoc& doc) {
  const PipelineSplit split = resolve_pipeline(program.model, plan);
  const std::string schedule_name(to_string(plan.pp_schedule));
  if (pl.pp != plan.pp_degree)
    doc.fail("pipeline.pp", fmt::format("expected {} (the plan's pp_degree), got {}", plan.pp_degree, pl.pp));
  if (pl.schedule != schedule_name)
    doc.fail("pipeline.schedule",
             fmt::format("expected '{}' (the plan's pp_schedule), got {}", schedule_name, quoted(pl.schedule)));
  if (pl.microbatches != split.microbatches)
    doc.fail("pipeline.microbatches",
             fmt::format("expected {} (local_batch_size {} / pp_microbatch_size {}), got {}", split.microbatches,
                         plan.local_batch_size, plan.pp_microbatch_size, pl.microbatches));
  if (pl.microbatch_size != plan.pp_microbatch_size)
    doc.fail("pipeline.microbatch_size", fmt::format("expected {} (the plan's pp_microbatch_size), got {}",
                                                     plan.pp_microbatch_size, pl.microbatch_size));
  const std::vector<PipelineStageSpan> spans = pipeline_stage_spans(split, plan.pp_schedule);
  if (!pl.stages.empty() && pl.stages.size() != spans.size())
    doc.fail("pipeline.stages", fmt::format("{} stages, expected {} (pp {} x {} per rank)", pl.stages.size(),
                                            spans.size(), split.pp, split.stages_per_rank));
  for (size_t s = 0; s < pl.stages.size(); ++s) {
    const ProfilePipelineStage& got = pl.stages[s];
    const PipelineStageSpan& want = spans[s];
    if (got.first_layer != want.first_layer || got.layers != want.layers || got.rank != want.rank)
      doc.fail(fmt::format("pipeline.stages[{}]", s),
               fmt::format("expected first_layer {}, layers {}, rank {} (the plan's stage {}), got {}, {}, {}",
                           want.first_layer, want.layers, want.rank, s, got.first_layer, got.layers, got.rank));
  }
  const PipelineSchedule sched = build_schedule(plan.pp_schedule, split.pp, split.stages_per_rank, split.microbatches);
  const std::string under = fmt::format("{}, {} microbatches", schedule_name, split.microbatches);
  if (pl.ranks.size() != sched.ranks.size())
    doc.fail("pipeline.ranks", fmt::format("{} records, expected {} (one per pp rank)", pl.ranks.size(), split.pp));
  for (size_t r = 0; r < pl.ranks.size(); ++r) {
    const std::string rw = fmt::format("pipeline.ranks[{}]", r);
    const ProfilePipelineRank& got = pl.ranks[r];
    if (got.pp_rank != static_cast<int64_t>(r))
      doc.fail(rw + ".pp_rank", fmt::format("expected {} (records in pp rank order), got {}", r, got.pp_rank));
    const std::vector<PipelineAction>& want = sched.ranks[r];
    for (size_t k = 0; k < got.actions.size() && k < want.size(); ++k) {
      const ProfilePipelineAction& a = got.actions[k];
      const PipelineAction& b = want[k];
      if (a.stage != b.stage || a.microbatch != b.microbatch || a.kind != to_string(b.kind))
        doc.fail(fmt::format("{}.actions[{}]", rw, k),
                 fmt::format("expected {} (action {} of pp rank {} under {}), got {}", to_string(b), k, r, under,
                             action_text(a.stage, a.kind, a.microbatch)));
    }
    if (got.actions.size() != want.size())
      doc.fail(rw + ".actions", fmt::format("{} actions, expected {} (pp rank {}'s under {})", got.actions.size(),
                                            want.size(), r, under));
  }
  for (size_t i = 0; i < pl.p2p.size(); ++i) {
    const ProfileP2P& x = pl.p2p[i];
    const std::string xw = fmt::format("pipeline.p2p[{}]", i);
    if (x.from + 1 >= plan.pp_degree)
      doc.fail(xw + ".from",
               fmt::format("expected a pp rank of 0..{} (one with a next rank), got {}", plan.pp_degree - 2, x.from));
    if (x.to != x.from + 1)
      doc.fail(xw + ".to", fmt::format("expected {} (the pp rank after {}), got {}", x.from + 1, x.from, x.to));
  }
}

}  // namespace

void check_profile(const Profile& prof, const Plan& plan, const Program& program, const std::string& path,
                   ProfiledAgainst against) {
  const JsonDoc doc(path);
  const bool own = against == ProfiledAgainst::own_yaml;
  const std::string_view program_is = own ? "the program its config_yaml lowers to" : "the simulated Program";
  check_same_program(prof.program, program, path, own ? "its config_yaml" : "");
  if (plan.pp_degree > 1 && !prof.pipeline)
    doc.fail("pipeline", fmt::format("missing (the plan has pp_degree {})", plan.pp_degree));
  if (plan.pp_degree <= 1 && prof.pipeline)
    doc.fail("pipeline", fmt::format("a pipeline's profile (pp {}), but {} has no pipeline parallelism (pp_degree 1)",
                                     prof.pipeline->pp, program_is));
  check_ops(prof, program, doc, program_is);
  if (prof.pipeline) check_pipeline(*prof.pipeline, plan, program, doc);
}

ProfiledProgram profiled_program(const Profile& prof, const std::string& path) {
  const JsonDoc doc(path);
  if (prof.program.is_null()) doc.fail("program", "missing");
  const std::string& config_yaml = require(prof.config_yaml, doc, "program.config_yaml");
  const std::string& plan_yaml = require(prof.plan_yaml, doc, "program.plan_yaml");
  ProfiledProgram out;
  try {
    out.config = load_config_string(config_yaml, path + " (program.config_yaml)", {}, prof.hf_config_json);
    out.plan = load_plan_string(plan_yaml, path + " (program.plan_yaml)");
    // A pipeline's profile timed the ops of one microbatch's Program (runtime/pipeline/profile.h).
    out.program = lower(out.config.model, out.config.training,
                        out.plan.pp_degree > 1 ? pipeline_microbatch_plan(out.plan) : out.plan);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: program: cannot lower the profiled Program again: {}", path, e.what()));
  }
  check_profile(prof, out.plan, out.program, path, ProfiledAgainst::own_yaml);
  return out;
}

}  // namespace tptune
