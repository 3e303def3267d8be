// Pipeline parallelism in the exports: torchtitan 0.3's flags (pipeline_parallel_degree, _schedule,
// _microbatch_size, _first/last_stage_less_layers, and _layers_per_stage where the stages per rank are not the
// schedule's default; an explicit split it would not generate is refused) and the job-config TOML (the same keys, and
// module_fqns_per_model_part for an explicit split); plans without PP carry no pipeline key.
#include <catch2/catch.hpp>

#include "plans/export/export.h"
#include "plans/language/pipeline_parallel.h"
#include "plans/language/plan.h"
#include "plans/util/error.h"
#include "tests/fixtures.h"

using namespace tptune;
using Catch::Matchers::Contains;

namespace {

// The value after `flag` in the torchtitan.train command line ("" when the flag is absent).
std::string flag_value(const std::string& sh, const std::string& flag) {
  const size_t at = sh.find(flag + " ");
  if (at == std::string::npos) return "";
  const size_t from = at + flag.size() + 1;
  return sh.substr(from, sh.find_first_of(" \n", from) - from);
}

// Llama 3 405B (126 blocks) on 64 x 8 GPUs: tp 8 x pp 8 x dp_shard 8, torchtitan 0.3's framework.
ExportContext llama3_405b_on_512() {
  ExportContext ctx;
  ctx.model = test::model_named("llama3-405b");
  ctx.seq_len = 8192;
  ctx.nodes = 64;
  ctx.gpus_per_node = 8;
  return ctx;
}

Plan pp_plan(PipelineScheduleKind kind, int stages_per_rank = 0, std::vector<int> split = {}) {
  PlanToggles t{.tp_degree = 8, .dp_shard = 8, .loss_parallel = true, .local_batch_size = 32};
  t.pp_degree = 8;
  t.pp_schedule = kind;
  t.pp_microbatch_size = 4;
  t.pp_stages_per_rank = stages_per_rank;
  t.pp_split = std::move(split);
  return test::make_plan("sequence_parallel", t, Framework::torchtitan_0_3);
}

}  // namespace

TEST_CASE("pipeline export: torchtitan 0.3's flags", "[pp][export]") {
  const ExportContext ctx = llama3_405b_on_512();
  std::string sh = export_plan(pp_plan(PipelineScheduleKind::interleaved_1f1b), ExportFormat::torchtitan, ctx);
  CHECK(flag_value(sh, "--parallelism.pipeline-parallel-degree") == "8");
  CHECK(flag_value(sh, "--parallelism.pipeline-parallel-schedule") == "Interleaved1F1B");
  CHECK(flag_value(sh, "--parallelism.pipeline-parallel-microbatch-size") == "4");
  CHECK(flag_value(sh, "--parallelism.pipeline-parallel-first-stage-less-layers") == "1");
  CHECK(flag_value(sh, "--parallelism.data-parallel-shard-degree") == "8");
  CHECK(flag_value(sh, "--training.local-batch-size") == "32");
  // torchtitan 0.3's trainer refuses a pipeline with CUDA graphs on (its default).
  CHECK(sh.find("--training.disable-cuda-graphs") != std::string::npos);
  CHECK(export_plan(pp_plan(PipelineScheduleKind::interleaved_1f1b), ExportFormat::torchtitan_toml, ctx)
            .find("cuda_graphs") == std::string::npos);  // the TOML torchtitan had none
  // 2 stages per rank is the looped schedules' default: no layers_per_stage.
  CHECK(sh.find("layers-per-stage") == std::string::npos);
  // 4 stages per rank: 32 stages of 126 + 2 = 128 effective layers: ceil(128 / 4) = 32, so layers_per_stage 4.
  sh = export_plan(pp_plan(PipelineScheduleKind::interleaved_1f1b, 4), ExportFormat::torchtitan, ctx);
  CHECK(flag_value(sh, "--parallelism.pipeline-parallel-layers-per-stage") == "4");
  // 3 stages per rank: 24 stages; ceil(128 / 5) = 26 and ceil(128 / 6) = 22: no L gives 24.
  CHECK_THROWS_WITH(export_plan(pp_plan(PipelineScheduleKind::interleaved_1f1b, 3), ExportFormat::torchtitan, ctx),
                    Contains("no pipeline_parallel_layers_per_stage L gives pp 8 x 3 stages"));
  // torchtitan's own split written explicitly exports as the default; another split is refused.
  std::vector<int> generated = {15, 16, 16, 16, 16, 16, 16, 15};
  sh = export_plan(pp_plan(PipelineScheduleKind::one_f_one_b, 0, generated), ExportFormat::torchtitan, ctx);
  CHECK(flag_value(sh, "--parallelism.pipeline-parallel-schedule") == "1F1B");
  std::vector<int> other = {14, 16, 16, 16, 16, 16, 16, 16};
  CHECK_THROWS_WITH(export_plan(pp_plan(PipelineScheduleKind::one_f_one_b, 0, other), ExportFormat::torchtitan, ctx),
                    Contains("is not the split torchtitan generates for 8 stages"));
  // The world counts pp: tp 8 x dp_shard 8 x pp 8 = 512 GPUs.
  ExportContext small = ctx;
  small.nodes = 8;
  CHECK_THROWS_WITH(export_plan(pp_plan(PipelineScheduleKind::one_f_one_b), ExportFormat::torchtitan, small),
                    Contains("x pp 8 = 512 GPUs"));
  // Without PP no pipeline flag.
  Plan plain = pp_plan(PipelineScheduleKind::one_f_one_b);
  plain.pp_degree = 1;
  plain.dp_shard = 64;
  CHECK(export_plan(plain, ExportFormat::torchtitan, ctx).find("pipeline") == std::string::npos);
}

TEST_CASE("pipeline export: the job-config TOML", "[pp][export]") {
  const ExportContext ctx = llama3_405b_on_512();
  std::string toml = export_plan(pp_plan(PipelineScheduleKind::one_f_one_b), ExportFormat::torchtitan_toml, ctx);
  CHECK_THAT(toml, Contains("pipeline_parallel_degree = 8\n"));
  CHECK_THAT(toml, Contains("pipeline_parallel_schedule = \"1F1B\"\n"));
  CHECK_THAT(toml, Contains("pipeline_parallel_microbatch_size = 4\n"));
  CHECK(toml.find("module_fqns_per_model_part") == std::string::npos);
  // An explicit split: its modules per stage, the embedding on the first, norm and output on the last.
  std::vector<int> split = {14, 16, 16, 16, 16, 16, 16, 16};
  toml = export_plan(pp_plan(PipelineScheduleKind::one_f_one_b, 0, split), ExportFormat::torchtitan_toml, ctx);
  CHECK_THAT(toml, Contains("module_fqns_per_model_part = [[\"tok_embeddings\", \"layers.0\", "));
  CHECK_THAT(toml, Contains("\"layers.13\"], [\"layers.14\", "));
  CHECK_THAT(toml, Contains("\"layers.125\", \"norm\", \"output\"]]\n"));
  // Without the model, an explicit split cannot be written.
  CHECK_THROWS_WITH(
      export_plan(pp_plan(PipelineScheduleKind::one_f_one_b, 0, split), ExportFormat::torchtitan_toml, {}),
      Contains("the export needs --config CONFIG"));
}
