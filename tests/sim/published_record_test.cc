// The public record's reader (sim/calibrate/published_record.h): the real folder read whole, every check's one-line
// error on a hand-written bad file, and a run's plan resolved as tp-plan simulate resolves it.
#include "sim/calibrate/published_record.h"

#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "plans/util/error.h"
#include "sim/calibrate/published_predict.h"
#include "tests/error_text.h"

using namespace tptune;
using tptune::test::error_of;

namespace {

// A valid file with two expressible runs, one not expressible, one ratio; `extra_run` is appended to the runs and
// `extra_top` to the document.
std::string record(const std::string& extra_run = "", const std::string& extra_top = "") {
  return std::string(R"yaml(source:
  id: test-source
  citation: "a test"
  repository: pytorch/torchtitan
  path: benchmarks/x.md
  commit: b5bcd76c66d0acb1a08b176d9639425bc55e0b2a
runs:
  - id: a
    table: "T1"
    quote: "| a | 100 |"
    config:
      model: {preset: llama3-8b}
      training: {seq_len: 8192, local_batch_size: 2, activation_checkpointing: selective, compile: false}
      cluster: {gpu: h100-sxm, nodes: 2, gpus_per_node: 8}
    plan: {tp: 1, float8: none, async_tp: false}
    measured: {tokens_per_second_per_gpu: 5762, peak_memory_gib: 82.4}
  - id: b
    table: "T1"
    quote: "| b | 200 |"
    config:
      model: {preset: llama3-8b}
      training: {seq_len: 8192, local_batch_size: 2, activation_checkpointing: full, compile: true}
      cluster: {gpu: h100-sxm, nodes: 2, gpus_per_node: 8}
    plan: {tp: 8, float8: tensorwise, async_tp: true, ac_layers: 16}
    measured: {tokens_per_second_per_gpu: 800, mfu: 0.4}
  - {id: c, table: "T2", quote: "| c |", not_expressible: "context parallelism (CP 2)"}
)yaml") + extra_run +
         "ratios:\n  - {name: \"b/a\", numerator: b, denominator: a}\n" + extra_top;
}

PublishedSource parse(const std::string& text) { return parse_published_source(text, "bad.yaml"); }

}  // namespace

TEST_CASE("published record: a valid file reads every field") {
  const PublishedSource s = parse(record());
  CHECK(s.id == "test-source");
  CHECK(s.commit == "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a");
  REQUIRE(s.runs.size() == 3);
  const PublishedRun& a = s.runs[0];
  CHECK(a.at == "bad.yaml:8");
  CHECK(a.config.cluster.world_size() == 16);
  CHECK(a.config.training.local_batch_size == 2);
  CHECK(a.config.training.compile == false);
  CHECK(a.plan.tp == 1);
  CHECK(a.measured.tokens_per_second_per_gpu == 5762);
  CHECK(*a.measured.peak_memory_gib == 82.4);
  CHECK(!a.measured.mfu);
  const PublishedRun& b = s.runs[1];
  CHECK(b.plan.float8 == Float8Recipe::tensorwise);
  CHECK(b.plan.async_tp);
  CHECK(b.plan.ac_layers == 16);
  CHECK(*b.measured.mfu == 0.4);
  CHECK(b.plan.summary() == "tp 8 tensorwise async ac_layers 16");
  CHECK(!s.runs[2].expressible());
  CHECK(s.runs[2].not_expressible == "context parallelism (CP 2)");
  REQUIRE(s.ratios.size() == 1);
  CHECK(s.ratios[0].numerator == "b");
}

TEST_CASE("published record: a run's plan is tp-plan simulate's --preset sequence_parallel --tp --float8 ...") {
  const PublishedSource s = parse(record());
  // a: 16 GPUs, tp 1 -> dp_shard 16 = world / tp; sequence_parallel's loss parallel on (torchtitan's default).
  const Plan a = published_run_plan(s.runs[0]);
  CHECK(a.tp_degree == 1);
  CHECK(a.dp_shard == 16);
  CHECK(a.loss_parallel);
  CHECK(a.local_batch_size == 2);
  CHECK(a.activation_checkpointing == ActivationCheckpointing::selective);
  CHECK(a.gradient_accumulation_steps == 1);
  // b: tp 8 -> dp_shard 2; the toggles of its plan.
  const Plan b = published_run_plan(s.runs[1]);
  CHECK(b.tp_degree == 8);
  CHECK(b.dp_shard == 2);
  CHECK(b.float8 == Float8Recipe::tensorwise);
  CHECK(b.async_tp);
  CHECK(b.ac_layers == 16);
  CHECK(b.activation_checkpointing == ActivationCheckpointing::full);
  // A global batch of 64 sequences over dp_shard 16 x local batch 2 = 32 per microbatch: 2 microbatches.
  std::string text = record();
  text.replace(text.find("local_batch_size: 2, activation_checkpointing: selective"), 19,
               "local_batch_size: 2, global_batch_size: 64");
  CHECK(published_run_plan(parse(text).runs[0]).gradient_accumulation_steps == 2);
  // tp 3 does not divide 16 GPUs.
  text = record();
  text.replace(text.find("plan: {tp: 1"), 12, "plan: {tp: 3");
  CHECK(error_of([&] { published_run_plan(parse(text).runs[0]); }) ==
        "bad.yaml:8: plan.tp 3: does not divide the cluster's 16 GPUs (2 nodes x 8)");
}

