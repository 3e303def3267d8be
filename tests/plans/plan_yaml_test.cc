// Plan YAML: hand-written plans (torchtitan spellings included), the canonical form, round trips, and errors.
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "plans/language/config.h"
#include "plans/language/plan.h"
#include "plans/util/error.h"

using namespace tptune;
using Catch::Matchers::Contains;
using P = Placement;

namespace {

std::string error_of(const std::string& yaml) {
  try {
    load_plan_string(yaml, "plan.yaml");
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

const PlanEntry& entry(const Plan& p, const std::string& pattern) {
  for (const auto& e : p.modules)
    if (e.pattern == pattern) return e;
  FAIL("no entry " << pattern);
  throw;  // unreachable
}

const char* kHandWritten = R"(# a plan as a user writes it
tp_degree: 2
dp_shard: 4
float8: rowwise
async_tp: true
loss_parallel: false
activation_checkpointing: full
local_batch_size: 2
modules:
  tok_embeddings: {style: rowwise, input_layouts: Replicate(), output_layouts: Shard(1)}
  layers.*.attention_norm: sequence_parallel
  layers.*.attention: {style: prepare_module_input, input_layouts: [S(1), None], desired_input_layouts: [R, None]}
  layers.*.attention.wq: colwise
  layers.*.attention.wo:
    style: rowwise
    output_layouts: S(1)
  layers.*.feed_forward.w2: {style: rowwise, output_layouts: [S(1)], use_local_output: false}
  output: {style: colwise, input_layouts: S(1), output_layouts: S(-1), use_local_output: false}
  norm: no_parallel
)";

}  // namespace

TEST_CASE("a hand-written plan loads with torchtitan's spellings", "[plan_yaml]") {
  const Plan p = load_plan_string(kHandWritten, "mine.yaml");
  CHECK(p.source == "mine.yaml");
  CHECK(p.family == "custom");
  CHECK(p.tp_degree == 2);
  CHECK(p.dp_shard == 4);
  CHECK(p.float8 == Float8Recipe::rowwise);
  CHECK(p.async_tp);
  CHECK_FALSE(p.loss_parallel);
  CHECK(p.activation_checkpointing == ActivationCheckpointing::full);
  CHECK(p.local_batch_size == 2);
  REQUIRE(p.modules.size() == 8);
  CHECK(p.modules[0].pattern == "tok_embeddings");  // document order is kept
  CHECK(p.modules[7].pattern == "norm");

  const auto& emb = entry(p, "tok_embeddings");
  CHECK(emb.line == 10);
  CHECK(emb.style.kind == StyleKind::rowwise);
  CHECK(emb.style.input_layout == P::R());
  CHECK(emb.style.output_layout == P::S(1));
  CHECK(emb.style.use_local_output);
  CHECK(entry(p, "layers.*.attention_norm").style == ParallelStyle::sequence_parallel());
  CHECK(entry(p, "layers.*.attention").style == ParallelStyle::prepare_module_input(P::S(1), P::R()));
  CHECK(entry(p, "layers.*.attention.wq").style == ParallelStyle::colwise());
  const auto& wo = entry(p, "layers.*.attention.wo");
  CHECK(wo.line == 14);
  CHECK(wo.style.input_layout == P::S(-1));  // the default stays
  CHECK(wo.style.output_layout == P::S(1));
  const auto& w2 = entry(p, "layers.*.feed_forward.w2").style;
  CHECK(w2.output_layout == P::S(1));
  CHECK_FALSE(w2.use_local_output);
  CHECK(entry(p, "norm").style == ParallelStyle::no_parallel());
  CHECK(p.style_for("layers.3.attention.wq")->kind == StyleKind::colwise);
}

TEST_CASE("defaults: an empty plan and a plan without modules", "[plan_yaml]") {
  const Plan p = load_plan_string("tp_degree: 8\n");
  CHECK(p.tp_degree == 8);
  CHECK(p.dp_shard == 1);
  CHECK(p.float8 == Float8Recipe::none);
  CHECK(p.modules.empty());
  CHECK(load_plan_string("modules: {}\n").modules.empty());
  CHECK(load_plan_string("modules:\n").modules.empty());
}

TEST_CASE("the canonical form writes every layout the style takes", "[plan_yaml]") {
  Plan p;
  p.family = "sequence_parallel";
  p.tp_degree = 8;
  p.loss_parallel = true;
  p.modules = {{"tok_embeddings", ParallelStyle{StyleKind::rowwise, P::R(), P::S(-1), P::S(1), true}},
               {"layers.*.attention", ParallelStyle::prepare_module_input(P::S(1), P::R())},
               {"norm", ParallelStyle::sequence_parallel()},
               {"layers.0.ffn_norm", ParallelStyle::no_parallel()}};
  const std::string expected =
      R"(# tptune TP plan (canonical form, see plans/plan.h). Styles: colwise, rowwise, sequence_parallel,
# prepare_module_input, no_parallel. Layouts: R, S(d), P. `*` in a pattern matches one name; the last
# matching pattern wins.
family: sequence_parallel
tp_degree: 8
dp_shard: 1
float8: none
async_tp: false
loss_parallel: true
activation_checkpointing: none
local_batch_size: 1
modules:
  tok_embeddings: {style: rowwise, input_layouts: R, output_layouts: S(1), use_local_output: true}
  layers.*.attention: {style: prepare_module_input, input_layouts: S(1), desired_input_layouts: R, use_local_output: false}
  norm: {style: sequence_parallel, use_local_output: false}
  layers.0.ffn_norm: {style: no_parallel}
)";
  CHECK(plan_to_yaml(p) == expected);
  Plan empty;
  CHECK_THAT(plan_to_yaml(empty), Contains("family: custom\n") && Contains("modules: {}\n"));
}

