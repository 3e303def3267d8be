// A step under pipeline parallelism of a dense-first mixture of experts (sim/pipeline/step.h): DeepSeek-V3 16B from
// its config.json on pp 2 x ep 8 x dp_shard 32 (64 H100s), each stage's parameters and memory by its own blocks (the
// dense block 0 and MoE blocks 1..13 on stage 0, MoE blocks 14..26 on stage 1), hand-derived.
#include <catch2/catch.hpp>
#include <cmath>

#include "plans/language/config.h"
#include "plans/lower/parameter_count.h"
#include "sim/cluster_spec.h"
#include "sim/pipeline/step.h"
#include "tests/fixtures.h"

using namespace tptune;

namespace {

// examples/deepseek-v3-16b-h100.yaml (8 x 8 H100, seq 4096), the sequence-parallel plan at tp 1, ep 8, pp 2 (1F1B),
// dp_shard 64 / 2 = 32, local batch 2 (two microbatches of one sequence), full AC.
struct Dsv3Pp2 {
  Config cfg = test::example_config("deepseek-v3-16b-h100.yaml");
  Plan plan;
  Dsv3Pp2() {
    PlanToggles t{.tp_degree = 1,
                  .dp_shard = 32,
                  .loss_parallel = true,
                  .activation_checkpointing = ActivationCheckpointing::full,
                  .local_batch_size = 2,
                  .ep_degree = 8};
    t.pp_degree = 2;
    t.pp_schedule = PipelineScheduleKind::one_f_one_b;
    plan = test::make_plan("sequence_parallel", t);
  }
};

}  // namespace

TEST_CASE("pipeline step of a MoE: DeepSeek-V3 16B on pp 2, each stage by its own blocks", "[pp][sim][moe]") {
  const Dsv3Pp2 d;
  const Model& m = d.cfg.model;
  REQUIRE(m.n_layers == 27);
  REQUIRE(m.moe.dense_layers == 1);
  // Parameters (global), from the config.json: the latent attention 16 x 192 x 2048 (wq) + 576 x 2048 (wkv_a) + 512 x
  // 16 x 256 (wkv_b) + 16 x 128 x 2048 (wo) + 512 (kv_norm) = 13,763,072, the block's two norms 4,096; the dense MLP 3
  // x 2048 x 10944 = 67,239,936 (block 81,007,104); the MoE MLP 64 x 3 x 2048 x 1408 = 553,648,128 routed + 3 x 2048 x
  // 2816 = 17,301,504 shared + 2048 x 64 = 131,072 router (block 584,847,872); the embedding and the output 102400 x
  // 2048 = 209,715,200 each, the final norm 2,048. Total 15,706,484,224.
  const double moe_block = 584847872.0, dense_block = 81007104.0, table = 209715200.0;
  REQUIRE(m.layer_parameters(0) == 81007104);
  REQUIRE(m.layer_parameters(1) == 584847872);
  REQUIRE(m.total_parameters() == 15706484224);
  // torchtitan's split of 27 blocks on pp 2: 29 effective layers, 15 - 1 = 14 blocks on stage 0, 14 - 1 = 13 on 1.
  const StepReport r = simulate_pipeline(m, d.cfg.training, d.plan, resolve_cluster(d.cfg), default_cost_params());
  REQUIRE(r.pipeline.stage_layers == std::vector<int>{14, 13});
  CHECK(std::isfinite(r.step_time_ms));
  CHECK(r.step_time_ms > 0);
  CHECK(r.tokens_per_second_per_gpu > 0);
  REQUIRE(r.pipeline.ranks.size() == 2);
  // Stage 1 (the head's) holds the most memory here, and the report's memory is its rank's.
  CHECK(r.pipeline.ranks[1].peak_memory > r.pipeline.ranks[0].peak_memory);
  CHECK(r.memory.peak == r.pipeline.ranks[1].peak_memory);
  // Its model states are its parameters' share of the whole model's: stage 1 holds 13 MoE blocks, the final norm and
  // the output: 13 x 584,847,872 + 2,048 + 209,715,200 = 7,812,739,584 of 15,706,484,224 (stage 0: the embedding, the
  // dense block and 13 MoE blocks, 7,893,744,640). The whole model's fp32 master weights on one rank: the routed
  // experts' local 8 of 64 (26 x 8 x 3 x 2048 x 1408 = 1,799,356,416 elements) over efsdp = 32 x 1 / 8 = 4, the rest
  // (15,706,484,224 - 26 x 553,648,128 = 1,311,632,896) over dp_shard 32: 4 x (449,839,104 + 40,988,528) =
  // 1,963,310,528 bytes.
  CHECK(13 * moe_block + 2048 + table == 7812739584.0);
  CHECK(table + dense_block + 13 * moe_block == 7893744640.0);
  const double master = 4 * (1799356416.0 / 4 + 1311632896.0 / 32);
  CHECK(master == 1963310528.0);
  CHECK(r.memory.master_params == Approx(master * 7812739584.0 / 15706484224.0).epsilon(1e-12));
  CHECK(r.memory.optimizer == Approx(2 * master * 7812739584.0 / 15706484224.0).epsilon(1e-12));
  // Its parameters in flight (gathered in the forward, kept through the step under PP): per MoE block the routed
  // experts' efsdp all-gather of its 8 experts (8 x 3 x 2048 x 1408 x 2 B = 138,412,032) and the dp all-gather of the
  // rest (13,763,072 + 4,096 + 17,301,504 + 131,072 = 31,199,744 elements, 62,399,488 B), x 13 blocks; the output and
  // the final norm in bf16 (419,430,400 + 4,096). 2,610,549,760 + 419,434,496 = 3,029,984,256 B.
  CHECK(r.memory.params_in_flight == Approx(13 * (138412032.0 + 62399488.0) + 419434496.0).epsilon(1e-12));
  // The parameters per GPU: the larger stage's local shards (pipeline_parameter_count()): stage 0 (pp rank 0).
  CHECK(r.parameters.pp_rank == 0);
}

