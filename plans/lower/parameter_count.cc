#include "plans/lower/parameter_count.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "plans/lower/rewrite/pipeline_stage.h"
#include "plans/util/checked_math.h"
#include "plans/util/error.h"

namespace tptune {

namespace {

constexpr std::string_view kWhat = "parameters per rank";

// Elements of parameter `t` on one rank: its local shape with dim 0 chunked over FSDP's group as FSDP2 does (ceil(rows
// / dp) rows on rank 0), once (a per-layer tensor: one block's).
int64_t local_elements(const TensorDesc& t, int64_t dp) {
  int64_t elems = 1;
  for (size_t d = 0; d < t.local_shape.size(); ++d)
    elems = checked_mul(elems, d == 0 ? (t.local_shape[0] + dp - 1) / dp : t.local_shape[d], kWhat);
  return elems;
}

}  // namespace

ParameterCount parameter_count(const Program& p) {
  if (p.plan.pp_degree > 1 && p.stage.index < 0)
    return pipeline_parameter_count(p, resolve_pipeline(p.model, p.plan), p.plan.pp_schedule);
  int64_t per_rank = 0;
  for (const TensorDesc& t : p.tensors) {
    if (t.role != TensorRole::parameter) continue;
    int64_t elems = local_elements(t, std::max(1, p.fsdp_degree(t)));  // (a routed expert's over efsdp under EP)
    // (a stage's Program: its blocks only; a block variant's tensor: its layers only)
    if (t.per_layer) elems = checked_mul(elems, p.copies(t), kWhat);
    per_rank = checked_add(per_rank, elems, kWhat);
  }
  return {p.model.total_parameters(), per_rank, {}, 0};
}

ParameterCount pipeline_parameter_count(const Program& whole, const PipelineSplit& split,
                                        PipelineScheduleKind schedule) {
  const std::vector<PipelineStageSpan> spans = pipeline_stage_spans(split, schedule);
  if (spans.empty() || split.pp < 1) throw Error("pipeline parameter count: no stages");
  // The non-block parameters the embedding's segments use are stage 0's (as its Program keeps them); the others
  // (final norm, output) the last stage's. torchtitan cannot split tied embeddings (resolve_pipeline refuses them).
  std::vector<char> first_stage(whole.tensors.size(), 0);
  for (const Segment& seg : whole.segments)
    if (seg.kind == SegmentKind::embed_fwd || seg.kind == SegmentKind::embed_bwd)
      for (const Op& op : seg.ops) {
        for (TensorId t : op.inputs) first_stage.at(size_t(t)) = 1;
        for (TensorId t : op.outputs) first_stage.at(size_t(t)) = 1;
      }
  ParameterCount c{whole.model.total_parameters(), 0, std::vector<int64_t>(size_t(split.pp), 0), 0};
  auto add = [&](const PipelineStageSpan& s, int64_t elems) {
    int64_t& r = c.per_pp_rank.at(size_t(s.rank));
    r = checked_add(r, elems, kWhat);
  };
  for (size_t i = 0; i < whole.tensors.size(); ++i) {
    const TensorDesc& t = whole.tensors[i];
    if (t.role != TensorRole::parameter) continue;
    const int64_t elems = local_elements(t, std::max(1, whole.fsdp_degree(t)));  // (a routed expert's over efsdp)
    if (t.per_layer) {
      // (a block variant's tensor, TensorDesc::first_layer/layer_count: the stage's blocks of it)
      const int first = t.layer_count > 0 ? t.first_layer : 0;
      const int end = t.layer_count > 0 ? t.first_layer + t.layer_count : static_cast<int>(whole.model.n_layers);
      for (const PipelineStageSpan& s : spans)
        add(s, checked_mul(elems, std::max(0, std::min(end, s.first_layer + s.layers) - std::max(first, s.first_layer)),
                           kWhat));
    } else {
      add(first_stage[i] ? spans.front() : spans.back(), elems);
    }
  }
  const auto most = std::max_element(c.per_pp_rank.begin(), c.per_pp_rank.end());
  c.per_rank = *most;
  c.pp_rank = static_cast<int>(most - c.per_pp_rank.begin());
  return c;
}

std::string shard_text(const ParameterCount& c, int tp, int dp_shard, int cp) {
  std::string out;
  if (c.per_pp_rank.size() > 1)
    out = fmt::format("pp rank {}'s stages (the most of {} pp ranks; the least holds {})", c.pp_rank,
                      c.per_pp_rank.size(),
                      with_thousands(*std::min_element(c.per_pp_rank.begin(), c.per_pp_rank.end())));
  auto then = [&](const std::string& part) { out += (out.empty() ? "" : ", ") + part; };
  if (tp > 1)
    then(fmt::format("its tp {} shard", tp));
  else if (out.empty())
    then("all of them");  // only without PP: a pp rank holds its stages, never all of them
  if (cp > 1)
    then(fmt::format("chunked over dp_shard {} x cp {} by FSDP", dp_shard, cp));
  else if (dp_shard > 1)
    then(fmt::format("chunked over dp_shard {} by FSDP", dp_shard));
  return out;
}

std::string with_thousands(int64_t v) {
  const std::string digits = std::to_string(v < 0 ? -static_cast<uint64_t>(v) : static_cast<uint64_t>(v));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

}  // namespace tptune
