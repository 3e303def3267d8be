// The search: candidate space and defaults, every pruning reason (and that the lowering or the simulator refuses
// the same candidates), equality with a brute-force loop of lower() + simulate() over every candidate, determinism
// over thread counts and optimisations, the --out-plan round trip, nothing-fits, and the JSON.
#include "sim/search/search.h"

#include <fmt/format.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <set>

#include "plans/language/module_names.h"
#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "sim/cost/cost_param_fields.h"
#include "sim/report/search_report.h"
#include "sim/search/constraints.h"
#include "sim/search/parallel.h"
#include "sim/simulate.h"
#include "tests/fixtures.h"
#include "tests/sim/search_brute_force.h"
#include "tests/sim/search_reference.h"

using namespace tptune;
using Catch::Matchers::Contains;
using test::brute;
using test::Brute;
using test::check_against_brute_force;

namespace {

constexpr double kGiB = 1073741824.0;

// The default model of test::ConfigText.
const char* kModel = "{dim: 512, n_layers: 2, n_heads: 8, n_kv_heads: 8, ffn_dim: 1536, vocab_size: 1024}";

const Candidate* find(const std::vector<Candidate>& cs, int tp, const std::string& family, const ResolvedSpace& s,
                      Float8Recipe f8, bool async, bool lp) {
  for (const Candidate& c : cs)
    if (c.tp_degree == tp && s.families[static_cast<size_t>(c.family)].name == family && c.float8 == f8 &&
        c.async_tp == async && c.loss_parallel == lp)
      return &c;
  return nullptr;
}

}  // namespace

TEST_CASE("default TP degrees: divisors of the world size up to two nodes", "[search]") {
  Cluster c;
  c.nodes = 128;
  c.gpus_per_node = 8;
  CHECK(default_tp_degrees(c) == std::vector<int>{1, 2, 4, 8, 16});
  c.nodes = 1;
  CHECK(default_tp_degrees(c) == std::vector<int>{1, 2, 4, 8});
  c.nodes = 3;  // 24 GPUs: 3, 6 and 12 divide it (they straddle nodes and are pruned for it)
  CHECK(default_tp_degrees(c) == std::vector<int>{1, 2, 3, 4, 6, 8, 12});
  c.nodes = 1;
  c.gpus_per_node = 1;
  CHECK(default_tp_degrees(c) == std::vector<int>{1});
}

TEST_CASE("the space: defaults without a search section, product size, enumeration order", "[search]") {
  Config cfg = test::example_config("llama3-405b-h100.yaml");
  CHECK_FALSE(cfg.has_search);
  ResolvedSpace s = resolve_space(cfg);
  // 5 tp x 2 presets x 3 float8 x 2 async x 2 loss parallel x 3 AC x 3 local batches = 1080
  CHECK(s.size() == 1080);
  std::vector<Candidate> cs = enumerate_candidates(s);
  REQUIRE(cs.size() == 1080);
  for (size_t i = 0; i < cs.size(); ++i) CHECK(cs[i].index == static_cast<int>(i));
  CHECK(cs[0].tp_degree == 1);
  CHECK(cs[0].dp_shard == 1024);
  CHECK(cs[1].local_batch_size == 2);  // the innermost loop
  CHECK(cs.back().tp_degree == 16);
  CHECK(cs.back().dp_shard == 64);
  Plan p = candidate_plan(s, cs.back());
  CHECK(p.family == "sequence_parallel");
  CHECK(p.tp_degree == 16);
  CHECK(p.dp_shard == 64);
  CHECK(p.float8 == Float8Recipe::rowwise);
  CHECK(p.async_tp);
  CHECK(p.loss_parallel);
  CHECK(p.activation_checkpointing == ActivationCheckpointing::full);
  CHECK(p.local_batch_size == 4);
  CHECK(p.modules == preset_plan("sequence_parallel", p).modules);
}