TEST_CASE("published record: every check is one line naming the file, line and key") {
  CHECK(error_of([] { parse(record("", "colour: red\n")); }) ==
        "bad.yaml:29: colour: unknown key; expected one of source, runs, ratios");
  CHECK(error_of([] { parse("runs: []\n"); }) ==
        "bad.yaml:1: source: missing; expected the citation map (id, citation, ...)");
  // A config key is checked by the config reader, its key prefixed with the run's.
  std::string text = record();
  text.replace(text.find("seq_len: 8192"), 13, "seq_len: abc");
  CHECK(error_of([&] { parse(text); }) ==
        "bad.yaml:13: runs[0].config.training.seq_len: expected an integer in 1..16777216, got 'abc'");
  text = record();
  text.replace(text.find("model: {preset: llama3-8b}"), 26, "model: {preset: llama3-8b, colour: red}");
  CHECK(error_of([&] { parse(text); }).starts_with("bad.yaml:12: runs[0].config.model.colour: unknown key;"));
  // config + not_expressible, a missing measured, measured tokens/s 0, an unknown plan key.
  CHECK(error_of([] { parse(record("  - {id: d, table: t, quote: q, not_expressible: PP, plan: {tp: 1}}\n")); }) ==
        "bad.yaml:27: runs[3].plan: a run has either config + plan + measured or not_expressible, not both");
  text = record();
  text.replace(text.find("    measured: {tokens_per_second_per_gpu: 800, mfu: 0.4}\n"), 57, "");
  CHECK(error_of([&] { parse(text); }) ==
        "bad.yaml:17: runs[1].measured: missing; a run has config + plan + measured, or not_expressible with the "
        "reason");
  text = record();
  text.replace(text.find("tokens_per_second_per_gpu: 5762"), 31, "tokens_per_second_per_gpu: 0");
  CHECK(error_of([&] { parse(text); }) ==
        "bad.yaml:16: runs[0].measured.tokens_per_second_per_gpu: expected a number in (0, 1000000000000], got '0'");
  text = record();
  text.replace(text.find("async_tp: false}"), 16, "async_tp: false, etp: 2}");
  CHECK(error_of([&] { parse(text); }) ==
        "bad.yaml:15: runs[0].plan.etp: unknown key; expected one of preset, tp, float8, async_tp, ac_layers, cp, pp, "
        "pp_schedule, pp_microbatch_size, ep");
  // The expert-parallel degree, range-checked as tp is.
  text = record();
  text.replace(text.find("async_tp: false}"), 16, "async_tp: false, ep: 0}");
  CHECK(error_of([&] { parse(text); }) == "bad.yaml:15: runs[0].plan.ep: expected an integer in 1..1048576, got '0'");
  // Run ids unique in a file.
  CHECK(error_of([] { parse(record("  - {id: a, table: t, quote: q, not_expressible: PP}\n")); }) ==
        "bad.yaml:27: runs[3].id: 'a' is also runs[0]'s id; run ids are unique in a file");
  // A ratio names expressible runs of the same file.
  text = record();
  text.replace(text.find("numerator: b"), 12, "numerator: z");
  CHECK(error_of([&] { parse(text); }) == "bad.yaml:28: ratios[0].numerator: 'z' is no run of this file");
  text = record();
  text.replace(text.find("denominator: a"), 14, "denominator: c");
  CHECK(error_of([&] { parse(text); }) ==
        "bad.yaml:28: ratios[0].denominator: 'c' is not expressible (context parallelism (CP 2)): a ratio compares "
        "predicted runs");
  // A citation: a repository names its commit.
  text = record();
  text.replace(text.find("commit: b5bcd76c"), 16, "commit: main");
  CHECK(
      error_of([&] { parse(text); }).starts_with("bad.yaml:6: source.commit: expected a commit hash of 40 hex digits"));
}

