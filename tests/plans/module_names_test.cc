// Module names per framework (plans/language/module_names.h): torchtitan 0.3's model has attention.wqkv and lm_head
// where the seed's DTensor model has attention.wq/wk/wv and output; a user plan naming the other family's modules is
// refused with the reason.
#include "plans/language/module_names.h"

#include <catch2/catch.hpp>

#include "plans/util/error.h"

using namespace tptune;

namespace {

Plan of(Framework f) {
  Plan p;
  apply_framework(p, f);
  return p;
}

std::string error_of(const std::string& yaml, const Model& m) {
  try {
    check_plan_modules(load_plan_string(yaml, "p.yaml"), m);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("module names follow the plan's framework", "[plans]") {
  Model m;
  REQUIRE(model_preset("tiny-llama", m));
  const Plan tt = of(Framework::torchtitan_0_3), dt = of(Framework::dtensor);
  CHECK(matches_some_module("layers.*.attention.wqkv", m, tt));
  CHECK(matches_some_module("lm_head", m, tt));
  CHECK_FALSE(matches_some_module("layers.*.attention.wq", m, tt));
  CHECK_FALSE(matches_some_module("output", m, tt));
  CHECK_FALSE(matches_some_module("layers.*.attention.wqkv", m, dt));
  CHECK(matches_some_module("layers.1.attention.wk", m, dt));
  // Without a plan: the seed's names, as before.
  CHECK(module_patterns(m) == module_patterns(m, dt));
  // The --out-plan filter keeps a 0.3 preset whole (it dropped wqkv and lm_head), and drops w3 of a gelu MLP.
  const Plan sp = preset_plan("sequence_parallel", tt);
  CHECK(without_unmatched_modules(sp, m).modules == sp.modules);
  Model gpt;
  REQUIRE(model_preset("tiny-gpt", gpt));
  CHECK(without_unmatched_modules(sp, gpt).modules.size() == sp.modules.size() - 1);
}

TEST_CASE("a user plan naming the other family's modules is refused with the reason", "[plans]") {
  Model m;
  REQUIRE(model_preset("tiny-llama", m));
  CHECK(error_of("framework: torchtitan-0.3\nmodules:\n  layers.*.attention.wq: colwise\n", m) ==
        "p.yaml:3: modules.layers.*.attention.wq: matches no module of the model; the plan is framework: "
        "torchtitan-0.3, whose model has one fused attention.wqkv and lm_head (not wq, wk, wv and output)");
  CHECK(error_of("modules:\n  lm_head: colwise\n", m) ==
        "p.yaml:2: modules.lm_head: matches no module of the model; attention.wqkv and lm_head are torchtitan 0.3's "
        "names; state framework: torchtitan-0.3, or name the DTensor model's attention.wq, wk, wv and output");
  CHECK(error_of("framework: torchtitan-0.3\nmodules:\n  layers.*.attention.wqkv: colwise\n  lm_head: colwise\n", m) ==
        "(no error)");
}
