// search.seq_lens: the sequence length as a search axis. A search over several lengths equals brute force (lower() +
// simulate() of each candidate with training.seq_len set to its length) bit for bit with every fast path on and off,
// and equals the one-length searches of each length; the sequence-parallel rule prunes per length; config errors;
// the report, the JSON and the winner's plan file carry the length.
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <optional>

#include "plans/export/export.h"
#include "plans/language/module_names.h"
#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "sim/report/search_report.h"
#include "sim/search/constraints.h"
#include "sim/search/search.h"
#include "sim/simulate.h"
#include "tests/fixtures.h"
#include "tests/sim/search_reference.h"

using namespace tptune;
using Catch::Matchers::Contains;

namespace {

// A 4-layer Llama-like model on 1 node x 8 H100s, trained at seq 2048, with the `search:` flow map `search`.
Config seq_config(const std::string& search, int64_t seq = 2048) {
  return test::make_config(
      {.model = "{dim: 1024, n_layers: 4, n_heads: 16, n_kv_heads: 8, ffn_dim: 3584, vocab_size: 32000}",
       .seq_len = seq,
       .search = search,
       .file = "seq.yaml"});
}

std::string error_of(const std::string& search) {
  try {
    seq_config(search);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Every number of a StepReport, compared exactly.
void check_same_report(const StepReport& a, const StepReport& b) {
  CHECK(a.step_time_ms == b.step_time_ms);
  CHECK(a.tokens_per_second_per_gpu == b.tokens_per_second_per_gpu);
  CHECK(a.mfu == b.mfu);
  CHECK(a.memory.peak == b.memory.peak);
  CHECK(a.compute_ms == b.compute_ms);
  CHECK(a.exposed_tp_comm_ms == b.exposed_tp_comm_ms);
  CHECK(a.exposed_dp_comm_ms == b.exposed_dp_comm_ms);
  CHECK(a.tp_comm_busy_ms == b.tp_comm_busy_ms);
  CHECK(a.dp_comm_busy_ms == b.dp_comm_busy_ms);
  CHECK(a.block_forward_ms == b.block_forward_ms);
  CHECK(a.block_backward_ms == b.block_backward_ms);
  CHECK(a.seq_len == b.seq_len);
  CHECK(a.local_batch_size == b.local_batch_size);
  CHECK(a.gradient_accumulation_steps == b.gradient_accumulation_steps);
}

// Brute force over every candidate of a space (no max_local_batch_size): the candidate's plan lowered with the config's
// training section at the candidate's seq_len, simulated, and the search's memory rule. Computed once per space and
// compared with every search of it (the reference, the fast search on 1 and 2 threads, with and without the bound):
// lowering and simulating the whole space again per search made this test 5 times slower than it needs to be.
// Candidates the search prunes by world size or as redundant have no entry.
struct BruteForce {
  std::vector<Candidate> cands;
  std::vector<std::optional<StepReport>> reports;  // empty: lowering or simulation refused the candidate
  std::vector<bool> fits;
  std::vector<bool> skipped;
};

BruteForce brute_force(const Config& cfg, const SearchResult& r) {
  BruteForce b;
  b.cands = enumerate_candidates(r.space);
  REQUIRE(b.cands.size() == r.results.size());
  b.reports.resize(b.cands.size());
  b.fits.assign(b.cands.size(), false);
  b.skipped.assign(b.cands.size(), false);
  for (size_t i = 0; i < b.cands.size(); ++i) {
    const PruneCause& p = r.results[i].pruned;
    if (p == PruneReason::world || p == PruneReason::redundant) {
      b.skipped[i] = true;
      continue;
    }
    Training t = cfg.training;
    t.seq_len = b.cands[i].seq_len;
    try {
      b.reports[i] =
          simulate(lower(cfg.model, t, candidate_plan(r.space, b.cands[i])), r.cluster, default_cost_params());
      b.fits[i] = fits_with_headroom(b.reports[i]->memory, r.space.memory_headroom_gib);
    } catch (const Error&) {
    }
  }
  return b;
}

// Every feasible result of the search `r` is brute force's bit for bit, every candidate brute force finds feasible is
// feasible in the search (or, with bound_top, pruned by the bound), and the ranking's first `top` (all when 0) are
// brute force's.
void check_against(const BruteForce& bf, const SearchResult& r, size_t top = 0) {
  REQUIRE(bf.cands.size() == r.results.size());
  std::vector<CandidateResult> feasible;
  for (size_t i = 0; i < bf.cands.size(); ++i) {
    const CandidateResult& s = r.results[i];
    INFO(describe(r.space, bf.cands[i]) << " | search: " << s.pruned << " " << s.detail);
    CHECK(s.candidate.seq_len == bf.cands[i].seq_len);
    if (bf.skipped[i]) {
      CHECK((s.pruned == PruneReason::world || s.pruned == PruneReason::redundant));
      continue;
    }
    if (!bf.reports[i]) {
      CHECK_FALSE(s.feasible());
      continue;
    }
    if (s.feasible()) {
      REQUIRE(bf.fits[i]);
      check_same_report(s.report, *bf.reports[i]);
      CHECK(s.report.seq_len == bf.cands[i].seq_len);
    } else if (bf.fits[i]) {
      CHECK(s.pruned == PruneReason::bound);
    } else {
      CHECK(s.pruned == PruneReason::memory);
    }
    if (bf.fits[i]) {
      CandidateResult b;
      b.candidate = bf.cands[i];
      b.report = *bf.reports[i];
      feasible.push_back(b);
    }
  }
  std::sort(feasible.begin(), feasible.end(),
            [&](const CandidateResult& a, const CandidateResult& b) { return ranks_before(a, b, r.space.objective); });
  const size_t n = top > 0 ? std::min(top, feasible.size()) : feasible.size();
  if (top == 0) REQUIRE(r.ranking.size() == feasible.size());
  REQUIRE(r.ranking.size() >= n);
  for (size_t k = 0; k < n; ++k) CHECK(r.ranking[k] == feasible[k].candidate.index);
}

void check_against_brute_force(const Config& cfg, const SearchResult& r) { check_against(brute_force(cfg, r), r); }

SearchOptions all_fast(int threads, size_t bound_top) {
  SearchOptions o;
  o.threads = threads;
  o.bound_top = bound_top;
  return o;
}

// Three lengths; local batches up to 16 so that memory prunes the long ones' larger batches.
const char* kSpace = "{seq_lens: [1024, 4096, 16384], local_batch_sizes: [1, 2, 8, 16], float8: [none, tensorwise]}";

}  // namespace

TEST_CASE("search.seq_lens: the default is training.seq_len, and the space enumerates length outermost",
          "[search][seq]") {
  const Config plain = seq_config("{}");
  CHECK(plain.search.seq_lens.empty());
  const ResolvedSpace one = resolve_space(plain);
  REQUIRE(one.seq_lens == std::vector<int64_t>{2048});
  CHECK_FALSE(one.searches_seq_len());
  const std::vector<Candidate> oc = enumerate_candidates(one);
  for (const Candidate& c : oc) CHECK(c.seq_len == 2048);
  CHECK(candidate_plan(one, oc.back()).seq_len == 0);  // plans of a one-length search read as before
  CHECK(describe(one, oc.back()).find("seq=") == std::string::npos);

  const Config cfg = seq_config(kSpace);
  const ResolvedSpace s = resolve_space(cfg);
  CHECK(s.searches_seq_len());
  CHECK(one.size() == 4 * 2 * 3 * 2 * 2 * 3 * 3);    // tp, family, float8, async, loss parallel, AC, local batch
  CHECK(s.size() == 3 * 4 * 2 * 2 * 2 * 2 * 3 * 4);  // x 3 lengths; float8 and local batches as the section says
  const std::vector<Candidate> cs = enumerate_candidates(s);
  REQUIRE(cs.size() == s.size());
  const size_t block = cs.size() / 3;
  for (size_t i = 0; i < cs.size(); ++i) {
    CHECK(cs[i].index == static_cast<int>(i));
    CHECK(cs[i].seq_len == s.seq_lens[i / block]);
    // Within a length, the candidates of the one-length space in its order.
    const Candidate& first = cs[i % block];
    CHECK((cs[i].tp_degree == first.tp_degree && cs[i].family == first.family && cs[i].float8 == first.float8 &&
           cs[i].async_tp == first.async_tp && cs[i].loss_parallel == first.loss_parallel &&
           cs[i].activation_checkpointing == first.activation_checkpointing &&
           cs[i].local_batch_size == first.local_batch_size));
  }
  CHECK_THAT(describe(s, cs[block]), Contains("local_batch=1 seq=4096"));
  CHECK(candidate_plan(s, cs[block]).seq_len == 4096);
  CHECK(candidate_training(cfg.training, cs[block]).seq_len == 4096);
  // One length other than training.seq_len: the plans carry it, the descriptions do not need it.
  const ResolvedSpace other = resolve_space(seq_config("{seq_lens: [8192]}"));
  CHECK(other.searches_seq_len());
  CHECK(candidate_plan(other, enumerate_candidates(other).front()).seq_len == 8192);
  CHECK(describe(other, enumerate_candidates(other).front()).find("seq=") == std::string::npos);
}

TEST_CASE("search.seq_lens config errors name file:line", "[search][seq][config]") {
  CHECK_THAT(error_of("{seq_lens: []}"), Contains("seq.yaml:4: search.seq_lens: expected a non-empty list"));
  CHECK_THAT(error_of("{seq_lens: [1024, 0]}"),
             Contains("seq.yaml:4: search.seq_lens[1]: expected an integer in 1..16777216, got '0'"));
  CHECK_THAT(error_of("{seq_lens: [1024, 16777217]}"), Contains("seq.yaml:4: search.seq_lens[1]: expected an integer"));
  CHECK_THAT(error_of("{seq_lens: [4096, 2.5]}"), Contains("seq.yaml:4: search.seq_lens[1]: expected an integer"));
  CHECK_THAT(error_of("{seq_lens: abc}"), Contains("seq.yaml:4: search.seq_lens: expected an integer"));
  CHECK_THAT(error_of("{seq_lens: {a: 1}}"), Contains("seq.yaml:4: search.seq_lens: expected a non-empty list"));
  // A duplicate names the second occurrence, on its own line.
  CHECK_THAT(error_of("\n  seq_lens:\n    - 4096\n    - 8192\n    - 4096\n"),
             Contains("seq.yaml:8: search.seq_lens[2]: 4096 is listed twice (also search.seq_lens[0])"));
  CHECK(seq_config("{seq_lens: 4096}").search.seq_lens == std::vector<int64_t>{4096});  // a single value
  // Long lists: the space's size is checked (Candidate::index is an int), not wrapped.
  std::string many = "[1";
  for (int i = 2; i <= 2000; ++i) many += fmt::format(", {}", i);
  many += "]";
  const Config huge = seq_config(fmt::format("{{seq_lens: {0}, local_batch_sizes: {0}}}", many));
  CHECK_THROWS_WITH(enumerate_candidates(resolve_space(huge)),
                    Contains("search space size (the product of the search lists' lengths)"));
}

TEST_CASE("search.seq_lens: sequence parallel is pruned at the lengths tp does not divide, and only there",
          "[search][seq][constraints]") {
  // 1020 = 4 x 255: tp 1, 2 and 4 divide it, tp 8 does not; 1024 and 2048 divide by every tp.
  const Config cfg = seq_config("{seq_lens: [1024, 1020, 2048], local_batch_sizes: [1], float8: [none]}");
  const SearchResult r = search(cfg, {});
  size_t seq_pruned = 0;
  for (const CandidateResult& c : r.results) {
    const Candidate& x = c.candidate;
    const bool sp = r.space.families[static_cast<size_t>(x.family)].sequence_parallel;
    const bool expect = sp && x.tp_degree == 8 && x.seq_len == 1020;
    INFO(describe(r.space, x) << ": " << c.pruned << " " << c.detail);
    CHECK((c.pruned == PruneReason::seq) == expect);
    if (expect) {
      CHECK(c.detail == "tp 8 vs seq_len 1020");
      ++seq_pruned;
    }
  }
  CHECK(seq_pruned == 2 * 3 * 2);  // sequence_parallel at tp 8 and 1020: async x AC x loss parallel
  CHECK(r.pruned.at(PruneReason::seq) == seq_pruned);
  // Vanilla at tp 8 runs at 1020 (it does not split the sequence): the lowering agrees.
  bool vanilla_1020 = false;
  for (int i : r.ranking) {
    const Candidate& x = r.results[static_cast<size_t>(i)].candidate;
    vanilla_1020 |= x.tp_degree == 8 && x.seq_len == 1020;
  }
  CHECK(vanilla_1020);
  check_against_brute_force(cfg, r);
}

TEST_CASE("search.seq_lens: search equals brute force bit for bit, and the reference that lowers every candidate",
          "[search][seq][brute]") {
  const Config cfg = seq_config(kSpace);
  const SearchResult slow = test::reference_search(cfg, 2);
  CHECK(slow.pruned.count(PruneReason::memory));  // 16384 x 16 sequences does not fit
  REQUIRE(slow.winner());
  const BruteForce bf = brute_force(cfg, slow);
  check_against(bf, slow);
  // Every length has feasible candidates: the ranking compares them per token.
  for (int64_t seq : slow.space.seq_lens) {
    bool any = false;
    for (int i : slow.ranking) any |= slow.results[static_cast<size_t>(i)].candidate.seq_len == seq;
    CHECK(any);
  }
  for (int threads : {1, 2}) {
    INFO("threads " << threads);
    const SearchResult fast = search(cfg, all_fast(threads, 0));
    CHECK(fast.patched > 0);
    CHECK(fast.finished > 0);
    CHECK(fast.lowered < slow.lowered);
    CHECK(fast.ranking == slow.ranking);
    CHECK(fast.pareto == slow.pareto);
    for (int i : fast.ranking)
      check_same_report(fast.results[static_cast<size_t>(i)].report, slow.results[static_cast<size_t>(i)].report);
    check_against(bf, fast);
    const SearchResult bound = search(cfg, all_fast(threads, 5));
    CHECK(bound.pareto == slow.pareto);
    check_against(bf, bound, 5);
  }
}

TEST_CASE("search.seq_lens: a search over lengths is the one-length searches of each length, side by side",
          "[search][seq]") {
  // With max_local_batch_size too (the bisection's probes share the length's Programs).
  for (const char* extra : {"local_batch_sizes: [1, 2, 8]", "max_local_batch_size: 32"}) {
    INFO(extra);
    const Config cfg = seq_config(fmt::format("{{seq_lens: [1024, 8192], float8: [none], {}}}", extra));
    const SearchResult all = search(cfg, all_fast(2, 0));
    const size_t block = all.results.size() / 2;
    for (size_t k = 0; k < 2; ++k) {
      const int64_t seq = all.space.seq_lens[k];
      const Config one = seq_config(fmt::format("{{float8: [none], {}}}", extra), seq);
      const SearchResult r = test::reference_search(one, 1);
      REQUIRE(r.results.size() == block);
      for (size_t i = 0; i < block; ++i) {
        const CandidateResult &a = all.results[k * block + i], &b = r.results[i];
        INFO(describe(all.space, a.candidate));
        CHECK(a.pruned == b.pruned);
        CHECK(a.candidate.local_batch_size == b.candidate.local_batch_size);
        if (a.feasible() && b.feasible()) check_same_report(a.report, b.report);
      }
    }
  }
}

TEST_CASE("search.seq_lens: the table, the JSON, the winner's plan file and its torchtitan export carry the length",
          "[search][seq][report]") {
  const Config cfg = seq_config(kSpace);
  const SearchResult r = search(cfg, {});
  REQUIRE(r.winner());
  const Candidate& w = r.winner()->candidate;
  const std::string table = search_table(cfg, r, 5);
  CHECK_THAT(table, Contains("(seq 1024, 4096, 16384)"));
  CHECK_THAT(table, Contains("   seq    step ms"));
  CHECK_THAT(table, Contains(fmt::format("{:>6}", w.seq_len)));
  CHECK_THAT(pareto_text(r), Contains("   seq  tok/s/GPU"));
  const std::vector<Baseline> baselines = search_baselines(cfg, r, default_cost_params());
  REQUIRE(baselines.size() == 2);
  for (const Baseline& b : baselines) {
    CHECK(b.plan.seq_len == w.seq_len);  // the baselines train what the winner trains
    if (b.error.empty()) CHECK(b.report.seq_len == w.seq_len);
  }
  CHECK_THAT(explain_winner(r, baselines), Contains(fmt::format("seq_len {}", w.seq_len)));

  const nlohmann::json j = search_json(r, baselines, 3);
  CHECK(j["seq_lens"] == nlohmann::json({1024, 4096, 16384}));
  CHECK(j["top"][0]["plan"]["seq_len"] == w.seq_len);
  for (const auto& p : j["pareto"]) CHECK(p["plan"].contains("seq_len"));
  // A one-length search's JSON and table read as before.
  const Config plain = seq_config("{local_batch_sizes: [1], float8: [none]}");
  const SearchResult rp = search(plain, {});
  const nlohmann::json jp = search_json(rp, {}, 3);
  CHECK_FALSE(jp.contains("seq_lens"));
  CHECK_FALSE(jp["top"][0]["plan"].contains("seq_len"));
  CHECK(search_table(plain, rp, 3).find("   seq ") == std::string::npos);

  // The winner's plan file states its length and simulates, at that length, to the search's numbers.
  const auto path = std::filesystem::temp_directory_path() / "tptune_seq_winner.yaml";
  save_plan(without_unmatched_modules(result_plan(r, r.ranking[0]), cfg.model), path.string());
  const Plan back = load_plan(path.string());
  std::filesystem::remove(path);
  CHECK(back.seq_len == w.seq_len);
  CHECK(back.stated.count("seq_len"));
  CHECK_THAT(plan_to_yaml(back), Contains(fmt::format("seq_len: {}\n", w.seq_len)));
  const StepReport s =
      simulate(lower(cfg.model, result_training(cfg, r, r.ranking[0]), back), r.cluster, default_cost_params());
  check_same_report(s, r.winner()->report);
  // The exports: torchtitan 0.3's command line (TrainingConfig.seq_len as tyro spells it) and the job-config TOML.
  ExportContext ctx = export_context(cfg);
  ctx.seq_len = cfg.training.seq_len;  // the config's: the plan's own length wins
  // --format torchtitan names a recipe by the model's dimensions: the flag is what is tested, so the 8B's model.
  REQUIRE(model_preset("llama3-8b", *ctx.model));
  CHECK_THAT(export_plan(back, ExportFormat::torchtitan, ctx),
             Contains(fmt::format("--training.seq-len {}", w.seq_len)));
  CHECK_THAT(export_plan(back, ExportFormat::torchtitan_toml, ctx), Contains(fmt::format("seq_len = {}\n", w.seq_len)));
  CHECK_THROWS_WITH(load_plan_string("seq_len: 0\nmodules: {}\n", "p.yaml"),
                    Contains("p.yaml:1: seq_len: expected an integer in 1..16777216"));
}

TEST_CASE("search.seq_lens: the example config searches three lengths", "[search][seq][examples]") {
  const Config cfg = test::example_config("llama3-70b-seq.yaml");
  REQUIRE(cfg.search.seq_lens.size() == 3);
  const SearchResult r = search(cfg, {});
  REQUIRE(r.winner());
  CHECK(r.evaluated == resolve_space(cfg).size());
  check_against_brute_force(cfg, r);
}