TEST_CASE("every pruning reason, and the lowering or simulator refuses the same candidates", "[search]") {
  struct Case {
    const char* model;
    int nodes, gpn, tp;
    const char* family;
    Float8Recipe f8;
    bool async;
    const char* gpu;
    int64_t seq;
    PruneReason reason;
  };
  const Float8Recipe none = Float8Recipe::none;
  const Case cases[] = {
      {kModel, 3, 8, 5, "vanilla", none, false, "h100-sxm", 1024, PruneReason::world},
      {kModel, 3, 8, 6, "vanilla", none, false, "h100-sxm", 1024, PruneReason::straddle},
      {kModel, 1, 8, 2, "vanilla", Float8Recipe::tensorwise, false, "a100-sxm-80gb", 1024, PruneReason::float8_gpu},
      {"{dim: 768, n_layers: 2, n_heads: 12, n_kv_heads: 12, ffn_dim: 1536, vocab_size: 1024}", 1, 8, 8, "vanilla",
       none, false, "h100-sxm", 1024, PruneReason::heads},
      {"{dim: 512, n_layers: 2, n_heads: 8, n_kv_heads: 2, ffn_dim: 1536, vocab_size: 1024}", 1, 8, 4,
       "sequence_parallel", none, false, "h100-sxm", 1024, PruneReason::kv_heads},
      {"{dim: 512, n_layers: 2, n_heads: 8, n_kv_heads: 8, ffn_dim: 1540, vocab_size: 1024}", 1, 8, 8, "vanilla", none,
       false, "h100-sxm", 1024, PruneReason::ffn},
      {"{dim: 512, n_layers: 2, n_heads: 8, n_kv_heads: 8, ffn_dim: 1536, vocab_size: 1001}", 1, 8, 2,
       "sequence_parallel", none, false, "h100-sxm", 1024, PruneReason::vocab},
      {kModel, 1, 8, 8, "sequence_parallel", none, false, "h100-sxm", 1028, PruneReason::seq},
      {kModel, 1, 8, 2, "vanilla", none, true, "h100-sxm", 1024, PruneReason::async_needs_sp},
  };
  for (const Case& k : cases) {
    INFO(to_string(k.reason));
    Config cfg = test::make_config({.model = k.model,
                                    .seq_len = k.seq,
                                    .gpu = k.gpu,
                                    .nodes = k.nodes,
                                    .gpus_per_node = k.gpn,
                                    .search = fmt::format("{{tp_degrees: [{}]}}", k.tp),
                                    .file = "small.yaml"});
    ResolvedSpace s = resolve_space(cfg);
    ClusterSpec cl = resolve_cluster(cfg);
    std::vector<Candidate> cs = enumerate_candidates(s);
    const Candidate* c = find(cs, k.tp, k.family, s, k.f8, k.async, false);
    REQUIRE(c);
    Verdict v = check_static(cfg, cl, s, *c);
    REQUIRE_FALSE(v.ok());
    CHECK(v.reason == k.reason);
    CHECK_FALSE(v.detail.empty());
    if (k.reason == PruneReason::world) continue;  // no plan exists
    // The brute-force path refuses it too: the lowering (divisibility, async TP) or the simulator (layout, float8).
    Brute b = brute(cfg, cl, candidate_plan(s, *c), s.memory_headroom_gib);
    CHECK_FALSE(b.ok);
    CHECK_FALSE(b.error.empty());
    // ... and the same candidate without the offending choice passes the static checks.
    const Candidate* vanilla_ok = find(cs, k.tp, "vanilla", s, none, false, false);
    if (k.reason == PruneReason::async_needs_sp || k.reason == PruneReason::float8_gpu || k.reason == PruneReason::seq)
      CHECK(check_static(cfg, cl, s, *vanilla_ok).ok());
  }
}

TEST_CASE("redundant tp-1 candidates share their representative's program", "[search]") {
  Config cfg = test::make_config({.search = "{tp_degrees: [1], float8: [none]}", .file = "small.yaml"});
  ResolvedSpace s = resolve_space(cfg);
  ClusterSpec cl = resolve_cluster(cfg);
  std::vector<Candidate> cs = enumerate_candidates(s);
  const Candidate* rep = find(cs, 1, "vanilla", s, Float8Recipe::none, false, false);
  REQUIRE(rep);
  CHECK(check_static(cfg, cl, s, *rep).ok());
  int redundant = 0;
  const Brute rb = brute(cfg, cl, candidate_plan(s, *rep), 2);
  for (const Candidate& c : cs) {
    if (c.activation_checkpointing != rep->activation_checkpointing || c.local_batch_size != rep->local_batch_size ||
        c.index == rep->index)
      continue;
    Verdict v = check_static(cfg, cl, s, c);
    REQUIRE_FALSE(v.ok());
    CHECK(v.reason == PruneReason::redundant);
    ++redundant;
    Brute b = brute(cfg, cl, candidate_plan(s, c), 2);
    REQUIRE(b.ok);
    CHECK(b.report.step_time_ms == rb.report.step_time_ms);
    CHECK(b.report.memory.peak == rb.report.memory.peak);
  }
  CHECK(redundant == 2 * 2 * 2 - 1);  // families x async x loss parallel, minus the representative
}

