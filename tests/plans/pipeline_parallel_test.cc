// Pipeline parallelism in the plan: torchtitan's default split of blocks into stages (hand-derived from
// _generate_llm_fqn_per_model_part's arithmetic), the explicit split, the stages per rank each schedule accepts, the
// microbatches, the plan YAML keys (round trip, pp 1 writing none of them) and the one-line errors naming the key's
// line.
#include "plans/language/pipeline_parallel.h"

#include <catch2/catch.hpp>

#include "plans/language/plan.h"
#include "plans/language/resolve/plan_resolve.h"
#include "plans/util/error.h"
#include "tests/fixtures.h"

using namespace tptune;
using Catch::Matchers::Contains;

namespace {

Plan pp_plan(const std::string& yaml) { return load_plan_string(yaml, "pp.yaml"); }

Model layers(int n) {
  Model m = test::small_model(n);
  m.tie_word_embeddings = false;
  return m;
}

}  // namespace

TEST_CASE("pipeline split: torchtitan's default, embedding and head as one layer each", "[pp][split]") {
  // 8 blocks, 4 stages: effective 8 + 1 + 1 = 10, 10 / 4 = 2 each and the first 10 % 4 = 2 stages one more:
  // shares 3, 3, 2, 2; stage 0 gives 1 to the embedding, stage 3 gives 1 to norm + output: 2, 3, 2, 1 blocks.
  CHECK(default_stage_layers(8, 4, 1, 1, "x") == std::vector<int>{2, 3, 2, 1});
  // Llama 3 405B (126 blocks), pp 8, 1F1B: effective 128, 16 each: 15, 16 x 6, 15.
  CHECK(default_stage_layers(126, 8, 1, 1, "x") == std::vector<int>{15, 16, 16, 16, 16, 16, 16, 15});
  // Interleaved on pp 8 with 2 stages per rank: 16 stages of 128 / 16 = 8: 7, 8 x 14, 7 (7 + 112 + 7 = 126).
  std::vector<int> interleaved(16, 8);
  interleaved.front() = interleaved.back() = 7;
  CHECK(default_stage_layers(126, 16, 1, 1, "x") == interleaved);
  // Weights 0: 8 blocks over 4 stages, 2 each.
  CHECK(default_stage_layers(8, 4, 0, 0, "x") == std::vector<int>{2, 2, 2, 2});
  // One stage: every block.
  CHECK(default_stage_layers(8, 1, 1, 1, "x") == std::vector<int>{8});
  // The docstring's example: 3 layers, 2 stages, weights 2 and 2: effective 7, shares 4 and 3: stage 0 takes
  // 4 - 2 = 2 blocks, stage 1 3 - 2 = 1.
  CHECK(default_stage_layers(3, 2, 2, 2, "x") == std::vector<int>{2, 1});
}

TEST_CASE("pipeline split: torchtitan's refusals", "[pp][split][errors]") {
  // 2 blocks + 2 = 4 effective layers cannot fill 5 stages.
  CHECK_THROWS_WITH(default_stage_layers(2, 5, 1, 1, "plan p.yaml:3"),
                    Contains("plan p.yaml:3: 5 pipeline stages but only 4 effective layers"));
  // 4 blocks, 3 stages, first weight 3: effective 8, 2 per stage, and 3 > 2.
  CHECK_THROWS_WITH(default_stage_layers(4, 3, 3, 1, "w"), Contains("exceed the 2 effective layers per stage"));
}

