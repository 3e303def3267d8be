// Gradient accumulation in the plan, the config and the exports: the plan YAML key (round trip, written only when
// > 1, errors with file:line), training.global_batch_size and search.gradient_accumulation (ranges, the global batch
// that search.gradient_accumulation needs), Plan::global_batch_size's overflow check, the torchtitan flags, and
// explain's line. The lowering does not read the field (tests/sim/accumulation_test.cc checks the simulator).
#include <catch2/catch.hpp>

#include "plans/export/export.h"
#include "plans/language/config.h"
#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "sim/report/explain.h"
#include "tests/error_text.h"
#include "tests/fixtures.h"

using namespace tptune;
using Catch::Matchers::Contains;
using tptune::test::error_of;

namespace {

std::string error_of_config(const std::string& yaml) {
  return error_of([&] { load_config_string(yaml, "ga-config.yaml"); });
}

}  // namespace

TEST_CASE("accumulation: plan YAML reads and writes gradient_accumulation_steps, omitted at 1",
          "[accumulation][plan_yaml]") {
  const Plan p =
      load_plan_string("tp_degree: 8\ndp_shard: 4\nlocal_batch_size: 2\ngradient_accumulation_steps: 16\n", "ga.yaml");
  CHECK(p.gradient_accumulation_steps == 16);
  CHECK(p.stated.count("gradient_accumulation_steps") == 1);
  CHECK(p.provenance.at("gradient_accumulation_steps") == "plan ga.yaml:4");
  CHECK(p.global_batch_size() == 2 * 4 * 16);
  const std::string yaml = plan_to_yaml(p);
  CHECK_THAT(yaml, Contains("local_batch_size: 2\ngradient_accumulation_steps: 16\n"));
  const Plan back = load_plan_string(yaml, "back.yaml");
  CHECK(back == p);
  // A plan that does not accumulate is written as before the key existed.
  const Plan one = load_plan_string("tp_degree: 8\n");
  CHECK(one.gradient_accumulation_steps == 1);
  CHECK_THAT(plan_to_yaml(one), !Contains("gradient_accumulation"));
  Plan other = p;
  other.gradient_accumulation_steps = 2;
  CHECK_FALSE(other == p);  // part of the plan's identity
  // Presets keep it.
  CHECK(test::make_plan("sequence_parallel",
                        {.tp_degree = 8, .dp_shard = 2, .loss_parallel = true, .gradient_accumulation_steps = 4})
            .gradient_accumulation_steps == 4);
}

TEST_CASE("accumulation: bad gradient_accumulation_steps values are one-line errors naming file:line",
          "[accumulation][plan_yaml]") {
  for (const char* v : {"0", "-1", "x", "1.5", "68719476737", "99999999999999999999", "[2]"}) {
    INFO(v);
    const std::string e = error_of(
        [&] { load_plan_string(std::string("tp_degree: 2\ngradient_accumulation_steps: ") + v + "\n", "ga.yaml"); });
    CHECK_THAT(e, Contains("ga.yaml:2: gradient_accumulation_steps: expected an integer in 1..68719476736"));
    CHECK(e.find('\n') == std::string::npos);
  }
}

TEST_CASE("accumulation: Plan::global_batch_size is overflow-checked", "[accumulation][plan]") {
  Plan p = test::make_plan("sequence_parallel", {.tp_degree = 8,
                                                 .dp_shard = 1 << 20,
                                                 .dp_replicate = 1 << 20,
                                                 .loss_parallel = true,
                                                 .local_batch_size = 1 << 16,
                                                 .gradient_accumulation_steps = int64_t{1} << 36});
  const std::string e = error_of([&] { (void)p.global_batch_size(); });
  CHECK_THAT(e, Contains("global batch size"));
  CHECK(e.find('\n') == std::string::npos);
  CHECK(
      test::make_plan(
          "sequence_parallel",
          {.tp_degree = 8, .dp_shard = 16, .dp_replicate = 8, .loss_parallel = true, .gradient_accumulation_steps = 4})
          .global_batch_size() == 512);
}