TEST_CASE("error classes drop the plan source and numbers", "[search]") {
  const PruneCause heads = error_reason(PruneReason::lowering,
                                        "layers.0.attention.wk: tp 16 does not divide the 8 heads: the local output "
                                        "has 64 features, 0.5 heads of head_dim 128",
                                        "preset:vanilla");
  CHECK(heads.reason == PruneReason::lowering);
  CHECK(heads.error_class == "layers.N.attention.wk: tp N does not divide the N heads");
  CHECK(to_string(heads) == "lowering: layers.N.attention.wk: tp N does not divide the N heads");
  CHECK(to_string(error_reason(PruneReason::lowering, "my.yaml: async_tp needs sequence-parallel collectives: none",
                               "my.yaml")) == "lowering: async_tp needs sequence-parallel collectives");
  CHECK(to_string(error_reason(PruneReason::simulation, "plan: tp 3 x dp_shard 8 = 24 GPUs", "")) ==
        "simulation: plan: tp N x dp_shard N = N GPUs");
  // A pipeline schedule's refusal keeps the schedule's name and the rule; digits inside names are not numbers.
  CHECK(to_string(error_reason(PruneReason::simulation,
                               "pipeline schedule 1F1B: needs microbatches >= pp (the number of stages), got 2 < 8",
                               "")) ==
        "simulation: pipeline schedule 1F1B: needs microbatches >= pp (the number of stages), got N < N");
  CHECK(to_string(error_reason(PruneReason::simulation, "h100-sxm: 1.5 GiB over 80 GiB.", "")) ==
        "simulation: h100-sxm: N GiB over N GiB.");
  // Two classes of one stage are counted apart; a class compares with its reason.
  CHECK(heads != error_reason(PruneReason::lowering, "x: tp 2 does not divide the 3 heads: y", ""));
  CHECK(heads == PruneReason::lowering);
}

TEST_CASE("search equals brute force: Llama3 8B on 8 H100s, the example's full space", "[search][brute]") {
  Config cfg = test::example_config("llama3-8b-h100.yaml");
  SearchOptions o;
  o.threads = 2;
  SearchResult r = search(cfg, o);
  CHECK(r.evaluated == 864);  // 4 tp x 2 x 3 x 2 x 2 x 3 x 3
  size_t pruned = 0;
  for (const auto& [reason, n] : r.pruned) pruned += n;
  CHECK(r.feasible + pruned == r.evaluated);
  CHECK(r.feasible > 0);
  check_against_brute_force(cfg, r);
}

TEST_CASE("search equals brute force: Llama3 405B on 1024 H100s, default space (memory decides)", "[search][brute]") {
  Config cfg = test::example_config("llama3-405b-h100.yaml");
  SearchResult r = search(cfg, {});
  CHECK(r.pruned.at(PruneReason::kv_heads) ==
        216);  // every tp-16 candidate: 2 x 3 x 2 x 2 x 3 x 3 minus async rowwise ones
  CHECK(r.pruned.count(PruneReason::memory));
  check_against_brute_force(cfg, r);
}

TEST_CASE("search equals brute force: Llama3 405B HSDP example (dp_replicate 1, 2, 4, 8)", "[search][brute][hsdp]") {
  Config cfg = test::example_config("llama3-405b-hsdp.yaml");
  SearchResult r = search(cfg, {});
  CHECK(r.evaluated == 4 * 1080);  // the default space of llama3-405b-h100.yaml, once per replicate degree
  size_t hsdp = 0;
  for (int i : r.ranking) hsdp += r.results[static_cast<size_t>(i)].candidate.dp_replicate > 1;
  CHECK(hsdp > 0);
  check_against_brute_force(cfg, r);
  // Awkward replicate degrees on 3 nodes x 8: 5 divides nothing, 3 and 6 only some tp; dp_shard 1 is DDP.
  Config odd = test::make_config(
      {.nodes = 3,
       .search = "{tp_degrees: [1, 2, 4, 8], dp_replicate: [1, 3, 5, 6, 24], local_batch_sizes: [1, 4]}",
       .file = "small.yaml"});
  SearchResult ro = search(odd, {});
  CHECK(ro.pruned.count(PruneReason::replicate_world));
  CHECK(ro.pruned.count(PruneReason::replicate_ddp));
  check_against_brute_force(odd, ro);
}