TEST_CASE("pipeline plan: stages per rank, microbatches and split resolved on a model", "[pp][resolve]") {
  const Model m = layers(8);
  Plan p = pp_plan("pp_degree: 2\nlocal_batch_size: 8\npp_microbatch_size: 2\n");
  PipelineSplit s = resolve_pipeline(m, p);
  CHECK(s.stages_per_rank == 1);  // 1F1B, torchtitan's default schedule
  CHECK(s.microbatches == 4);     // 8 / 2
  // effective 10 over 2 stages: 5 each, minus the embedding and the head: 4 and 4.
  CHECK(s.stage_layers == std::vector<int>{4, 4});
  CHECK(s.first_layer(1) == 4);

  p = pp_plan("pp_degree: 2\npp_schedule: interleaved1f1b\nlocal_batch_size: 4\n");  // case-insensitive, as torch
  CHECK(p.pp_schedule == PipelineScheduleKind::interleaved_1f1b);
  s = resolve_pipeline(m, p);
  CHECK(s.stages_per_rank == 2);
  // 4 stages of effective 10: 2, 3, 2, 1 (as above).
  CHECK(s.stage_layers == std::vector<int>{2, 3, 2, 1});

  p = pp_plan("pp_degree: 2\npp_split: [1, 7]\nlocal_batch_size: 2\n");
  s = resolve_pipeline(m, p);
  CHECK(s.stage_layers == std::vector<int>{1, 7});
  CHECK(s.microbatches == 2);

  // pp 1: one stage of every block.
  s = resolve_pipeline(m, pp_plan("tp_degree: 2\n"));
  CHECK(s.stage_layers == std::vector<int>{8});
}

TEST_CASE("pipeline plan: one-line errors naming the key's line", "[pp][errors]") {
  const Model m = layers(8);
  // The microbatch size must divide the local batch.
  CHECK_THROWS_WITH(resolve_pipeline(m, pp_plan("pp_degree: 2\nlocal_batch_size: 6\npp_microbatch_size: 4\n")),
                    Contains("plan pp.yaml:3: pp_microbatch_size 4 does not divide local_batch_size 6"));
  // A split that does not cover the blocks.
  CHECK_THROWS_WITH(resolve_pipeline(m, pp_plan("pp_degree: 2\npp_split: [3, 4]\n")),
                    Contains("plan pp.yaml:2: pp_split [3, 4] places 7 blocks, but model"));
  // A split whose stage count is not a multiple of pp.
  CHECK_THROWS_WITH(resolve_pipeline(m, pp_plan("pp_degree: 2\npp_split: [3, 3, 2]\n")),
                    Contains("pp_split has 3 stages, not a multiple of pp_degree 2"));
  // Stages per rank a schedule does not run.
  CHECK_THROWS_WITH(resolve_pipeline(m, pp_plan("pp_degree: 2\npp_schedule: 1F1B\npp_stages_per_rank: 2\n")),
                    Contains("plan pp.yaml:3: pipeline schedule 1F1B runs one stage per rank, got 2"));
  CHECK_THROWS_WITH(resolve_pipeline(m, pp_plan("pp_degree: 2\npp_schedule: ZBVZeroBubble\npp_stages_per_rank: 3\n")),
                    Contains("runs exactly 2 stages per rank (a V), got 3"));
  CHECK_THROWS_WITH(resolve_pipeline(m, pp_plan("pp_degree: 2\npp_schedule: Interleaved1F1B\npp_stages_per_rank: 1\n")),
                    Contains("torchtitan needs at least 2 stages per rank, got 1"));
  // More stages than the model has (effective) layers: 8 + 2 = 10 < 4 x 3.
  CHECK_THROWS_WITH(resolve_pipeline(m, pp_plan("pp_degree: 4\npp_schedule: LoopedBFS\npp_stages_per_rank: 3\n")),
                    Contains("12 pipeline stages but only 10 effective layers"));
  // Tied embeddings cannot sit on two stages.
  Model tied = layers(8);
  tied.tie_word_embeddings = true;
  CHECK_THROWS_WITH(resolve_pipeline(tied, pp_plan("pp_degree: 2\n")), Contains("ties its input and output"));
  // A schedule torch does not know.
  CHECK_THROWS_WITH(pp_plan("pp_degree: 2\npp_schedule: 2F2B\n"), Contains("pp.yaml:2: pp_schedule"));
  // A split entry out of range.
  CHECK_THROWS_WITH(pp_plan("pp_degree: 2\npp_split: [4, -1]\n"), Contains("pp.yaml:2: pp_split[1]"));
}

