// tp-plan explain CONFIG (--preset NAME | --plan FILE) [toggles] [--json FILE|-]
#include "sim/report/explain.h"

#include <fmt/format.h>

#include <iostream>

#include "plans/language/config.h"
#include "plans/language/pipeline_parallel.h"
#include "plans/lower/lower.h"
#include "plans/lower/rewrite/pipeline_stage.h"
#include "plans/util/error.h"
#include "plans/util/output_file.h"
#include "sim/cluster_spec.h"
#include "sim/pipeline/step.h"
#include "sim/report/pipeline_explain_json.h"
#include "sim/report/pipeline_text.h"
#include "sim/trust.h"
#include "tools/plan_options.h"
#include "tools/tp_plan/commands.h"
#include "tools/tp_plan/cost_params.h"

namespace tptune::tools {

namespace {
struct ExplainArgs {
  PlanOptions plan;
  std::string json;
};

// explain's JSON of `prog` with `extra` members, to `json` (- for stdout; nothing when empty).
void write_json_output(const std::string& json, const Program& prog, const nlohmann::json& extra) {
  if (json == "-") {
    write_explain_json(prog, std::cout, extra);  // streamed: no document proportional to the layer count in memory
  } else if (!json.empty()) {
    OutputFile f("--json", json);  // streamed too, then renamed over the target (plans/util/output_file.h)
    write_explain_json(prog, f.stream(), extra);
    f.commit();
  }
}
}  // namespace

void add_explain_command(CLI::App& app, RunFn& run) {
  auto args = std::make_shared<ExplainArgs>();
  CLI::App* cmd =
      add_plan_command(app, "explain", "list the collectives a plan issues, per block and per step", args->plan);
  cmd->add_option("--json", args->json, "write the collectives as JSON to FILE (- for stdout)");
  cmd->callback([args, &run]() {
    run = [args]() {
      Config cfg = load_options_config(args->plan);
      Plan plan = resolve_plan(cfg, args->plan);
      // After every input is read (a config's model.hf_config too), before anything is written.
      refuse_overwriting_inputs({{"--json", args->json}}, plan_inputs(args->plan));
      if (plan.pp_degree > 1) {
        // A pipeline: its stages, P2P and each rank's schedule, then the collectives of one microbatch; the JSON
        // holds the same, the pipeline as "pipeline" beside the microbatch Program's collectives.
        const ClusterSpec cluster = resolve_cluster(cfg);
        const StepReport r =
            simulate_pipeline(cfg.model, cfg.training, plan, cluster, resolve_cost_params(cluster.gpu, "").params);
        const Program micro_prog = lower(cfg.model, cfg.training, pipeline_microbatch_plan(plan));
        // Each stage's Program (plans/lower/rewrite/pipeline_stage.h), for its transfers.
        const std::vector<PipelineStageSpan> spans =
            pipeline_stage_spans(resolve_pipeline(cfg.model, plan), plan.pp_schedule);
        std::vector<Program> stages;
        for (int s = 0; s < static_cast<int>(spans.size()); ++s)
          stages.push_back(lower_pipeline_stage(micro_prog, spans, s));
        const std::vector<TransferRecord> transfers = pipeline_transfers(stages, spans);
        const PredictionTrust trust = prediction_trust(cluster.gpu);
        // The JSON's pipeline first: one of more actions than an output lists is refused before anything is printed.
        nlohmann::json pipeline;
        if (!args->json.empty()) {
          pipeline = pipeline_explain_json(r.pipeline);
          pipeline["transfers"] = pipeline_transfers_json(transfers);
        }
        if (args->json != "-")
          fmt::print(
              "{}{}\ncollectives of one microbatch of the whole model (each stage issues its blocks' share; FSDP's "
              "once per step under PP):\n{}\n{}trust: {}\n",
              pipeline_explain_text(r), pipeline_transfers_text(transfers), explain_text(micro_prog),
              effective_values_text(cfg, plan, cluster.gpu.architecture), trust_text(trust));
        write_json_output(args->json, micro_prog,
                          {{"trust", trust_json(trust)},
                           {"sdpa_backend", sdpa_backend_json(cfg.training, plan, cluster.gpu.architecture)},
                           {"pipeline", std::move(pipeline)}});
        return 0;
      }
      Program prog = lower(cfg.model, cfg.training, plan);
      // The collectives do not depend on the device; the line says how far the figures of the device the config
      // names are fitted (sim/trust.h), as simulate and search say it.
      const GpuSpec gpu = resolve_cluster(cfg).gpu;
      const PredictionTrust trust = prediction_trust(gpu);
      if (args->json != "-")
        fmt::print("{}\n{}trust: {}\n", explain_text(prog), effective_values_text(cfg, plan, gpu.architecture),
                   trust_text(trust));
      write_json_output(
          args->json, prog,
          {{"trust", trust_json(trust)}, {"sdpa_backend", sdpa_backend_json(cfg.training, plan, gpu.architecture)}});
      return 0;
    };
  });
}

}  // namespace tptune::tools
