// Expert parallelism: the plan key ep_degree, torchtitan 0.3.0's sparse mesh (plans/language/expert_parallel.h) and
// the one-line errors of each bad mesh.
#include "plans/language/expert_parallel.h"

#include <catch2/catch.hpp>
#include <map>
#include <sstream>
#include <string>

#include "plans/export/export.h"
#include "plans/export/torchtitan_recipe.h"
#include "plans/language/config.h"
#include "plans/language/plan.h"
#include "plans/model/hf_config.h"
#include "plans/util/error.h"
#include "tests/fixtures.h"

using namespace tptune;
using Catch::Matchers::Contains;
using tptune::test::make_plan;

namespace {

Model tiny_moe() { return test::tiny_moe_model(); }

std::string mesh_error(const Model& m, PlanToggles t) {
  try {
    check_expert_mesh(m, t, "plan p.yaml:3");
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST_CASE("expert parallel: ep_degree round-trips through the plan YAML, absent when 1", "[moe][plan_yaml]") {
  const Plan p = load_plan_string("tp_degree: 2\ndp_shard: 4\nep_degree: 4\n", "p.yaml");
  CHECK(p.ep_degree == 4);
  CHECK(p.provenance.at("ep_degree") == "plan p.yaml:3");
  const std::string yaml = plan_to_yaml(p);
  CHECK(yaml.find("ep_degree: 4\n") != std::string::npos);
  const Plan again = load_plan_string(yaml, "again.yaml");
  CHECK(again.ep_degree == 4);
  CHECK(again.toggles() == p.toggles());
  // The default is 1 and is not written, so plans written before the key read and write the same.
  const Plan dense = load_plan_string("tp_degree: 2\n", "d.yaml");
  CHECK(dense.ep_degree == 1);
  CHECK(plan_to_yaml(dense).find("ep_degree") == std::string::npos);
  CHECK_THROWS_WITH(load_plan_string("ep_degree: 0\n", "z.yaml"), Catch::Contains("z.yaml:1: ep_degree: expected"));
}

TEST_CASE("expert parallel: the sparse mesh is (dp_replicate, efsdp, ep), efsdp = dp_shard x cp x tp / ep",
          "[moe][mesh]") {
  const Model m = tiny_moe();
  // dp_shard 4 x cp 1 x tp 2 = 8 ranks of the dense FSDP x TP mesh; ep 4: efsdp 2, 8 / 4 = 2 experts per ep rank.
  ExpertMesh x = check_expert_mesh(m, {.tp_degree = 2, .dp_shard = 4, .ep_degree = 4}, "w");
  CHECK(x.ep == 4);
  CHECK(x.efsdp == 2);
  CHECK(x.experts_local == 2);
  // cp counts in: dp_shard 2 x cp 2 x tp 2 = 8, ep 8: efsdp 1, one expert per rank.
  x = check_expert_mesh(m, {.tp_degree = 2, .dp_shard = 2, .cp_degree = 2, .ep_degree = 8}, "w");
  CHECK(x.efsdp == 1);
  CHECK(x.experts_local == 1);
  // ep 1: the dense FSDP group (dp_shard x cp) and every expert.
  x = check_expert_mesh(m, {.tp_degree = 2, .dp_shard = 4}, "w");
  CHECK(x.ep == 1);
  CHECK(x.efsdp == 4);
  CHECK(x.experts_local == 8);
}

TEST_CASE("expert parallel: each bad mesh is a one-line error naming the key's origin", "[moe][mesh]") {
  const Model m = tiny_moe();
  CHECK(mesh_error(test::tiny_llama_model(), {.ep_degree = 2}) ==
        "plan p.yaml:3: ep_degree 2: the model has no routed experts (model.moe); expected 1");
  CHECK(mesh_error(m, {.tp_degree = 2, .dp_shard = 4, .ep_degree = 3}) ==
        "plan p.yaml:3: ep_degree 3 does not divide dp_shard 4 x cp 1 x tp 2 = 8: torchtitan's sparse mesh (pp, "
        "dp_replicate, efsdp, ep) needs efsdp = dp_shard x cp x tp / ep whole (distributed/parallel_dims.py)");
  // 8 experts over ep 16 (dp_shard 8 x tp 2 = 16 ranks: the mesh is whole, the experts are not).
  CHECK(mesh_error(m, {.tp_degree = 2, .dp_shard = 8, .ep_degree = 16}) ==
        "plan p.yaml:3: ep_degree 16 does not divide the model's 8 routed experts: each ep rank holds experts / ep "
        "whole experts (GroupedExperts Shard(0) on ep)");
  CHECK(mesh_error(m, {.ep_degree = 0}) == "plan p.yaml:3: ep_degree: expected >= 1, got 0");
}

namespace {

// Qwen3 30B-A3B from its config.json (128 experts of 768, top 8) on the config's 1 node x 8 GPUs.
ExportContext qwen3_30b_a3b_ctx() {
  ExportContext ctx;
  ctx.model = load_hf_config(std::string(TPTUNE_SOURCE_DIR) + "/examples/hf/qwen3-30b-a3b/config.json");
  ctx.seq_len = 4096;
  ctx.nodes = 1;
  ctx.gpus_per_node = 8;
  ctx.n_layers = ctx.model->n_layers;
  return ctx;
}

// "section.key" -> value of the TOML's `key = value` lines.
std::map<std::string, std::string> toml_keys(const std::string& text) {
  std::map<std::string, std::string> kv;
  std::istringstream in(text);
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '[') {
      section = line.substr(1, line.find(']') - 1);
      continue;
    }
    const size_t eq = line.find(" = ");
    if (eq != std::string::npos) kv[section + "." + line.substr(0, eq)] = line.substr(eq + 3);
  }
  return kv;
}

std::string export_error(const Plan& p, ExportFormat f, const ExportContext& ctx) {
  try {
    export_plan(p, f, ctx);
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST_CASE("expert parallel export: Qwen3 30B-A3B at ep 4 x tp 2, TOML and python lines", "[moe][export]") {
  const ExportContext ctx = qwen3_30b_a3b_ctx();
  REQUIRE(ctx.model->moe.experts == 128);
  const Plan p = make_plan("sequence_parallel", {.tp_degree = 2,
                                                 .dp_shard = 4,
                                                 .loss_parallel = true,
                                                 .activation_checkpointing = ActivationCheckpointing::full,
                                                 .local_batch_size = 2,
                                                 .ep_degree = 4});
  // torchtitan's ParallelismConfig.expert_parallel_degree (0.3.0's config/configs.py; the 2025 job config's too),
  // beside the dense degrees: dp_shard 4 x tp 2 = 8 ranks, ep 4 of them per expert group, efsdp 2.
  const std::string toml = export_plan(p, ExportFormat::torchtitan_toml, ctx);
  CHECK_THAT(toml, Contains("\n[parallelism]\n"
                            "data_parallel_replicate_degree = 1\n"
                            "data_parallel_shard_degree = 4\n"
                            "tensor_parallel_degree = 2\n"
                            "expert_parallel_degree = 4\n"
                            "enable_async_tensor_parallel = false\n"
                            "disable_loss_parallel = false\n"));
  // Not a llama3 job config: head_dim 128 x 32 heads != dim 2048 is Qwen3's, not refused for a MoE model.
  CHECK_THAT(toml, Contains("# The model is a mixture of experts (128 routed experts, top 8): merge into the train "
                            "config of\n# torchtitan's MoE model of it (qwen3, deepseek_v3, llama4), not llama3's.\n"));
  // python: the same degree by torchtitan's name, and the sparse mesh it implies (8 / 4 = efsdp 2).
  const std::string py = export_plan(p, ExportFormat::python, ctx);
  CHECK_THAT(py,
             Contains("# Expert parallelism: ep 4 (torchtitan: parallelism.expert_parallel_degree 4). The routed "
                      "experts are\n"
                      "# Shard(0) on the ep axis of the sparse mesh (pp, dp_replicate, efsdp, ep), efsdp = dp_shard x "
                      "cp x tp / ep\n"
                      "# = 8 / 4 = 2, and fully_shard'ed over efsdp; the router, shared and routed experts are "
                      "sharded by\n"
                      "# torchtitan's MoE plan (models/common/moe_sharding.py), not by entries of the dict below.\n"));
  CHECK_THAT(py, Contains("TP_DEGREE = 2\n"));
  // ep 1 writes no ep line in either.
  const Plan dense = make_plan("sequence_parallel", {.tp_degree = 2, .dp_shard = 4, .loss_parallel = true});
  CHECK_THAT(export_plan(dense, ExportFormat::torchtitan_toml, ctx), !Contains("expert_parallel"));
  CHECK_THAT(export_plan(dense, ExportFormat::python, ctx), !Contains("xpert"));
}

TEST_CASE("expert parallel export: TOML round trip of ep_degree with the dense degrees", "[moe][export]") {
  const ExportContext ctx = qwen3_30b_a3b_ctx();
  for (int tp : {1, 2, 4})
    for (int ep : {1, 2, 4, 8}) {
      const Plan p = make_plan("sequence_parallel", {.tp_degree = tp, .dp_shard = 8 / tp, .ep_degree = ep});
      INFO("tp " << tp << " ep " << ep);
      const auto kv = toml_keys(export_plan(p, ExportFormat::torchtitan_toml, ctx));
      CHECK(kv.count("parallelism.expert_parallel_degree") == (ep > 1 ? 1u : 0u));
      Plan back = p;
      back.ep_degree = kv.count("parallelism.expert_parallel_degree")
                           ? std::stoi(kv.at("parallelism.expert_parallel_degree"))
                           : 1;  // torchtitan's default
      back.tp_degree = std::stoi(kv.at("parallelism.tensor_parallel_degree"));
      back.dp_shard = std::stoi(kv.at("parallelism.data_parallel_shard_degree"));
      CHECK(back.toggles() == p.toggles());
    }
}

TEST_CASE("expert parallel export: Qwen3 30B-A3B is torchtitan 0.3's qwen3_30b_a3b recipe, with its EP degree",
          "[moe][export]") {
  // The config.json of Qwen/Qwen3-30B-A3B has every dimension of models/qwen3/__init__.py's _30b_a3b (the recipe
  // table of plans/export/torchtitan_recipe.h), so the command names --module qwen3 --config qwen3_30b_a3b and sets
  // the plan's degrees: tp 2 x dp_shard 4 = 8 ranks, ep 4 (efsdp 2).
  const ExportContext ctx = qwen3_30b_a3b_ctx();
  const TorchtitanRecipe* r = torchtitan_recipe(*ctx.model);
  REQUIRE(r != nullptr);
  CHECK(std::string(r->function) == "qwen3_30b_a3b");
  const Plan p = make_plan("sequence_parallel", {.tp_degree = 2, .dp_shard = 4, .loss_parallel = true, .ep_degree = 4});
  const std::string cmd = export_plan(p, ExportFormat::torchtitan, ctx);
  CHECK_THAT(cmd, Contains("--module qwen3 \\\n  --config qwen3_30b_a3b"));
  CHECK_THAT(cmd, Contains("--parallelism.expert-parallel-degree 4"));
  CHECK_THAT(cmd, Contains("--parallelism.tensor-parallel-degree 2"));
  CHECK_THAT(cmd, Contains("--training.seq-len 4096"));
  // torchtitan 0.3's trainer refuses its default CUDA graph capture with EP through the default all-to-all token
  // dispatcher (its token counts reach the host: trainer.py _validate_cuda_graphs), so EP turns the graphs off.
  CHECK_THAT(cmd, Contains("--training.disable-cuda-graphs"));
  // At ep 1 neither flag is written (expert_parallel_degree 1 is torchtitan's default, and the graphs may run).
  const Plan ep1 = make_plan("sequence_parallel", {.tp_degree = 2, .dp_shard = 4, .loss_parallel = true});
  const std::string cmd1 = export_plan(ep1, ExportFormat::torchtitan, ctx);
  CHECK_THAT(cmd1, !Contains("expert-parallel"));
  CHECK_THAT(cmd1, !Contains("cuda-graphs"));
  // The llama3 presets are not qwen3's recipe, and Qwen3 30B-A3B is no llama3 recipe.
  CHECK(std::string(torchtitan_recipe(test::llama3_8b())->module) == "llama3");
}

TEST_CASE("expert parallel export: what the exports cannot express is one line", "[moe][export]") {
  const ExportContext ctx = qwen3_30b_a3b_ctx();
  Plan p = load_plan_string("tp_degree: 2\ndp_shard: 4\nep_degree: 4\n", "p.yaml");
  // torchtitan 0.3's command line maps one MoE recipe, qwen3_30b_a3b: a model with other dimensions is refused (here
  // Qwen3 30B-A3B with 64 experts), and so is float8 on a MoE (the grouped-experts converter is not written).
  ExportContext other = ctx;
  other.model->moe.experts = 64;
  CHECK(export_error(p, ExportFormat::torchtitan, other) ==
        "model 'Qwen/Qwen3-30B-A3B': a mixture of experts (64 routed experts) that is not torchtitan 0.3's qwen3 "
        "30B-A3B (dim 2048, 48 layers, 128 experts of 768, top 8), the one MoE recipe --format torchtitan maps; "
        "--format torchtitan-toml writes the job config (parallelism.expert_parallel_degree) and --format python the "
        "parallelize_module dict");
  const Plan f8 = load_plan_string("tp_degree: 2\ndp_shard: 4\nep_degree: 4\nfloat8: rowwise\n", "f.yaml");
  CHECK(export_error(f8, ExportFormat::torchtitan, ctx) ==
        "f.yaml: float8 rowwise on a mixture of experts: torchtitan 0.3 converts the routed experts with a "
        "grouped-experts float8 converter that --format torchtitan does not write; export the bf16 plan, or --format "
        "python");
  // A sparse mesh torchtitan refuses is refused by every format, naming the key's line (the one mesh check).
  const Plan bad = load_plan_string("tp_degree: 2\ndp_shard: 4\nep_degree: 16\n", "b.yaml");
  for (auto f : {ExportFormat::torchtitan_toml, ExportFormat::python, ExportFormat::torchtitan})
    CHECK(export_error(bad, f, ctx) ==
          "plan b.yaml:3: ep_degree 16 does not divide dp_shard 4 x cp 1 x tp 2 = 8: torchtitan's sparse mesh (pp, "
          "dp_replicate, efsdp, ep) needs efsdp = dp_shard x cp x tp / ep whole (distributed/parallel_dims.py)");
  // ep on a dense model.
  ExportContext dense = ctx;
  dense.model = test::llama3_8b();
  CHECK(export_error(p, ExportFormat::torchtitan_toml, dense) ==
        "plan p.yaml:3: ep_degree 4: the model has no routed experts (model.moe); expected 1");
  // Without a config the python export still writes it (no model: the mesh is the plan's).
  CHECK_THAT(export_plan(p, ExportFormat::python), Contains("= 8 / 4 = 2,"));
}

TEST_CASE("expert parallel: search.ep_degrees is a list of degrees, range-checked with file:line", "[moe][config]") {
  CHECK(load_config_string("model: {preset: tiny-llama}\n").search.ep_degrees == std::vector<int>{1});
  CHECK(load_config_string("model: {preset: tiny-llama}\nsearch:\n  ep_degrees: [1, 2, 8]\n", "c.yaml")
            .search.ep_degrees == std::vector<int>{1, 2, 8});
  auto error_of = [](const std::string& yaml) {
    try {
      load_config_string(yaml, "c.yaml");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  CHECK_THAT(error_of("model: {preset: tiny-llama}\nsearch:\n  ep_degrees: [1, 0]\n"),
             Contains("c.yaml:3: search.ep_degrees[1]: expected an integer in 1..1048576"));
  CHECK_THAT(error_of("model: {preset: tiny-llama}\nsearch:\n  ep_degrees: four\n"),
             Contains("c.yaml:3: search.ep_degrees"));
  CHECK_THAT(error_of("model: {preset: tiny-llama}\nsearch:\n  ep_degrees: [2, 2]\n"), Contains("search.ep_degrees"));
}

TEST_CASE("expert parallel export: Qwen3 30B-A3B with pipeline and expert parallelism writes both",
          "[moe][export][pp]") {
  // pp 2 x dp_shard 8 x tp 1 on 2 x 8 GPUs, ep 8 (efsdp 1), 1F1B with microbatches of 1: torchtitan 0.3 runs the
  // pipeline's keys and expert_parallel_degree side by side (ParallelismConfig; the MoE stages as any: its
  // pipeline_llm splits blocks by count), and the command line turns CUDA graphs off for either.
  ExportContext ctx = qwen3_30b_a3b_ctx();
  ctx.nodes = 2;
  PlanToggles t{.tp_degree = 1, .dp_shard = 8, .local_batch_size = 2, .ep_degree = 8};
  t.pp_degree = 2;
  t.pp_schedule = PipelineScheduleKind::one_f_one_b;
  const Plan p = make_plan("sequence_parallel", t);
  const std::string cmd = export_plan(p, ExportFormat::torchtitan, ctx);
  for (const char* want : {"--module qwen3 \\\n  --config qwen3_30b_a3b", "--parallelism.expert-parallel-degree 8",
                           "--parallelism.pipeline-parallel-degree 2", "--parallelism.pipeline-parallel-schedule 1F1B",
                           "--parallelism.pipeline-parallel-microbatch-size 1",
                           "--parallelism.data-parallel-shard-degree 8", "--training.disable-cuda-graphs"})
    CHECK_THAT(cmd, Contains(want));
  const auto kv = toml_keys(export_plan(p, ExportFormat::torchtitan_toml, ctx));
  CHECK(kv.at("parallelism.expert_parallel_degree") == "8");
  CHECK(kv.at("parallelism.pipeline_parallel_degree") == "2");
  CHECK(kv.at("parallelism.pipeline_parallel_schedule") == "\"1F1B\"");
}