TEST_CASE("pipeline plan: YAML round trip, pp 1 writes no pp key", "[pp][yaml]") {
  Plan p = pp_plan(
      "tp_degree: 8\npp_degree: 8\npp_schedule: Interleaved1F1B\npp_microbatch_size: 2\npp_stages_per_rank: 2\n"
      "pp_first_stage_less_layers: 0\npp_last_stage_less_layers: 2\npp_split: [1, 2, 3]\nlocal_batch_size: 4\n");
  const Plan back = load_plan_string(plan_to_yaml(p), "back.yaml");
  CHECK(back.toggles() == p.toggles());
  CHECK(back.pp_split == std::vector<int>{1, 2, 3});
  CHECK(back.pp_first_stage_less_layers == 0);
  CHECK(back.pp_last_stage_less_layers == 2);
  const std::string none = plan_to_yaml(pp_plan("tp_degree: 8\n"));
  CHECK(none.find("pp_") == std::string::npos);
}

TEST_CASE("pipeline and CP keys without their degree: refused, naming the key's origin and the degree's",
          "[pp][errors]") {
  // Issue 37 class 7. A plan file: pp_split with no pp_degree (pp 1) names the split's line.
  CHECK_THROWS_WITH(pp_plan("tp_degree: 2\npp_split: [1, 3]\n"),
                    "plan pp.yaml:2: pp_split [1, 3]: needs pp_degree > 1 (--pp N, or pp_degree in the plan file); "
                    "pp_degree is 1 (the default)");
  CHECK_THROWS_WITH(pp_plan("pp_degree: 1\npp_schedule: GPipe\n"),
                    "plan pp.yaml:2: pp_schedule GPipe: needs pp_degree > 1 (--pp N, or pp_degree in the plan file); "
                    "pp_degree is 1 (plan pp.yaml:1)");
  for (const char* key : {"pp_microbatch_size: 2", "pp_stages_per_rank: 2", "pp_first_stage_less_layers: 0",
                          "pp_last_stage_less_layers: 0"}) {
    CAPTURE(key);
    CHECK_THROWS_WITH(pp_plan(std::string(key) + "\n"),
                      Contains("plan pp.yaml:1: pp_") && Contains("needs pp_degree > 1"));
  }
  CHECK_THROWS_WITH(pp_plan("cp_rotate_method: alltoall\n"),
                    "plan pp.yaml:1: cp_rotate_method alltoall: needs cp_degree > 1 (--cp N, or cp_degree in the plan "
                    "file); cp_degree is 1 (the default)");
  CHECK_THROWS_WITH(pp_plan("cp_degree: 1\ncp_load_balance: false\n"),
                    Contains("plan pp.yaml:2: cp_load_balance false: needs cp_degree > 1") &&
                        Contains("cp_degree is 1 (plan pp.yaml:1)"));
  // With the degree the keys load; a plan no one stated the keys of (a preset's, a candidate's) is never refused,
  // whatever values its fields hold.
  CHECK(pp_plan("pp_degree: 2\npp_split: [1, 3]\ncp_degree: 2\ncp_rotate_method: alltoall\n").pp_split.size() == 2);
  Plan quiet;
  quiet.pp_schedule = PipelineScheduleKind::dual_pipe_v;
  quiet.cp_rotate = CpRotate::alltoall;
  CHECK_NOTHROW(check_parallel_keys(quiet));
  // Options (tools/plan_options.cc records them as provenance): the first of the pipeline's in key order.
  Plan opt;
  opt.pp_schedule = PipelineScheduleKind::dual_pipe_v;
  opt.pp_stages_per_rank = 7;
  opt.provenance = {{"pp_degree", "option --pp"},
                    {"pp_schedule", "option --pp-schedule"},
                    {"pp_stages_per_rank", "option --pp-stages-per-rank"}};
  CHECK_THROWS_WITH(check_parallel_keys(opt),
                    "option --pp-schedule: pp_schedule DualPipeV: needs pp_degree > 1 (--pp N, or pp_degree in the "
                    "plan file); pp_degree is 1 (option --pp)");
  opt.pp_degree = 2;
  CHECK_NOTHROW(check_parallel_keys(opt));
}