TEST_CASE("search equals brute force with context parallelism (cp 1, 2, 3, 4, 8)", "[search][brute][cp]") {
  // 2 nodes x 8: cp 3 divides no world share (pruned, world); cp 8 with tp 4 spans both nodes; seq 1000 splits into
  // 2 x cp chunks for cp 1, 2 only (cp_seq for 4 and 8 at tp 1; with sequence parallel tp x 2 cp must divide it).
  for (int64_t seq : {1024, 1000}) {
    INFO("seq " << seq);
    Config cfg = test::make_config(
        {.seq_len = seq,
         .nodes = 2,
         .search = "{tp_degrees: [1, 2, 4], cp_degrees: [1, 2, 3, 4, 8], float8: [none], activation_checkpointing: "
                   "[none, full], local_batch_sizes: [1, 2]}",
         .file = "cp.yaml"});
    SearchResult r = search(cfg, {});
    CHECK(r.evaluated == 3 * 5 * 2 * 2 * 2 * 2 * 2);  // tp x cp x families x async x loss x AC x batch
    CHECK(r.pruned.count(PruneReason::world));
    if (seq == 1000) CHECK(r.pruned.count(PruneReason::cp_seq));
    size_t cp = 0;
    for (int i : r.ranking) cp += r.results[static_cast<size_t>(i)].candidate.cp_degree > 1;
    CHECK(cp > 0);
    check_against_brute_force(cfg, r);
  }
}

TEST_CASE("search equals brute force: Llama3 70B at a global batch of 256 by gradient accumulation",
          "[search][brute][accumulation]") {
  Config cfg = test::example_config("llama3-70b-ga.yaml");
  SearchOptions o;
  o.threads = 2;
  SearchResult r = search(cfg, o);
  CHECK(r.evaluated == 960);
  CHECK(r.pruned.count(PruneReason::global_batch_multiple));
  REQUIRE(r.winner());
  CHECK(r.winner()->candidate.gradient_accumulation_steps > 1);
  check_against_brute_force(cfg, r);
  // Branch-and-bound keeps the ranking's head exact (candidates with ga > 1 are not bound-pruned).
  o.bound_top = 5;
  SearchResult b = search(cfg, o);
  REQUIRE(b.ranking.size() >= 5);
  for (size_t k = 0; k < 5; ++k) CHECK(b.ranking[k] == r.ranking[k]);
}

TEST_CASE("search equals brute force: GPT on A100s (no float8) and awkward TP degrees", "[search][brute]") {
  Config gpt = test::example_config("gpt-a100.yaml");
  SearchResult r = search(gpt, {});
  CHECK(r.pruned.at(PruneReason::float8_gpu) == r.evaluated / 2);  // float8: [none, tensorwise]
  check_against_brute_force(gpt, r);
  // 3 nodes x 8: tp 3, 6, 12 straddle nodes, tp 5 does not divide 24; heads 12 are not divisible by 8.
  Config odd = test::make_config(
      {.model = "{dim: 768, n_layers: 2, n_heads: 12, n_kv_heads: 4, ffn_dim: 3072, vocab_size: 1000}",
       .nodes = 3,
       .search = "{tp_degrees: [1, 2, 3, 4, 5, 6, 8, 12], local_batch_sizes: [1, 8]}",
       .file = "small.yaml"});
  SearchResult ro = search(odd, {});
  CHECK(ro.pruned.count(PruneReason::world));
  CHECK(ro.pruned.count(PruneReason::straddle));
  CHECK(ro.pruned.count(PruneReason::heads));
  check_against_brute_force(odd, ro);
}

TEST_CASE("search equals brute force on CPU ranks sharing 2 cores", "[search][brute]") {
  // tp-run's CPU ranks: 4 per node on 2 cores, at a fitted concurrent_rank_rate and oversubscribed_efficiency, so
  // that cost_ops() prices every op for a shared machine (sim/shared_machine.h).
  Config cfg = load_config_string(
      "model: {dim: 64, n_layers: 2, n_heads: 8, n_kv_heads: 4, ffn_dim: 128, vocab_size: 256}\n"
      "training: {seq_len: 32, local_batch_size: 2, dtype: fp32}\n"
      "cluster: {device: cpu, nodes: 1, gpus_per_node: 4, cores_per_node: 2}\n"
      "search: {float8: [none], local_batch_sizes: [1, 2]}\n",
      "cpu.yaml");
  SearchOptions o;
  o.threads = 1;
  o.cost = device_cost_params(gpu_preset("cpu"));
  o.cost.concurrent_rank_rate = 0.8;
  o.cost.oversubscribed_efficiency = 0.9;
  SearchResult r = search(cfg, o);
  REQUIRE(r.feasible > 0);
  check_against_brute_force(cfg, r, o.cost);
}