TEST_CASE("accumulation: training.global_batch_size and search.gradient_accumulation in the config",
          "[accumulation][config]") {
  const Config none = load_config_string("model: {preset: tiny-llama}\n");
  CHECK(none.training.global_batch_size == 0);
  CHECK_FALSE(none.search.gradient_accumulation);
  const Config c = load_config_string(
      "model: {preset: tiny-llama}\ntraining:\n  local_batch_size: 2\n  global_batch_size: 64\n", "ga-config.yaml");
  CHECK(c.training.global_batch_size == 64);
  CHECK(c.training.global_batch_size_at == "ga-config.yaml:4");
  for (const char* v : {"0", "-1", "68719476737", "x"}) {
    INFO(v);
    const std::string e =
        error_of_config(std::string("model: {preset: tiny-llama}\ntraining:\n  global_batch_size: ") + v + "\n");
    CHECK_THAT(e, Contains("ga-config.yaml:3: training.global_batch_size: expected an integer in 1..68719476736"));
    CHECK(e.find('\n') == std::string::npos);
  }
  const Config s = load_config_string(
      "model: {preset: tiny-llama}\nsearch:\n  global_batch_size: 64\n  gradient_accumulation: true\n");
  CHECK(s.search.gradient_accumulation);
  CHECK(s.search.global_batch_size == 64);
  const std::string e =
      error_of_config("model: {preset: tiny-llama}\nsearch:\n  tp_degrees: [1]\n  gradient_accumulation: true\n");
  CHECK_THAT(e, Contains("ga-config.yaml:4: search.gradient_accumulation: true needs search.global_batch_size"));
  CHECK(e.find('\n') == std::string::npos);
  CHECK_THAT(error_of_config("model: {preset: tiny-llama}\nsearch:\n  gradient_accumulation: maybe\n"),
             Contains("ga-config.yaml:3: search.gradient_accumulation"));
  // false without a global batch is fine (the default).
  CHECK_FALSE(load_config_string("model: {preset: tiny-llama}\nsearch:\n  gradient_accumulation: false\n")
                  .search.gradient_accumulation);
}

TEST_CASE("accumulation: the lowering does not read it (one microbatch)", "[accumulation][lower]") {
  Config cfg = load_config_string("model: {preset: tiny-llama}\ntraining: {seq_len: 32}\n");
  const Program a = lower(cfg.model, cfg.training,
                          test::make_plan("sequence_parallel", {.tp_degree = 2, .dp_shard = 2, .loss_parallel = true}));
  const Program b =
      lower(cfg.model, cfg.training,
            test::make_plan("sequence_parallel",
                            {.tp_degree = 2, .dp_shard = 2, .loss_parallel = true, .gradient_accumulation_steps = 8}));
  CHECK(b.plan.gradient_accumulation_steps == 8);
  REQUIRE(a.segments.size() == b.segments.size());
  for (size_t s = 0; s < a.segments.size(); ++s) CHECK(a.segments[s].ops.size() == b.segments[s].ops.size());
  CHECK(a.tensors.size() == b.tensors.size());
  CHECK(a.tokens_per_rank() == b.tokens_per_rank());
}

TEST_CASE("accumulation: exports (torchtitan 0.3 --training.global-batch-size, TOML global_batch_size, Python comment)",
          "[accumulation][export]") {
  Plan base;
  base.tp_degree = 8;
  base.dp_shard = 16;
  base.dp_replicate = 2;
  base.local_batch_size = 2;
  base.gradient_accumulation_steps = 4;
  base.loss_parallel = true;
  base.framework = Framework::torchtitan_0_3;
  const Plan p = preset_plan("sequence_parallel", base);
  ExportContext ctx;
  ctx.model = Model{};
  REQUIRE(model_preset("llama3-405b", *ctx.model));
  ctx.nodes = 32;
  ctx.gpus_per_node = 8;
  // G = local 2 x dp_shard 16 x dp_replicate 2 x ga 4 = 256; torchtitan derives ga = 256 // (2 x 32) = 4.
  const std::string cli = export_torchtitan_cli(p, ctx);
  CHECK_THAT(cli, Contains("--training.local-batch-size 2"));
  CHECK_THAT(cli, Contains("--training.global-batch-size 256"));
  CHECK_THAT(export_torchtitan_toml(p), Contains("local_batch_size = 2\nglobal_batch_size = 256"));
  CHECK_THAT(export_python(p), Contains("# Gradient accumulation: 4 microbatches of local batch 2 per optimizer step"));
  // Without accumulation: nothing new (torchtitan's default -1 is one microbatch).
  base.gradient_accumulation_steps = 1;
  const Plan q = preset_plan("sequence_parallel", base);
  CHECK_THAT(export_torchtitan_cli(q, ctx), !Contains("global-batch-size"));
  CHECK_THAT(export_torchtitan_toml(q), !Contains("global_batch_size"));
  CHECK_THAT(export_python(q), !Contains("accumulation"));
}

TEST_CASE("accumulation: explain names the microbatches", "[accumulation][explain]") {
  Config cfg = load_config_string("model: {preset: tiny-llama}\ntraining: {seq_len: 32}\n");
  CHECK_THAT(
      explain_text(lower(
          cfg.model, cfg.training,
          test::make_plan("sequence_parallel",
                          {.tp_degree = 2, .dp_shard = 2, .loss_parallel = true, .gradient_accumulation_steps = 8}))),
      Contains("seq 32 x local batch 1 x 8 microbatches (gradient accumulation"));
  CHECK_THAT(
      explain_text(lower(cfg.model, cfg.training,
                         test::make_plan("sequence_parallel", {.tp_degree = 2, .dp_shard = 2, .loss_parallel = true}))),
      !Contains("microbatches"));
}
