// Export of plans as torchtitan TOML and as a python parallelize_module plan: exact lines for torchtitan's default
// plan, round trips (TOML keys back to the plan's toggles; python plan dict back to the plan's module styles) over
// every toggle combination of both presets, and the float8 class choice.
#include "plans/export/export.h"

#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <map>
#include <regex>
#include <sstream>

#include "plans/language/plan.h"
#include "plans/util/error.h"
#include "tests/fixtures.h"

using namespace tptune;
using Catch::Matchers::Contains;
using tptune::test::make_plan;

namespace {

// A minimal TOML reader for what export_torchtitan_toml writes: "[a.b]" sections and "key = value" lines, comments
// after '#'. Returns "section.key" -> raw value text. Fails the test on a repeated key or a line it cannot read.
std::map<std::string, std::string> read_toml(const std::string& text) {
  std::map<std::string, std::string> kv;
  std::istringstream in(text);
  std::string line, section;
  while (std::getline(in, line)) {
    bool quoted = false;  // cut the comment: the first '#' outside a string
    for (size_t i = 0; i < line.size(); ++i) {
      if (line[i] == '"') quoted = !quoted;
      if (line[i] == '#' && !quoted) {
        line.resize(i);
        break;
      }
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    if (line.empty()) continue;
    if (line.front() == '[') {
      REQUIRE(line.back() == ']');
      section = line.substr(1, line.size() - 2);
      continue;
    }
    auto eq = line.find(" = ");
    INFO(line);
    REQUIRE(eq != std::string::npos);
    REQUIRE(!section.empty());
    std::string key = section + "." + line.substr(0, eq);
    REQUIRE(kv.count(key) == 0);
    kv[key] = line.substr(eq + 3);
  }
  return kv;
}

// Splits "a=X(1), b=(Y(), None)" at top-level commas.
std::vector<std::string> split_args(const std::string& s) {
  std::vector<std::string> out;
  int depth = 0;
  std::string cur;
  for (char c : s) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
      continue;
    }
    if (!(c == ' ' && cur.empty())) cur += c;
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// The first placement of a layout argument: "Shard(1)" or "(Shard(1), None)" or "(Shard(1),)".
Placement layout(std::string v) {
  if (v.front() == '(') {
    v = v.substr(1);
    v = v.substr(0, split_args(v.substr(0, v.size() - 1)).at(0).size());
  }
  return parse_placement(v, "test");
}

// Reads the plan dict back from export_python's output: one `"pattern": Class(args),` line per entry.
std::vector<PlanEntry> read_python_plan(const std::string& text) {
  static const std::regex entry(R"re(^        "([^"]+)": (\w+)\((.*)\),$)re");
  std::vector<PlanEntry> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_match(line, m, entry)) continue;
    PlanEntry e;
    e.pattern = m[1];
    const std::string klass = m[2];
    if (klass == "ColwiseParallel" || klass == "Float8ColwiseParallel")
      e.style = ParallelStyle::colwise();
    else if (klass == "RowwiseParallel" || klass == "Float8RowwiseParallel")
      e.style = ParallelStyle::rowwise();
    else if (klass == "SequenceParallel")
      e.style = ParallelStyle::sequence_parallel();
    else if (klass == "PrepareModuleInput" || klass == "PrepareFloat8ModuleInput")
      e.style = ParallelStyle::prepare_module_input(Placement::R(), Placement::R());
    else
      FAIL("unknown class " << klass);
    for (const std::string& a : split_args(m[3])) {
      auto eq = a.find('=');
      REQUIRE(eq != std::string::npos);
      const std::string k = a.substr(0, eq), v = a.substr(eq + 1);
      if (k == "input_layouts")
        e.style.input_layout = layout(v);
      else if (k == "desired_input_layouts")
        e.style.desired_input_layout = layout(v);
      else if (k == "output_layouts")
        e.style.output_layout = layout(v);
      else if (k == "use_local_output")
        e.style.use_local_output = v == "True";
      else
        FAIL("unknown argument " << k);
    }
    out.push_back(e);
  }
  return out;
}

}  // namespace

TEST_CASE("torchtitan TOML of torchtitan's default plan with every toggle on", "[export]") {
  Plan p = make_plan("sequence_parallel", {.tp_degree = 8,
                                           .dp_shard = 16,
                                           .float8 = Float8Recipe::tensorwise,
                                           .async_tp = true,
                                           .loss_parallel = true,
                                           .activation_checkpointing = ActivationCheckpointing::selective,
                                           .local_batch_size = 2});
  const std::string toml = export_torchtitan_toml(p);
  auto kv = read_toml(toml);
  CHECK(kv.at("model.converters") == "[\"quantize.linear.float8\"]");
  CHECK(kv.at("training.local_batch_size") == "2");
  CHECK(kv.at("parallelism.tensor_parallel_degree") == "8");
  CHECK(kv.at("parallelism.data_parallel_shard_degree") == "16");
  CHECK(kv.at("parallelism.data_parallel_replicate_degree") == "1");
  CHECK(kv.at("parallelism.enable_async_tensor_parallel") == "true");
  CHECK(kv.at("parallelism.disable_loss_parallel") == "false");
  CHECK(kv.at("activation_checkpoint.mode") == "\"selective\"");
  CHECK(kv.at("activation_checkpoint.selective_ac_option") == "\"op\"");
  CHECK(kv.at("quantize.linear.float8.recipe_name") == "\"tensorwise\"");
  CHECK(kv.at("quantize.linear.float8.filter_fqns") == "[\"output\"]");
  CHECK(kv.at("quantize.linear.float8.enable_fsdp_float8_all_gather") == "true");
  CHECK(kv.at("compile.enable") == "true");
  CHECK(kv.at("compile.components") == "[\"model\", \"loss\"]");
  CHECK_THAT(toml, !Contains("NOTE"));  // the TOML alone reproduces torchtitan's own module plan
  CHECK(is_torchtitan_module_plan(p));
}

TEST_CASE("torchtitan TOML round trip: keys give back the toggles, for every combination", "[export]") {
  for (const char* fam : {"vanilla", "sequence_parallel"})
    for (int tp : {1, 2, 8})
      for (auto f8 : {Float8Recipe::none, Float8Recipe::tensorwise, Float8Recipe::rowwise})
        for (bool async : {false, true})
          for (bool lp : {false, true})
            for (auto ac :
                 {ActivationCheckpointing::none, ActivationCheckpointing::selective, ActivationCheckpointing::full}) {
              Plan p = make_plan(fam, {.tp_degree = tp,
                                       .dp_shard = 64 / tp,
                                       .float8 = f8,
                                       .async_tp = async,
                                       .loss_parallel = lp,
                                       .activation_checkpointing = ac,
                                       .local_batch_size = 4});
              INFO(fam << " tp " << tp << " f8 " << to_string(f8) << " async " << async << " lp " << lp);
              auto kv = read_toml(export_torchtitan_toml(p));
              CHECK(kv.at("parallelism.tensor_parallel_degree") == std::to_string(tp));
              CHECK(kv.at("parallelism.data_parallel_shard_degree") == std::to_string(64 / tp));
              CHECK(kv.at("parallelism.enable_async_tensor_parallel") == (async && tp > 1 ? "true" : "false"));
              CHECK(kv.at("parallelism.disable_loss_parallel") == (lp ? "false" : "true"));
              CHECK(kv.at("activation_checkpoint.mode") == fmt::format("\"{}\"", to_string(ac)));
              CHECK(kv.at("training.local_batch_size") == "4");
              // float8: the converter and the recipe, or neither
              CHECK(kv.count("model.converters") == (f8 != Float8Recipe::none));
              if (f8 != Float8Recipe::none)
                CHECK(kv.at("quantize.linear.float8.recipe_name") == fmt::format("\"{}\"", to_string(f8)));
              // compile exactly when async TP needs it
              CHECK(kv.count("compile.enable") == (async && tp > 1));
              CHECK(kv.count("float8.recipe_name") == 0);  // not the pre-2025 [float8] section
            }
}

TEST_CASE("torchtitan TOML notes a module plan that apply_tp does not produce", "[export]") {
  Plan v = make_plan("vanilla", {.tp_degree = 8, .dp_shard = 8});
  CHECK_FALSE(is_torchtitan_module_plan(v));
  CHECK_THAT(export_torchtitan_toml(v), Contains("NOTE: this plan's module styles are not torchtitan's apply_tp"));
  // At tp 1 nothing is parallelized, by torchtitan or by the plan: no note.
  CHECK(is_torchtitan_module_plan(make_plan("vanilla", {.tp_degree = 1, .dp_shard = 8})));
  // A sequence-parallel plan with one style changed is custom.
  Plan sp = make_plan("sequence_parallel", {.tp_degree = 8, .dp_shard = 8, .loss_parallel = true});
  sp.modules[0].style.output_layout = Placement::R();
  CHECK_FALSE(is_torchtitan_module_plan(sp));
}

TEST_CASE("python export of torchtitan's plan: the lines of apply_tp", "[export]") {
  Plan p = make_plan("sequence_parallel", {.tp_degree = 8, .dp_shard = 8, .loss_parallel = true});
  const std::string py = export_python(p);
  CHECK_THAT(py, Contains("\"tok_embeddings\": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),"));
  CHECK_THAT(py, Contains("\"norm\": SequenceParallel(),"));
  // loss parallel: vocab-sharded DTensor logits (output_layouts Shard(-1) is ColwiseParallel's default)
  CHECK_THAT(py, Contains("\"output\": ColwiseParallel(input_layouts=Shard(1), use_local_output=False),"));
  CHECK_THAT(py, Contains("\"layers.*.attention\": PrepareModuleInput(input_layouts=(Shard(1), None), "
                          "desired_input_layouts=(Replicate(), None)),"));
  CHECK_THAT(py, Contains("\"layers.*.feed_forward\": PrepareModuleInput(input_layouts=(Shard(1),), "
                          "desired_input_layouts=(Replicate(),)),"));
  CHECK_THAT(py, Contains("\"layers.*.attention.wq\": ColwiseParallel(),"));
  CHECK_THAT(py, Contains("\"layers.*.attention.wo\": RowwiseParallel(output_layouts=Shard(1)),"));
  CHECK_THAT(py, Contains("from torch.distributed.tensor import Replicate, Shard\n"));
  CHECK_THAT(py, Contains("    parallelize_module,\n"));
  CHECK_THAT(py, Contains("with torch.distributed.tensor.parallel.loss_parallel():"));
  CHECK_THAT(py, !Contains("torchao"));
  CHECK_THAT(py, !Contains("_micro_pipeline_tp"));
}

TEST_CASE("python export: float8 tensorwise swaps in torchao's styles for block modules only", "[export]") {
  Plan p = make_plan("sequence_parallel",
                     {.tp_degree = 4, .dp_shard = 2, .float8 = Float8Recipe::tensorwise, .async_tp = true});
  const std::string py = export_python(p);
  CHECK_THAT(py, Contains("\"layers.*.attention.wq\": Float8ColwiseParallel(),"));
  CHECK_THAT(py, Contains("\"layers.*.feed_forward.w2\": Float8RowwiseParallel(output_layouts=Shard(1)),"));
  CHECK_THAT(py, Contains("\"layers.*.feed_forward\": PrepareFloat8ModuleInput("));
  CHECK_THAT(py, Contains("\"tok_embeddings\": RowwiseParallel("));  // an Embedding: no float8
  CHECK_THAT(py, Contains("\"output\": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),"));
  CHECK_THAT(py, Contains("from torchao.float8.float8_tensor_parallel import ("));
  CHECK_THAT(py, Contains("torch._inductor.config._micro_pipeline_tp = True"));
  // rowwise float8 keeps bf16 collectives and torch's own styles
  const std::string row =
      export_python(make_plan("sequence_parallel", {.tp_degree = 4, .dp_shard = 2, .float8 = Float8Recipe::rowwise}));
  CHECK_THAT(row, !Contains("Float8"));
}

TEST_CASE("python export round trip: the plan dict gives back the plan's module styles", "[export]") {
  for (const char* fam : {"vanilla", "sequence_parallel"})
    for (bool lp : {false, true})
      for (auto f8 : {Float8Recipe::none, Float8Recipe::tensorwise}) {
        Plan p = make_plan(fam, {.tp_degree = 8, .dp_shard = 8, .float8 = f8, .loss_parallel = lp});
        INFO(fam << " lp " << lp << " f8 " << to_string(f8));
        CHECK(read_python_plan(export_python(p)) == p.modules);
      }
  // A hand-written plan with non-default layouts and a Partial output survives too.
  Plan custom = load_plan_string(R"(
tp_degree: 2
modules:
  tok_embeddings: {style: colwise, input_layouts: R, output_layouts: S(-1), use_local_output: false}
  layers.*.attention: {style: prepare_module_input, input_layouts: S(-1), desired_input_layouts: R, use_local_output: true}
  layers.*.attention.wo: {style: rowwise, input_layouts: S(-1), output_layouts: P}
  norm: {style: sequence_parallel, use_local_output: true}
)");
  CHECK(read_python_plan(export_python(custom)) == custom.modules);
  CHECK_THAT(export_python(custom), Contains("from torch.distributed.tensor import Partial, Replicate, Shard\n"));
}

TEST_CASE("python export: no_parallel entries are comments, not styles", "[export]") {
  Plan p = load_plan_string("tp_degree: 2\nmodules:\n  output: {style: no_parallel}\n");
  const std::string py = export_python(p);
  CHECK_THAT(py, Contains("# \"output\": not parallelized"));
  CHECK(read_python_plan(py).empty());
}

TEST_CASE("export format names", "[export]") {
  CHECK(parse_export_format("torchtitan", "--format") == ExportFormat::torchtitan);
  CHECK(parse_export_format("torchtitan-toml", "--format") == ExportFormat::torchtitan_toml);
  CHECK(parse_export_format("python", "--format") == ExportFormat::python);
  try {
    parse_export_format("yaml", "--format");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == "--format: expected torchtitan, torchtitan-toml or python, got 'yaml'");
  }
}

