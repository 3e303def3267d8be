#include "sim/report/pipeline_explain_json.h"

#include <fmt/format.h>

#include "plans/util/error.h"
#include "sim/report/pipeline_text.h"

namespace tptune {

nlohmann::json pipeline_explain_json(const PipelineReport& p) {
  using nlohmann::json;
  if (p.pp <= 1) throw Error("explain: not a pipeline-parallel step (pp 1)");
  check_pipeline_listed(p, "--json");
  const int n = static_cast<int>(p.stage_layers.size());
  json stages = json::array();
  for (int s = 0; s < n; ++s) {
    const int blocks = p.stage_layers[static_cast<size_t>(s)];
    const int first = pipeline_stage_first_block(p, s);
    json modules = json::array();
    if (s == 0) modules.push_back("tok_embeddings");
    for (int b = first; b < first + blocks; ++b) modules.push_back(fmt::format("layers.{}", b));
    if (s == n - 1) {
      modules.push_back("norm");
      modules.push_back("output");
    }
    stages.push_back(
        {{"stage", s}, {"pp_rank", pipeline_stage_rank(p, s)}, {"blocks", blocks}, {"modules", std::move(modules)}});
  }
  const int64_t per_microbatch = pipeline_rank_transfers(p);
  json ranks = json::array();
  for (size_t k = 0; k < p.timeline.size(); ++k) {
    json actions = json::array();
    for (const TimedPipelineAction& a : p.timeline[k])
      actions.push_back({{"action", to_string(a.action)},
                         {"kind", std::string(to_string(a.action.kind))},
                         {"stage", a.action.stage},
                         {"microbatch", a.action.microbatch},
                         {"start_us", a.start_us},
                         {"end_us", a.end_us}});
    ranks.push_back({{"pp_rank", k},
                     {"stages", k < p.ranks.size() ? json(p.ranks[k].stages) : json::array()},
                     {"actions", std::move(actions)}});
  }
  return {{"pp_degree", p.pp},
          {"schedule", std::string(to_string(p.schedule))},
          {"stages_per_rank", p.stages_per_rank},
          {"microbatches", p.microbatches},
          {"microbatch_size", p.microbatch_size},
          {"stages", std::move(stages)},
          {"p2p",
           {{"bytes", p.p2p_bytes},
            {"us", p.p2p_us},
            {"over", p.p2p_network ? "network" : "nvlink"},
            {"per_microbatch", per_microbatch},
            {"per_pass", per_microbatch * p.microbatches}}},
          {"schedule_ms", p.schedule_ms},
          {"bubble_fraction", p.bubble_fraction},
          {"ranks", std::move(ranks)}};
}

}  // namespace tptune
