#pragma once
// The "pipeline" object of `tp-plan explain --json` for a PP plan (beside the collectives of the microbatch Program,
// sim/report/explain.h): what each stage holds, the P2P of one microbatch and each rank's actions in the order the
// simulated schedule ran them. Schema (docs/cli.md, `tp-plan explain`):
//   {"pp_degree": 2, "schedule": "1F1B", "stages_per_rank": 1, "microbatches": 4, "microbatch_size": 1,
//    "stages": [{"stage": 0, "pp_rank": 0, "blocks": 4, "modules": ["tok_embeddings", "layers.0", ..., "layers.3"]},
//               {"stage": 1, "pp_rank": 1, "blocks": 4, "modules": ["layers.4", ..., "layers.7", "norm", "output"]}],
//    "p2p": {"bytes": 524288, "us": 5.3, "over": "nvlink", "per_microbatch": 2, "per_pass": 8},
//    "schedule_ms": 12.5, "bubble_fraction": 0.2,
//    "ranks": [{"pp_rank": 0, "stages": [0], "actions": [{"action": "0F0", "kind": "F", "stage": 0,
//               "microbatch": 0, "start_us": 0.0, "end_us": 812.5}, ...]}, ...]}
// `p2p`: one activation (forward) or its gradient (backward) of one microbatch, `bytes` per transfer on the pp group,
// `us` its time; `per_microbatch` = 2 x (stages - 1) transfers, `per_pass` that x microbatches. `modules` lists full
// FQNs, the embedding on the first stage, the norm and output on the last. `actions` are torch's (_Action repr in
// `action`; kind F forward, B backward, I input gradient, W weight gradient), times in us from the pass's start.

#include <nlohmann/json.hpp>

#include "sim/simulate.h"

namespace tptune {

// `p` a PipelineReport of simulate_pipeline(); tptune::Error when p.pp is 1, and (naming --json) when it has more
// actions than one output lists (sim/report/trace.h: kMaxListedEvents).
nlohmann::json pipeline_explain_json(const PipelineReport& p);

}  // namespace tptune