TEST_CASE("published record: source ids are unique over the folder, which holds *.yaml") {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "tptune_published_record_test";
  std::filesystem::remove_all(dir);
  CHECK(error_of([&] { load_published_record(dir.string()); }) ==
        fmt::format("{}: no such folder (expected the public record's folder of *.yaml files)", dir.string()));
  std::filesystem::create_directories(dir);
  CHECK(error_of([&] { load_published_record(dir.string()); }) ==
        fmt::format("{}: no *.yaml files (expected the public record, one file per source)", dir.string()));
  for (const char* name : {"a.yaml", "b.yaml"}) std::ofstream(dir / name) << record();
  CHECK(error_of([&] { load_published_record(dir.string()); }) ==
        fmt::format("{}:2: source.id: 'test-source' is also the id of {}; source ids are unique over the folder",
                    (dir / "b.yaml").string(), (dir / "a.yaml").string()));
  std::filesystem::remove_all(dir);
}

TEST_CASE("published record: the real folder reads whole") {
  const auto sources = load_published_record(std::string(TPTUNE_SOURCE_DIR) + "/profiles/published");
  REQUIRE(sources.size() == 3);
  // Sorted by file name.
  CHECK(sources[0].id == "torchtitan-asynctp-h100-202506");
  CHECK(sources[1].id == "torchtitan-h100-202412");
  CHECK(sources[2].id == "torchtitan-performance-md");
  int expressible = 0, not_expressible = 0, ratios = 0;
  for (const auto& s : sources) {
    for (const auto& r : s.runs) {
      (r.expressible() ? expressible : not_expressible) += 1;
      // The H100 runs name the 500 W HBM2e part (or h100-sxm in a copy made before that preset existed).
      if (r.expressible() && r.config.cluster.gpu != "a100-sxm-80gb")
        CHECK((r.config.cluster.gpu == "h100-sxm-hbm2e-500w" || r.config.cluster.gpu == "h100-sxm"));
    }
    ratios += static_cast<int>(s.ratios.size());
  }
  // Every run, tables 5 and 6 (pipeline parallelism, with context parallelism in Table 6) among them.
  CHECK(expressible == 36);
  CHECK(not_expressible == 0);
  CHECK(ratios == 18);
  // A context-parallel run of Table 2, as quoted: "| FSDP 4, CP 2 | 65536 | 2,540 | 84.2 |".
  const PublishedRun* t2 = sources[1].run("t2-fsdp4-cp2");
  REQUIRE(t2 != nullptr);
  CHECK(t2->plan.cp == 2);
  CHECK(t2->config.training.seq_len == 65536);
  CHECK(t2->measured.tokens_per_second_per_gpu == 2540);
  CHECK(t2->plan.summary() == "tp 1 tensorwise cp 2");
  // A pipeline run of Table 5, as quoted: "| Interleaved 1F1B | 128 | 72.7 |": 405B, PP 8 x TP 8 x FSDP 8, local
  // batch 32 in torchtitan 9dec370's default 8 microbatches (of 4).
  const PublishedRun* t5 = sources[1].run("t5-interleaved");
  REQUIRE(t5 != nullptr);
  CHECK(t5->plan.pp == 8);
  CHECK(t5->plan.pp_schedule == PipelineScheduleKind::interleaved_1f1b);
  CHECK(t5->plan.summary() == "tp 8 tensorwise async pp 8 Interleaved1F1B mb 4");
  CHECK(published_run_plan(*t5).dp_shard == 8);
  // Table 6's CP 4 row composes CP with PP: dp_shard 512 / (8 x 8 x 4) = 2.
  const PublishedRun* t6 = sources[1].run("t6-cp4");
  REQUIRE(t6 != nullptr);
  CHECK(published_run_plan(*t6).dp_shard == 2);
  CHECK(t6->config.training.seq_len == 131072);
  // One run's transcription, as quoted: "| FSDP | 5,762 | 82.4 |".
  const PublishedRun* t1 = sources[1].run("t1-fsdp");
  REQUIRE(t1 != nullptr);
  CHECK(t1->measured.tokens_per_second_per_gpu == 5762);
  CHECK(*t1->measured.peak_memory_gib == 82.4);
  CHECK(t1->config.training.seq_len == 8192);
  CHECK(t1->config.model.n_layers == 32);
  CHECK(published_run_plan(*t1).dp_shard == 8);
}