TEST_CASE("search equals brute force and the reference on the spaces command-line overrides make", "[search][brute]") {
  // tp-plan search --tp 4 | --gpu h200 --nodes 2 --seq-len 4096 --float8 rowwise | --framework torchtitan-0.3
  // --float8 rowwise (tools/tp_plan/search_overrides.h) replace these values of the config before search() sees it;
  // tests/integration/search_overrides.sh checks that the tool's results equal those of the edited YAML.
  const Config base = test::example_config("llama3-8b-h100.yaml");
  CHECK(base.search.stated_at.at("tp_degrees") == test::example_path("llama3-8b-h100.yaml") + ":32");
  CHECK(base.search.stated_at.count("seq_lens") == 0);  // a default: the key is not in the file
  Config tp4 = base;
  tp4.search.tp_degrees = {4};
  Config cluster = base;
  cluster.cluster.gpu = "h200";
  cluster.cluster.nodes = 2;
  cluster.training.seq_len = 4096;
  cluster.search.float8 = {Float8Recipe::rowwise};
  Config tt = base;
  tt.search.framework = "torchtitan-0.3";
  tt.search.float8 = {Float8Recipe::rowwise};
  tt.search.loss_parallel = {true};
  for (const Config* cfg : {&tp4, &cluster, &tt}) {
    const SearchResult r = search(*cfg, {}), ref = test::reference_search(*cfg, 2);
    REQUIRE(r.feasible > 0);
    check_against_brute_force(*cfg, r);
    REQUIRE(r.ranking == ref.ranking);
    for (int i : r.ranking)
      CHECK(r.results[static_cast<size_t>(i)].report.step_time_ms ==
            ref.results[static_cast<size_t>(i)].report.step_time_ms);
    CHECK(r.pruned == ref.pruned);
  }
  // 4 tp x 2 presets x 3 float8 x 2 async x 2 loss x 3 AC x 3 batches = 864, each list cut to one value.
  CHECK(search(tp4, {}).evaluated == 864 / 4);
  CHECK(search(cluster, {}).evaluated == 864 / 3);
}

TEST_CASE("search is deterministic over threads, and the batch shortcut changes no result", "[search]") {
  // The search on 1 and 3 threads, and the reference (tests/sim/search_reference.h: every candidate lowered, no
  // larger batch skipped after a smaller one missed memory) on 3.
  Config cfg = test::example_config("llama3-70b-h100.yaml");
  SearchOptions one;
  one.threads = 1;
  SearchOptions three;
  three.threads = 3;
  SearchResult a = search(cfg, one), b = search(cfg, three), ref = test::reference_search(cfg, 3);
  CHECK(a.threads == 1);
  CHECK(b.threads == 3);
  for (const SearchResult* x : {&b, &ref}) {
    REQUIRE(a.ranking == x->ranking);
    for (int i : a.ranking) {
      CHECK(a.results[static_cast<size_t>(i)].report.step_time_ms ==
            x->results[static_cast<size_t>(i)].report.step_time_ms);
      CHECK(a.results[static_cast<size_t>(i)].report.memory.peak ==
            x->results[static_cast<size_t>(i)].report.memory.peak);
    }
    CHECK(a.pruned == x->pruned);
    CHECK(a.feasible == x->feasible);
  }
  size_t shortcut = 0;
  for (const CandidateResult& c : a.results) shortcut += test::pruned_by_larger_batch_shortcut(c);
  CHECK(shortcut > 0);  // the shortcut was taken, and changed no count above
}

TEST_CASE("search --out-plan round trip: the winner's plan file simulates to the same numbers", "[search]") {
  Config cfg = test::example_config("gpt-a100.yaml");
  SearchResult r = search(cfg, {});
  REQUIRE(r.winner());
  const auto path = std::filesystem::temp_directory_path() / "tptune_search_winner.yaml";
  save_plan(without_unmatched_modules(result_plan(r, r.ranking[0]), cfg.model), path.string());  // as --out-plan does
  Plan back = load_plan(path.string());
  StepReport s = simulate(lower(cfg.model, cfg.training, back), resolve_cluster(cfg), default_cost_params());
  CHECK(s.step_time_ms == r.winner()->report.step_time_ms);
  CHECK(s.tokens_per_second_per_gpu == r.winner()->report.tokens_per_second_per_gpu);
  CHECK(s.memory.peak == r.winner()->report.memory.peak);
  CHECK(back.tp_degree == r.winner()->candidate.tp_degree);
  CHECK(back.dp_shard == r.winner()->candidate.dp_shard);
  std::filesystem::remove(path);
}