TEST_CASE("load(save(p)) == p for every preset and toggle combination", "[plan_yaml][roundtrip]") {
  int checked = 0;
  for (const auto& name : plan_preset_names())
    for (bool lp : {false, true})
      for (auto f8 : {Float8Recipe::none, Float8Recipe::tensorwise, Float8Recipe::rowwise})
        for (auto ac : {ActivationCheckpointing::none, ActivationCheckpointing::full}) {
          Plan base;
          base.tp_degree = 4;
          base.dp_shard = 2;
          base.loss_parallel = lp;
          base.float8 = f8;
          base.async_tp = lp;
          base.activation_checkpointing = ac;
          base.local_batch_size = 3;
          const Plan p = preset_plan(name, base);
          const std::string text = plan_to_yaml(p);
          const Plan q = load_plan_string(text, "saved.yaml");
          INFO(text);
          CHECK(q == p);
          CHECK(q.family == p.family);
          CHECK(plan_to_yaml(q) == text);  // the canonical form is a fixed point
          ++checked;
        }
  CHECK(checked == 2 * 2 * 3 * 2);
}

TEST_CASE("a hand-written plan round-trips through a file", "[plan_yaml][roundtrip]") {
  const Plan p = load_plan_string(kHandWritten, "mine.yaml");
  const auto path = std::filesystem::temp_directory_path() /
                    ("tptune_plan_yaml_test_" +
                     std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + ".yaml");
  save_plan(p, path.string());
  const Plan q = load_plan(path.string());
  std::filesystem::remove(path);
  CHECK(q == p);
  CHECK(q.source == path.string());
  REQUIRE(q.modules.size() == p.modules.size());
  CHECK(q.modules[0].line == 13);  // canonical form: 3 comment lines, family, 7 toggles, `modules:`
}

TEST_CASE("patterns and families that need quotes survive the round trip", "[plan_yaml][roundtrip]") {
  Plan p;
  p.family = "my plan: v2";
  p.modules = {{"*", ParallelStyle::no_parallel()}, {"*.wq", ParallelStyle::colwise()}};
  const Plan q = load_plan_string(plan_to_yaml(p));
  CHECK(q == p);
  CHECK(q.family == "my plan: v2");
  p.family = "true";  // a YAML keyword must stay a string
  CHECK(load_plan_string(plan_to_yaml(p)).family == "true");
}

