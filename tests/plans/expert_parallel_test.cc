// Expert parallelism: the plan key ep_degree, torchtitan 0.3.0's sparse mesh (plans/language/expert_parallel.h) and
// the one-line errors of each bad mesh.
#include "plans/language/expert_parallel.h"

#include <catch2/catch.hpp>
#include <string>

#include "plans/export/export.h"
#include "plans/language/plan.h"
#include "plans/util/error.h"
#include "tests/fixtures.h"

using namespace tptune;

namespace {

// tiny-llama's dims with a MoE block: 8 routed experts of ffn 32, top 2, a shared expert of ffn 64.
Model tiny_moe() {
  Model m = test::tiny_llama_model();
  m.name = "tiny-moe";
  m.moe.experts = 8;
  m.moe.top_k = 2;
  m.moe.expert_ffn_dim = 32;
  m.moe.shared_ffn_dim = 64;
  return m;
}

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

TEST_CASE("expert parallel: the exports refuse ep_degree until they write it", "[moe][export]") {
  const Plan p = load_plan_string("tp_degree: 2\ndp_shard: 4\nep_degree: 4\n", "p.yaml");
  CHECK_THROWS_WITH(export_plan(p, ExportFormat::python),
                    "plan p.yaml:3: ep_degree 4: the exports do not write expert parallelism yet");
}