TEST_CASE("search --out-plan round trip of torchtitan-0.3 winners: wqkv and lm_head stay, the file reads back",
          "[search]") {
  // Issue 21 item 1: the filter knew only the DTensor model's names and dropped 0.3's fused wqkv and lm_head, so the
  // file failed to lower ("layers.0.attention.wqkv: ... not parallelized in the plan").
  for (const char* preset : {"vanilla", "sequence_parallel"}) {
    INFO(preset);
    Config cfg = test::make_config(
        {.search = fmt::format("{{framework: torchtitan-0.3, presets: [{}], tp_degrees: [2, 4], float8: [none], "
                               "async_tp: [false]}}",
                               preset),
         .file = "small.yaml"});
    SearchResult r = search(cfg, {});
    REQUIRE(r.winner());
    const Plan written = without_unmatched_modules(result_plan(r, r.ranking[0]), cfg.model);  // as --out-plan does
    CHECK(written.modules == result_plan(r, r.ranking[0]).modules);  // nothing dropped: every entry names a module
    const std::string yaml = plan_to_yaml(written);
    CHECK_THAT(yaml, Contains("  layers.*.attention.wqkv: {style: colwise"));
    CHECK_THAT(yaml, Contains("  lm_head: {style: colwise"));
    const Plan back = load_plan_string(yaml, "best.yaml");
    CHECK(back.modules == preset_plan(preset, back).modules);  // the export's test of enable_sequence_parallel
    const StepReport s = simulate(lower(cfg.model, cfg.training, back), resolve_cluster(cfg), default_cost_params());
    CHECK(s.step_time_ms == r.winner()->report.step_time_ms);
    CHECK(s.memory.peak == r.winner()->report.memory.peak);
  }
}

TEST_CASE("a user plan file with an entry that matches no module is refused once, not pruned per candidate",
          "[search]") {
  const auto dir = std::filesystem::temp_directory_path() / "tptune_search_typo_plan";
  std::filesystem::create_directories(dir);
  {
    std::ofstream f(dir / "typo.yaml");
    f << "tp_degree: 2\nmodules:\n  layers.*.attention.wqq: colwise\n";
    std::ofstream c(dir / "cfg.yaml");
    c << "model: " << kModel << "\ncluster: {gpu: h100-sxm, nodes: 1, gpus_per_node: 8}\n"
      << "search: {tp_degrees: [2], presets: [], plans: [typo.yaml]}\n";
  }
  Config cfg = load_config((dir / "cfg.yaml").string());
  CHECK_THROWS_WITH(search(cfg, {}), (dir / "typo.yaml").string() +
                                         ":3: modules.layers.*.attention.wqq: matches no module of the model; did "
                                         "you mean layers.*.attention.wq?");
  std::filesystem::remove_all(dir);
}

TEST_CASE("user plan files join the space with their own loss-parallel setting", "[search]") {
  const auto dir = std::filesystem::temp_directory_path() / "tptune_search_userplan";
  std::filesystem::create_directories(dir);
  Plan base;
  base.tp_degree = 2;
  base.loss_parallel = false;
  Plan mine = preset_plan("sequence_parallel", base);
  mine.family = "my_sp";
  save_plan(mine, (dir / "my_sp.yaml").string());
  {
    std::ofstream f(dir / "cfg.yaml");
    f << "model: " << kModel << "\ntraining: {seq_len: 1024}\ncluster: {gpu: h100-sxm, nodes: 1, gpus_per_node: 8}\n"
      << "search: {tp_degrees: [2, 4], presets: [sequence_parallel], plans: [my_sp.yaml], float8: [none]}\n";
  }
  Config cfg = load_config((dir / "cfg.yaml").string());
  SearchResult r = search(cfg, {});
  REQUIRE(r.space.families.size() == 2);
  CHECK(r.space.families[1].name == "my_sp");
  CHECK_FALSE(r.space.families[1].preset);
  // presets: 2 loss-parallel values; the file: its own (false) only. 2 tp x (2 + 1) x 2 async x 3 AC x 3 batches
  CHECK(r.evaluated == 2 * 3 * 2 * 3 * 3);
  for (const CandidateResult& c : r.results)
    if (c.candidate.family == 1) CHECK_FALSE(c.candidate.loss_parallel);
  // The file's plan with loss parallel off is the preset's: identical numbers.
  for (const CandidateResult& c : r.results) {
    if (c.candidate.family != 1 || !c.feasible()) continue;
    for (const CandidateResult& d : r.results)
      if (d.candidate.family == 0 && !d.candidate.loss_parallel && d.candidate.tp_degree == c.candidate.tp_degree &&
          d.candidate.async_tp == c.candidate.async_tp &&
          d.candidate.activation_checkpointing == c.candidate.activation_checkpointing &&
          d.candidate.local_batch_size == c.candidate.local_batch_size)
        CHECK(d.report.step_time_ms == c.report.step_time_ms);
  }
  check_against_brute_force(cfg, r);
  std::filesystem::remove_all(dir);
}