TEST_CASE("pipeline step of a MoE: a stage of dense blocks only holds no expert", "[pp][sim][moe]") {
  // DeepSeek-V3 16B with 3 dense blocks (as 671B has) on pp 4 Interleaved1F1B, 8 stages of 29 effective layers: 29 //
  // 8 = 3, 5 extra: stages 0..4 get 4, 5..7 get 3; stage 0 holds 4 - 1 = 3 blocks 0..2, all dense, stage 7 3 - 1 = 2.
  Dsv3Pp2 d;
  d.cfg.model.moe.dense_layers = 3;
  d.plan.pp_degree = 4;
  d.plan.dp_shard = 16;
  d.plan.pp_schedule = PipelineScheduleKind::interleaved_1f1b;
  d.plan.local_batch_size = 4;
  const StepReport r =
      simulate_pipeline(d.cfg.model, d.cfg.training, d.plan, resolve_cluster(d.cfg), default_cost_params());
  REQUIRE(r.pipeline.stage_layers.size() == 8);
  CHECK(r.pipeline.stage_layers[0] == 3);
  CHECK(std::isfinite(r.step_time_ms));
  // Stages 0 and 4 on rank 0 (blocks 0..2 dense, 15..18 MoE), stages 1 and 5 on rank 1 (3..6 and 19..21, all MoE).
  // Local elements at dp_shard 64 / 4 = 16, efsdp 16 / 8 = 2: a MoE block 69,206,016 / 2 + 31,199,744 / 16 =
  // 36,552,992, a dense block 81,007,104 / 16 = 5,062,944, the embedding 209,715,200 / 16 = 13,107,200. Rank 0: 4 x
  // 36,552,992 + 3 x 5,062,944 + 13,107,200 = 174,508,000; rank 1: 7 x 36,552,992 = 255,870,944.
  REQUIRE(r.parameters.per_pp_rank.size() == 4);
  CHECK(r.parameters.per_pp_rank[0] == 174508000);
  CHECK(r.parameters.per_pp_rank[1] == 255870944);
}
