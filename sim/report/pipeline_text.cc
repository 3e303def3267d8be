#include "sim/report/pipeline_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "plans/util/checked_math.h"
#include "plans/util/enum_names.h"
#include "sim/report/trace.h"

namespace tptune {

std::string pipeline_bytes_text(double b) {
  if (b >= 1073741824.0) return fmt::format("{:.1f} GiB", b / 1073741824.0);
  if (b >= 1048576.0) return fmt::format("{:.1f} MiB", b / 1048576.0);
  return fmt::format("{:.1f} KiB", b / 1024.0);
}

namespace {

std::string blocks_text(int first, int count) {
  if (count == 0) return "";
  if (count == 1) return fmt::format("layers.{}", first);
  return fmt::format("layers.{}-{}", first, first + count - 1);
}

}  // namespace

// PipelineActionKind's enumerators, in declaration order.
constexpr std::string_view kActionWords[] = {"forward", "backward", "input gradient", "weight gradient"};
static_assert(std::size(kActionWords) == enum_count(PipelineActionKind::W));

std::string_view pipeline_action_words(PipelineActionKind k) { return name_of(kActionWords, k); }

int pipeline_stage_rank(const PipelineReport& p, int stage) {
  for (size_t k = 0; k < p.ranks.size(); ++k)
    if (std::find(p.ranks[k].stages.begin(), p.ranks[k].stages.end(), stage) != p.ranks[k].stages.end())
      return static_cast<int>(k);
  return 0;
}

int pipeline_stage_first_block(const PipelineReport& p, int stage) {
  int first = 0;
  for (int s = 0; s < stage && s < static_cast<int>(p.stage_layers.size()); ++s)
    first += p.stage_layers[static_cast<size_t>(s)];
  return first;
}

int64_t pipeline_action_count(const PipelineReport& p) {
  int64_t n = 0;
  for (const auto& rank : p.timeline) n = checked_add(n, static_cast<int64_t>(rank.size()), "pipeline actions");
  return n;
}

namespace {
std::string actions_what(const PipelineReport& p) {
  return fmt::format("pipeline actions (pp {}, {} microbatches, {} stage{} per rank)", p.pp, p.microbatches,
                     p.stages_per_rank, p.stages_per_rank == 1 ? "" : "s");
}
constexpr std::string_view kFewerActions =
    "fewer microbatches (a smaller local batch or a larger pp_microbatch_size) or a smaller pp list fewer";
}  // namespace

void check_pipeline_listed(const PipelineReport& p, std::string_view option) {
  check_listed_events(pipeline_action_count(p), option, actions_what(p),
                      fmt::format("{}; or leave {} out", kFewerActions, option));
}

int64_t pipeline_rank_transfers(const PipelineReport& p) {
  int64_t n = 0;
  for (int s = 0; s + 1 < static_cast<int>(p.stage_layers.size()); ++s)
    if (pipeline_stage_rank(p, s) != pipeline_stage_rank(p, s + 1)) n += 2;
  return n;
}

std::string pipeline_explain_text(const StepReport& r, int width) {
  const PipelineReport& p = r.pipeline;
  width = std::max(width, 10);
  std::string o;
  auto append = [&o](const std::string& s) { o += s; };
  append(fmt::format("pipeline: {} on pp {}, {} stage{} per rank, {} microbatches of {} sequence{}\n",
                     to_string(p.schedule), p.pp, p.stages_per_rank, p.stages_per_rank == 1 ? "" : "s", p.microbatches,
                     p.microbatch_size, p.microbatch_size == 1 ? "" : "s"));
  const int stages = static_cast<int>(p.stage_layers.size());
  for (int s = 0; s < stages; ++s) {
    std::vector<std::string> parts;
    if (s == 0) parts.push_back("tok_embeddings");
    if (const std::string b = blocks_text(pipeline_stage_first_block(p, s), p.stage_layers[static_cast<size_t>(s)]);
        !b.empty())
      parts.push_back(b);
    if (s == stages - 1) parts.insert(parts.end(), {"norm", "output"});
    append(fmt::format("  stage {} on pp rank {}: {}\n", s, pipeline_stage_rank(p, s), fmt::join(parts, ", ")));
  }
  const int64_t per_microbatch = pipeline_rank_transfers(p),
                local = 2 * static_cast<int64_t>(stages - 1) - per_microbatch;
  append(fmt::format(
      "  p2p per microbatch: the activation ({}) from each stage to the next, its gradient ({}) back on the pp group:\n"
      "    2 x {} stage boundar{} between ranks = {} transfers per microbatch, {} per schedule pass, each {:.1f} us "
      "over "
      "{}{}\n",
      pipeline_bytes_text(static_cast<double>(p.p2p_bytes)), pipeline_bytes_text(static_cast<double>(p.p2p_bytes)),
      per_microbatch / 2, per_microbatch == 2 ? "y" : "ies", per_microbatch, per_microbatch * p.microbatches, p.p2p_us,
      p.p2p_network ? "the network" : "NVLink",
      local > 0 ? fmt::format("; {} local hand-overs between stages on one rank (free)", local) : ""));
  if (const int64_t n = pipeline_action_count(p); n > kMaxListedEvents) {
    append(fmt::format("  schedule: {} {}, more than {}, the most one output lists: not drawn\n", n, actions_what(p),
                       kMaxListedEvents));
    return o;
  }
  const double pass_us = p.schedule_ms * 1e3;
  append(fmt::format(
      "  schedule (a column is 1/{} of the {:.2f} ms pass; F forward, B backward, I input gradient, W weight "
      "gradient, . idle):\n",
      width, p.schedule_ms));
  for (size_t k = 0; k < p.timeline.size(); ++k) {
    std::string row(static_cast<size_t>(width), '.');
    for (int c = 0; c < width && pass_us > 0; ++c) {
      const double t = (c + 0.5) * pass_us / width;
      for (const TimedPipelineAction& a : p.timeline[k])
        if (a.start_us <= t && t < a.end_us) {
          row[static_cast<size_t>(c)] = to_string(a.action.kind)[0];
          break;
        }
    }
    append(fmt::format("    rank {:<3} {}\n", k, row));
  }
  append("  each rank's actions in order (stage, kind, microbatch, as torch prints them):\n");
  for (size_t k = 0; k < p.timeline.size(); ++k) {
    std::vector<std::string> names;
    for (const TimedPipelineAction& a : p.timeline[k]) names.push_back(to_string(a.action));
    append(fmt::format("    rank {:<3} {}\n", k, fmt::join(names, " ")));
  }
  return o;
}

}  // namespace tptune