TEST_CASE("published record: a run's ep is tp-plan simulate's --ep, checked when the run is predicted") {
  // A Qwen3-MoE model (examples/hf/qwen3-30b-a3b: 128 experts) on 16 GPUs, tp 1, ep 8: dp_shard 16, efsdp 16 / 8 = 2.
  std::string text = record();
  text.replace(text.find("model: {preset: llama3-8b}"), 26,
               "model: {hf_config: " + std::string(TPTUNE_SOURCE_DIR) + "/examples/hf/qwen3-30b-a3b/config.json}");
  text.replace(text.find("async_tp: false}"), 16, "async_tp: false, ep: 8}");
  const PublishedSource s = parse(text);
  CHECK(s.runs[0].plan.ep == 8);
  CHECK(s.runs[0].plan.summary() == "tp 1 bf16 ep 8");
  CHECK(s.runs[1].plan.ep == 1);  // the default: no expert parallelism
  const Plan a = published_run_plan(s.runs[0]);
  CHECK(a.ep_degree == 8);
  CHECK(a.dp_shard == 16);
  CHECK(a.provenance.at("ep_degree") == "bad.yaml:8: plan.ep");
  // ep 3 does not divide the 16 GPUs' dp_shard: not a file error; the run is reported as not predicted, in one line
  // naming the file, the run's line and the key.
  text.replace(text.find("ep: 8}"), 6, "ep: 3}");
  const std::vector<PublishedSource> bad = {parse(text)};
  const PreparedRecord rec = prepare_published(bad);
  REQUIRE(rec.not_predicted.size() == 1);
  CHECK(rec.not_predicted[0].id == "a");
  CHECK(
      rec.not_predicted[0].error ==
      "bad.yaml:8: plan.ep: ep_degree 3 does not divide dp_shard 16 x cp 1 x tp 1 = 16: torchtitan's sparse mesh (pp, "
      "dp_replicate, efsdp, ep) needs efsdp = dp_shard x cp x tp / ep whole (distributed/parallel_dims.py)");
}

TEST_CASE("published record: profiles/published-moe, torchtitan's own MoE runs, reads whole") {
  const auto sources = load_published_record(std::string(TPTUNE_SOURCE_DIR) + "/profiles/published-moe");
  REQUIRE(sources.size() == 7);
  int expressible = 0, not_expressible = 0;
  for (const auto& s : sources) {
    CHECK(s.repository == "pytorch/torchtitan");  // the discipline: torchtitan's own publications only
    for (const auto& r : s.runs) (r.expressible() ? expressible : not_expressible) += 1;
  }
  // #1902's debug model, #1993's six DeepSeek-V3 16B runs on B200, #2107's DeepSeek-V3 671B all-to-all run (pipeline
  // parallelism of a mixture of experts, lowered since issue 42's MoE pipelines)
  CHECK(expressible == 8);
  CHECK(not_expressible == 11);
  // Run `run` of source `id` (nullptr when absent).
  auto run_of = [&](const std::string& id, const std::string& run) -> const PublishedRun* {
    for (const auto& s : sources)
      if (s.id == id) return s.run(run);
    return nullptr;
  };
  // #1902's run, as quoted: "... memory: 6.89GiB(7.26%) tps: 86,348 ...": torchtitan's Qwen3 debug MoE flavor (8
  // layers, 64 experts, top 8) under EP 2 on 8 GPUs.
  const PublishedRun* r = run_of("torchtitan-pr1902-qwen3-moe-debug", "ep2-step10");
  REQUIRE(r != nullptr);
  CHECK(r->plan.ep == 2);
  CHECK(r->measured.tokens_per_second_per_gpu == 86348);
  CHECK(r->config.model.n_layers == 8);
  CHECK(published_run_plan(*r).dp_shard == 8);
  // #1993's runs give MFU only: their tokens/s is MFU x 2.25e15 (B200's dense bf16 peak in torchtitan and the b200
  // preset) / torchtitan's FLOPs per token, which Model::training_flops_per_token computes: 6 x 2,451,435,008 active
  // non-embedding parameters + 6 x 27 layers x 16 heads x (128 + 64 + 128) x 4096 = 18,105,996,288; 0.135 x 2.25e15 /
  // 18,105,996,288 = 16,776.2.
  const PublishedRun* base = run_of("torchtitan-pr1993-dsv3-16b-b200", "baseline");
  REQUIRE(base != nullptr);
  CHECK(base->config.model.training_flops_per_token(4096) == 18105996288.0);
  CHECK(base->measured.tokens_per_second_per_gpu ==
        Approx(*base->measured.mfu * 2.25e15 / base->config.model.training_flops_per_token(4096)).epsilon(1e-5));
  CHECK(base->plan.ep == 8);
  // #2107's "Before": DeepSeek-V3 671B on 64 x 8 H100, pp 8 Interleaved1F1B x ep 32 x dp_shard 64 (512 = 8 x 64).
  const PublishedRun* dsv3 = run_of("torchtitan-pr2107-dsv3-671b-h100", "all-to-all");
  REQUIRE(dsv3 != nullptr);
  CHECK(dsv3->plan.pp == 8);
  CHECK(dsv3->plan.ep == 32);
  CHECK(dsv3->config.model.n_layers == 61);
  CHECK(dsv3->config.model.moe.dense_layers == 3);
  CHECK(published_run_plan(*dsv3).dp_shard == 64);
  const PreparedRecord rec = prepare_published(sources);
  CHECK(rec.runs.size() == 8);
  CHECK(rec.not_predicted.empty());
}