TEST_CASE("plan errors name file, line and key", "[plan_yaml][errors]") {
  SECTION("unknown style lists the valid ones") {
    CHECK_THAT(error_of("modules:\n  output: colwize\n"),
               Contains("plan.yaml:2: modules.output.style: expected one of colwise, rowwise, sequence_parallel, "
                        "prepare_module_input, no_parallel, got 'colwize'"));
    CHECK_THAT(error_of("modules:\n  output:\n    style: megatron\n"),
               Contains("plan.yaml:3: modules.output.style: expected one of colwise"));
    CHECK_THAT(error_of("modules:\n  output: {output_layouts: R}\n"),
               Contains("plan.yaml:2: modules.output.style: missing; expected one of colwise"));
  }
  SECTION("bad layouts") {
    CHECK_THAT(
        error_of("modules:\n  output: {style: colwise, output_layouts: Shard(x)}\n"),
        Contains("plan.yaml:2: modules.output.output_layouts: expected a placement R, S(d) or P, got 'Shard(x)'"));
    CHECK_THAT(error_of("modules:\n  a: {style: colwise, input_layouts: [None, S(1)]}\n"),
               Contains("plan.yaml:2: modules.a.input_layouts: expected a layout"));
    CHECK_THAT(error_of("modules:\n  a: {style: colwise, input_layouts: [S(1), R]}\n"),
               Contains("plan.yaml:2: modules.a.input_layouts: expected None for input 1"));
    CHECK_THAT(error_of("modules:\n  a: {style: colwise, input_layouts: []}\n"),
               Contains("plan.yaml:2: modules.a.input_layouts: expected a layout"));
  }
  SECTION("unknown keys") {
    CHECK_THAT(error_of("tp_degree: 2\ntp: 4\n"), Contains("plan.yaml:2: tp: unknown key; expected one of family, "
                                                           "tp_degree, dp_shard"));
    CHECK_THAT(error_of("modules:\n  a:\n    style: colwise\n    output_layout: R\n"),
               Contains("plan.yaml:4: modules.a.output_layout: unknown key; expected one of style, input_layouts"));
  }
  SECTION("layouts the style does not take") {
    CHECK_THAT(error_of("modules:\n  a:\n    style: prepare_module_input\n    input_layouts: S(1)\n"
                        "    desired_input_layouts: R\n    output_layouts: R\n"),
               Contains("plan.yaml:6: modules.a.output_layouts: prepare_module_input does not take output_layouts; "
                        "it takes input_layouts, desired_input_layouts, use_local_output"));
    CHECK_THAT(error_of("modules:\n  a: {style: colwise, desired_input_layouts: S(1)}\n"),
               Contains("plan.yaml:2: modules.a.desired_input_layouts: colwise does not take desired_input_layouts"));
    CHECK_THAT(error_of("modules:\n  norm: {style: sequence_parallel, input_layouts: S(0)}\n"),
               Contains("modules.norm.input_layouts: sequence_parallel does not take input_layouts"));
    CHECK_THAT(error_of("modules:\n  norm: {style: no_parallel, use_local_output: true}\n"),
               Contains("modules.norm.use_local_output: no_parallel takes no layouts or options"));
  }
  SECTION("prepare_module_input needs both layouts") {
    CHECK_THAT(error_of("modules:\n  a: prepare_module_input\n"),
               Contains("plan.yaml:2: modules.a: prepare_module_input needs input_layouts and desired_input_layouts"));
    CHECK_THAT(error_of("modules:\n  a: {style: prepare_module_input, input_layouts: S(1)}\n"),
               Contains("plan.yaml:2: modules.a.desired_input_layouts: missing"));
  }
  SECTION("toggles") {
    CHECK_THAT(error_of("tp_degree: 0\n"),
               Contains("plan.yaml:1: tp_degree: expected an integer in 1..1048576, got '0'"));
    CHECK_THAT(error_of("\ntp_degree: -2\n"),
               Contains("plan.yaml:2: tp_degree: expected an integer in 1..1048576, got '-2'"));
    CHECK_THAT(error_of("dp_shard: two\n"),
               Contains("plan.yaml:1: dp_shard: expected an integer in 1..1048576, got 'two'"));
    CHECK_THAT(error_of("float8: e4m3\n"), Contains("plan.yaml:1: float8: expected one of none, tensorwise, rowwise"));
    CHECK_THAT(error_of("async_tp: 2\n"), Contains("plan.yaml:1: async_tp: expected true or false, got '2'"));
    CHECK_THAT(error_of("activation_checkpointing: op\n"), Contains("plan.yaml:1: activation_checkpointing: expected"));
    CHECK_THAT(error_of("modules:\n  a: {style: colwise, use_local_output: maybe}\n"),
               Contains("plan.yaml:2: modules.a.use_local_output: expected true or false, got 'maybe'"));
  }
  SECTION("patterns") {
    CHECK_THAT(error_of("modules:\n  layers.1*.wq: colwise\n"),
               Contains("plan.yaml:2: modules: expected a module FQN pattern (dot-separated names; '*' stands for one "
                        "whole name), got 'layers.1*.wq'"));
    CHECK_THAT(error_of("modules:\n  layers..wq: colwise\n"), Contains("plan.yaml:2: modules: expected a module FQN"));
    CHECK_THAT(error_of("modules:\n  output: colwise\n  output: rowwise\n"),
               Contains("plan.yaml:3: modules.output: duplicate"));
    CHECK_THAT(error_of("modules: [output]\n"), Contains("plan.yaml:1: modules: expected a map, got a list"));
    // An empty entry points at its own line, not at the next token.
    CHECK_THAT(error_of("modules:\n  a:\n  b: colwise\n"),
               Contains("plan.yaml:2: modules.a: expected a style name or a map {style: ..., <layouts>}, got nothing"));
  }
  SECTION("not a plan") {
    CHECK_THAT(error_of("colwise\n"), Contains("plan.yaml:1: expected a plan"));
    CHECK_THAT(error_of("modules: {a: colwise\n"), Contains("plan.yaml:2: invalid YAML"));
  }
}