TEST_CASE("nothing fits: the closest candidates, nearest miss first, and why", "[search]") {
  // A 4 GiB GPU with 3 GiB of headroom cannot hold Llama3 8B in any plan.
  Config cfg = load_config_string(R"(
model: {preset: llama3-8b}
training: {seq_len: 8192}
cluster:
  gpu: {name: tiny, bf16_tflops: 500, fp16_tflops: 500, fp8_tflops: 0, fp32_tflops: 50, hbm_bandwidth_GBps: 2000,
        memory_GiB: 4, sm_count: 100, nvlink_bandwidth_GBps: 200, nvlink_latency_us: 3, nvswitch: true, nvls: false,
        network_bandwidth_GBps: 25, network_latency_us: 10}
  nodes: 1
  gpus_per_node: 8
search: {memory_headroom_gib: 3}
)",
                                  "tiny.yaml");
  SearchResult r = search(cfg, {});
  CHECK(r.feasible == 0);
  CHECK(r.winner() == nullptr);
  REQUIRE_FALSE(r.closest.empty());
  double last = -1e300;
  std::set<PruneCause> reasons;
  for (int i : r.closest) {
    const CandidateResult& c = r.results[static_cast<size_t>(i)];
    if (!c.has_memory) {
      reasons.insert(c.pruned);
      continue;
    }
    const double over = c.report.memory.peak - c.report.memory.capacity;
    CHECK(over >= last);
    last = over;
  }
  CHECK(reasons.count(PruneReason::float8_gpu));  // one example of each other reason follows the memory misses
  const std::string text = nothing_fits_text(cfg, r, 5);
  CHECK_THAT(text, Contains("no candidate fits"));
  CHECK_THAT(text, Contains(std::string(to_string(PruneReason::memory))));
  nlohmann::json j = search_json(r, {}, 5);
  CHECK(j["top"].empty());
  REQUIRE(j["closest"].size() == 5);
  CHECK(j["closest"][0]["reason"] == std::string(to_string(PruneReason::memory)));
  CHECK(j["closest"][0]["peak_memory_gib"].get<double>() > 1.0);
}

TEST_CASE("search JSON: counts add up, top entries carry the plan and the numbers", "[search]") {
  Config cfg = test::example_config("gpt-a100.yaml");
  SearchResult r = search(cfg, {});
  std::vector<Baseline> bl = search_baselines(cfg, r, default_cost_params());
  REQUIRE(bl.size() == 2);
  CHECK(bl[0].plan.family == "vanilla");
  CHECK(bl[0].plan.tp_degree == 8);  // the seed's default: gpus_per_node
  // gpt-a100's model is no torchtitan recipe's: the second row is the preset, named so, at the winner's tp.
  CHECK(bl[1].name == "sequence_parallel preset");
  CHECK(bl[1].recipe.empty());
  CHECK(bl[1].plan.family == "sequence_parallel");
  CHECK(bl[1].plan.loss_parallel);
  CHECK(bl[1].plan.tp_degree == r.winner()->candidate.tp_degree);
  nlohmann::json j = search_json(r, bl, 3);
  CHECK(j["evaluated"] == r.evaluated);
  size_t pruned = 0;
  for (auto& [k, v] : j["pruned"].items()) pruned += v.get<size_t>();
  CHECK(j["feasible"].get<size_t>() + pruned == r.evaluated);
  REQUIRE(j["top"].size() == 3);
  const auto& t = j["top"][0];
  CHECK(t["plan"]["tp_degree"] == r.winner()->candidate.tp_degree);
  CHECK(t["step_time_ms"].get<double>() == r.winner()->report.step_time_ms);
  CHECK(t["peak_memory_gib"].get<double>() == Approx(r.winner()->report.memory.peak / kGiB));
  CHECK(t.contains("tokens_per_second_per_gpu"));
  CHECK(t.contains("mfu"));
  CHECK(j["top"][0]["tokens_per_second_per_gpu"].get<double>() >=
        j["top"][1]["tokens_per_second_per_gpu"].get<double>());
  CHECK(j["baselines"][0]["winner_speedup"].get<double>() >= 1.0);  // the winner beats what it is compared with
  CHECK_FALSE(j.contains("closest"));
  const std::string table = search_table(cfg, r, 3);
  CHECK_THAT(table, Contains("384 candidates"));
  CHECK_THAT(explain_winner(r, bl), Contains("vs sequence_parallel preset:"));
}