TEST_CASE("torchtitan 0.3 export: torchtitan.train overrides and a config function for float8", "[export]") {
  Plan base;
  base.framework = Framework::torchtitan_0_3;
  base.tp_degree = 4;
  base.dp_shard = 2;
  base.local_batch_size = 2;
  base.activation_checkpointing = ActivationCheckpointing::full;
  base.async_tp = true;
  base.loss_chunks = 4;
  ExportContext ctx;
  ctx.model = Model{};
  REQUIRE(model_preset("llama3-70b", *ctx.model));
  ctx.seq_len = 4096;
  ctx.nodes = 1;
  ctx.gpus_per_node = 8;
  const std::string sh = export_torchtitan_cli(preset_plan("sequence_parallel", base), ctx);
  for (const char* want :
       {"--module llama3", "--config llama3_70b", "--parallelism.tensor-parallel-degree 4",
        "--parallelism.enable-sequence-parallel", "--parallelism.data-parallel-shard-degree 2",
        "--training.local-batch-size 2", "--training.seq-len 4096", "--loss.num-chunks 4", "--compile.enable",
        "--compile.enable-async-tensor-parallel", "activation-checkpoint:full", "--nproc-per-node 8"})
    CHECK_THAT(sh, Contains(want));
  CHECK_THAT(sh, !Contains("Float8LinearConverter"));
  // Without sequence parallel, and with float8 rowwise: the converter needs Python; lm_head stays bf16.
  base.async_tp = false;
  base.float8 = Float8Recipe::rowwise;
  const std::string f8 = export_torchtitan_cli(preset_plan("vanilla", base), ctx);
  CHECK_THAT(f8, Contains("--parallelism.no-enable-sequence-parallel"));
  CHECK_THAT(f8, Contains("--module tptune_torchtitan_config"));
  CHECK_THAT(f8, Contains("--config tptune_llama3_70b"));
  CHECK_THAT(f8, Contains("recipe_name=\"rowwise\""));
  CHECK_THAT(f8, Contains("filter_fqns=[\"lm_head\"]"));
  CHECK_THAT(f8, Contains("--compile.no-enable"));
  // Tensorwise float8 does not exist in torchtitan 0.3.
  base.float8 = Float8Recipe::tensorwise;
  CHECK_THROWS_WITH(export_torchtitan_cli(preset_plan("vanilla", base), ctx),
                    Contains("has the recipes rowwise and rowwise_with_gw_hp only"));
}