TEST_CASE("a missing plan file", "[plan_yaml][errors]") {
  CHECK_THROWS_WITH(load_plan("no/such/plan.yaml"), "no/such/plan.yaml: no such file (expected a plan YAML file)");
  CHECK_THROWS_WITH(save_plan(Plan{}, "/no/such/dir/plan.yaml"),
                    "/no/such/dir/plan.yaml: cannot write: No such file or directory");
}

TEST_CASE("torchtitan's spmd_backend: spmd_types is what tptune models, the others are refused by name",
          "[plan_yaml]") {
  CHECK(error_of("tp_degree: 2\nspmd_backend: spmd_types\n") == "<no error>");
  CHECK(error_of("tp_degree: 2\nspmd_backend: partial_dtensor\n") ==
        "plan.yaml:2: spmd_backend: 'partial_dtensor' is not modelled: tptune models torchtitan 0.3's spmd_types "
        "backend (partial_dtensor and full_dtensor issue other collectives); remove the key or set spmd_types");
  CHECK_THAT(error_of("spmd_backend: full_dtensor\n"),
             Catch::StartsWith("plan.yaml:1: spmd_backend: 'full_dtensor' is not modelled"));
  CHECK_THAT(error_of("spmd_backend: dtensor\n"), Catch::StartsWith("plan.yaml:1: spmd_backend: expected one of"));
  // In a config: training.spmd_backend.
  auto config_error = [](const std::string& training) {
    try {
      load_config_string("model:\n  preset: tiny-llama\ntraining:\n  seq_len: 32\n" + training, "cfg.yaml");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  CHECK(config_error("  spmd_backend: spmd_types\n") == "<no error>");
  CHECK_THAT(config_error("  spmd_backend: partial_dtensor\n"),
             Catch::StartsWith("cfg.yaml:5: training.spmd_backend: 'partial_dtensor' is not modelled: tptune models "
                               "torchtitan 0.3's spmd_types backend"));
}