TEST_CASE("ranking order per objective", "[search]") {
  CandidateResult a, b;
  a.candidate.index = 0;
  b.candidate.index = 1;
  a.report.tokens_per_second_per_gpu = 100, b.report.tokens_per_second_per_gpu = 200;
  a.report.step_time_ms = 10, b.report.step_time_ms = 40;
  a.report.memory.peak = 50, b.report.memory.peak = 60;
  CHECK(ranks_before(b, a, Objective::tokens_per_second));
  CHECK(ranks_before(a, b, Objective::step_time));
  CHECK(ranks_before(a, b, Objective::memory));
  b.report.tokens_per_second_per_gpu = 100;  // a tie on throughput: less memory wins
  CHECK(ranks_before(a, b, Objective::tokens_per_second));
  b.report.memory.peak = 50;  // a full tie: enumeration order
  CHECK(ranks_before(a, b, Objective::tokens_per_second));
  CHECK_FALSE(ranks_before(b, a, Objective::tokens_per_second));
}

TEST_CASE("parallel_for visits every index once and rethrows a worker's exception", "[search]") {
  std::vector<std::atomic<int>> seen(1000);
  size_t last_done = 0;
  parallel_for(
      seen.size(), 4, [&](size_t i, int) { seen[i]++; }, [&](size_t done, size_t) { last_done = done; });
  for (auto& s : seen) CHECK(s.load() == 1);
  CHECK(last_done == seen.size());
  CHECK_THROWS_WITH(parallel_for(100, 3,
                                 [](size_t i, int) {
                                   if (i == 42) throw Error("boom");
                                 }),
                    "boom");
}

TEST_CASE("the torchtitan default row is torchtitan 0.3's recipe for the model (config_registry.py)", "[search]") {
  // torchtitan 0.3.0, torchtitan/models/llama3/config_registry.py: llama3_8b (tp 1 = ParallelismConfig's default,
  // local batch 1, SelectiveAC), llama3_70b (tp 8, local batch 8, FullAC), llama3_405b (tp 8, local batch 2, FullAC,
  // Float8LinearConverter's default recipe rowwise, compile with async TP). dp_shard: the rest of the world.
  struct Want {
    const char* config;
    const char* recipe;
    int tp;
    int64_t batch;
    ActivationCheckpointing ac;
    Float8Recipe f8;
    bool async;
  };
  for (const Want& w :
       {Want{"llama3-8b-h100.yaml", "llama3_8b", 1, 1, ActivationCheckpointing::selective, Float8Recipe::none, false},
        Want{"llama3-70b-h100.yaml", "llama3_70b", 8, 8, ActivationCheckpointing::full, Float8Recipe::none, false},
        Want{"llama3-405b-h100.yaml", "llama3_405b", 8, 2, ActivationCheckpointing::full, Float8Recipe::rowwise,
             true}}) {
    INFO(w.config);
    const Config cfg = test::example_config(w.config);
    const ClusterSpec cl = resolve_cluster(cfg);
    // The winner's tp (2 here) does not move the recipe's.
    const std::vector<Baseline> bl = plan_baselines(cfg, cl, 2, 4, default_cost_params());
    REQUIRE(bl.size() == 2);
    const Baseline& t = bl[1];
    CHECK(t.name == "torchtitan default");
    CHECK(t.recipe == w.recipe);
    CHECK(t.plan.framework == Framework::torchtitan_0_3);
    CHECK(t.plan.family == "sequence_parallel");  // enable_sequence_parallel's default, True
    CHECK(t.plan.tp_degree == w.tp);
    CHECK(t.plan.dp_shard == cl.world_size() / w.tp);
    CHECK(t.plan.local_batch_size == w.batch);
    CHECK(t.plan.activation_checkpointing == w.ac);
    CHECK(t.plan.float8 == w.f8);
    CHECK(t.plan.async_tp == w.async);
    CHECK(t.error.empty());
  }
  // The same dimensions from Meta's config.json are the 8B recipe; Mistral 7B's are none (the preset, named so).
  const Config hf8 =
      load_config(test::example_path("llama3-8b-h100.yaml"), test::example_path("hf/llama3-8b/config.json"));
  CHECK(plan_baselines(hf8, resolve_cluster(hf8), 2, 4, default_cost_params())[1].recipe == "llama3_8b");
  const Config mistral =
      load_config(test::example_path("llama3-8b-h100.yaml"), test::example_path("hf/mistral-7b-v0.3/config.json"));
  const std::vector<Baseline> bm = plan_baselines(mistral, resolve_cluster(mistral), 2, 4, default_cost_params());
  CHECK(bm[1].name == "sequence_parallel preset");
  CHECK(bm[1].plan.tp_degree == 2);
  CHECK(bm[1].plan.framework == Framework::dtensor);
}