namespace {

// The context of a config with `model` on nodes x gpus.
ExportContext context_of(const char* model, int nodes, int gpus) {
  ExportContext ctx;
  ctx.model = Model{};
  REQUIRE(model_preset(model, *ctx.model));
  ctx.nodes = nodes;
  ctx.gpus_per_node = gpus;
  return ctx;
}

std::string error_of(const Plan& p, const ExportContext& ctx) {
  try {
    export_torchtitan_cli(p, ctx);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("torchtitan 0.3 export: enable_sequence_parallel exactly as the plan's modules, or refused", "[export]") {
  const ExportContext ctx = context_of("llama3-8b", 1, 8);
  // Issue 21 item 1: a vanilla 0.3 winner (read back from its file) is enable_sp off, never the closest (on).
  const Plan vanilla = load_plan_string(
      plan_to_yaml(make_plan("vanilla", {.tp_degree = 4, .dp_shard = 2}, Framework::torchtitan_0_3)), "best.yaml");
  const std::string sh = export_torchtitan_cli(vanilla, ctx);
  CHECK_THAT(sh, Contains("--parallelism.no-enable-sequence-parallel"));
  CHECK_THAT(sh, !Contains("--parallelism.enable-sequence-parallel"));
  CHECK_THAT(sh, !Contains("NOTE"));  // no "neither of torchtitan's" for a 0.3-family winner
  CHECK_THAT(export_torchtitan_cli(
                 make_plan("sequence_parallel", {.tp_degree = 4, .dp_shard = 2}, Framework::torchtitan_0_3), ctx),
             Contains("--parallelism.enable-sequence-parallel") && !Contains("NOTE"));
  // Any other module plan: one line, the way to the exact plan.
  Plan custom = vanilla;
  custom.modules.pop_back();
  CHECK(error_of(custom, ctx) ==
        "best.yaml: the plan's module styles are neither of torchtitan's (enable_sequence_parallel on or off for "
        "framework torchtitan-0.3), so no torchtitan.train switch runs them; --format python prints the exact "
        "parallelize_module plan");
}

TEST_CASE("torchtitan 0.3 export: the config's model and world, or a one-line refusal", "[export]") {
  const Plan p =
      make_plan("sequence_parallel", {.tp_degree = 8, .dp_shard = 8}, Framework::torchtitan_0_3);  // 64 ranks
  // Issue 21 item 3: without the config there is no model (recipe) and no world (torchrun's shape).
  CHECK(error_of(p, {}) ==
        "preset:sequence_parallel: --format torchtitan needs --config CONFIG: the model (torchtitan's recipe is the "
        "one with its dimensions) and the cluster (torchrun's nodes x processes per node)");
  // 70B plan of 64 ranks on one node of 8: not --nproc-per-node 8 beside dp_shard 8.
  CHECK(error_of(p, context_of("llama3-70b", 1, 8)) ==
        "preset:sequence_parallel: the plan runs on tp 8 x dp_shard 8 x dp_replicate 1 = 64 GPUs, the config's cluster "
        "has 1 nodes x 8 = 8: torchrun would start another world than the plan's degrees");
  // The recipe is the model's: 70B dims -> llama3_70b (not llama3_8b); one layer fewer -> refused.
  CHECK_THAT(export_torchtitan_cli(p, context_of("llama3-70b", 8, 8)), Contains("--config llama3_70b"));
  ExportContext other = context_of("llama3-70b", 8, 8);
  other.model->n_layers = 79;
  other.model->name = "llama3-70b (modified)";
  CHECK(error_of(p, other) ==
        "model 'llama3-70b (modified)' (dim 8192, 79 layers, 64 heads, 8 kv heads, ffn_dim 28672, vocab 128256): not "
        "the dimensions of torchtitan 0.3's llama3 8B, 70B or 405B recipe, so --format torchtitan cannot name a recipe "
        "that trains it; --format python prints the plan's parallelize_module dict");
  // The name does not pick the recipe: the 8B's dimensions under another name are llama3_8b.
  ExportContext renamed = context_of("llama3-8b", 8, 8);
  renamed.model->name = "meta-llama/Meta-Llama-3-8B";
  CHECK_THAT(export_torchtitan_cli(p, renamed), Contains("--config llama3_8b"));
}

TEST_CASE("torchtitan 0.3 export: torchrun's world and, on several nodes, a c10d rendezvous", "[export]") {
  // One node: 8 ranks, no rendezvous arguments. Eight nodes: torchtitan's multinode_trainer.slurm arguments.
  const std::string one =
      export_torchtitan_cli(make_plan("sequence_parallel", {.tp_degree = 8, .dp_shard = 1}, Framework::torchtitan_0_3),
                            context_of("llama3-8b", 1, 8));
  CHECK_THAT(one, Contains("torchrun --nnodes 1 --nproc-per-node 8 -m torchtitan.train") && !Contains("rdzv"));
  const std::string many =
      export_torchtitan_cli(make_plan("sequence_parallel", {.tp_degree = 8, .dp_shard = 8}, Framework::torchtitan_0_3),
                            context_of("llama3-70b", 8, 8));
  CHECK_THAT(many,
             Contains("torchrun --nnodes 8 --nproc-per-node 8 \\\n  --rdzv-backend c10d --rdzv-endpoint "
                      "\"${MASTER_ADDR:?set MASTER_ADDR to the address of the first node}:${MASTER_PORT:-29500}\" "
                      "--rdzv-id \"${TPTUNE_RDZV_ID:-tptune}\" \\\n  -m torchtitan.train"));
}

TEST_CASE("user text in generated code: comments cannot end their line, strings cannot end their literal", "[export]") {
  CHECK(comment_text("a\nrm -rf /\r\x01\\é") == "a\\x0arm -rf /\\x0d\\x01\\x5c\\xc3\\xa9");
  CHECK(python_string("x\"\n\\y") == "\"x\\x22\\x0a\\x5cy\"");
  Plan p = make_plan("vanilla", {.tp_degree = 8, .dp_shard = 1}, Framework::torchtitan_0_3);
  p.family = "v\nrm -rf /\n#";
  p.source = "a\nrm -rf /.yaml";
  for (const std::string& out :
       {export_torchtitan_cli(p, context_of("llama3-8b", 1, 8)), export_python(p), export_torchtitan_toml(p)}) {
    std::istringstream lines(out);
    for (std::string line; std::getline(lines, line);)
      if (line.find("rm -rf") != std::string::npos) CHECK(line.rfind('#', 0) == 0);  // only on a comment line
  }
}
