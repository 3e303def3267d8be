// The search's fast path is the slow path: a batch-parametric Program set to batch b is lower() at b field for field,
// over every structure and batch size of the example spaces; it throws what lower() throws; and the whole search
// gives bit-identical results to the reference search that lowers every candidate (tests/sim/search_reference.h).
#include "sim/search/batch_program.h"

#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <optional>
#include <set>

#include "plans/lower/incremental.h"
#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "sim/search/constraints.h"
#include "sim/search/search.h"
#include "tests/fixtures.h"
#include "tests/sanitizer_stride.h"
#include "tests/sim/search_reference.h"

using namespace tptune;
using Catch::Matchers::Contains;

namespace {

Plan at_batch(Plan p, int64_t b) {
  p.local_batch_size = b;
  return p;
}

// For every structure of the config's space that lowers at local batch 1 and 2: at(b) == lower(b) for b in `batches`.
// Returns how many (structure, batch) pairs were compared.
size_t check_space(const Config& cfg, const std::vector<int64_t>& batches) {
  const ResolvedSpace space = resolve_space(cfg);
  const ClusterSpec cluster = resolve_cluster(cfg);
  std::set<std::string> seen;
  size_t compared = 0;
  for (const Candidate& c : enumerate_candidates(space)) {
    if (!check_static(cfg, cluster, space, c).ok()) continue;
    Candidate key = c;
    key.local_batch_size = 0;
    if (!seen.insert(describe(space, key)).second) continue;  // one per structure
    const Plan plan = candidate_plan(space, c);
    Program p1, p2;
    try {
      p1 = lower(cfg.model, cfg.training, at_batch(plan, 1));
      p2 = lower(cfg.model, cfg.training, at_batch(plan, 2));
    } catch (const Error&) {
      continue;  // refused whatever the batch: the search lowers it and reports the error
    }
    std::string why;
    auto bp = BatchProgram::make(cfg.model, cfg.training, at_batch(plan, 2), p1, p2, &why);
    INFO(describe(space, c));
    REQUIRE(why.empty());
    REQUIRE(bp);
    CHECK(bp->batch_dependent_fields() > 0);
    for (int64_t b : batches) {
      INFO("local batch " << b);
      const Program& fast = bp->at(b);
      CHECK(program_difference(fast, lower(cfg.model, cfg.training, at_batch(plan, b))).empty());
      ++compared;
    }
  }
  return compared;
}

// Every number of search result `a` and the reference's `b`, bit for bit (== on doubles), and every reason and
// detail; a candidate the search's larger-batch shortcut pruned is out of memory in the reference too.
void check_same_search(const SearchResult& a, const SearchResult& b) {
  REQUIRE(a.results.size() == b.results.size());
  for (size_t i = 0; i < a.results.size(); ++i) {
    const CandidateResult &x = a.results[i], &y = b.results[i];
    INFO(describe(a.space, x.candidate));
    CHECK(x.pruned == y.pruned);
    if (test::pruned_by_larger_batch_shortcut(x)) {
      CHECK(y.has_memory);
      CHECK_FALSE(y.has_step);
      continue;
    }
    CHECK(x.detail == y.detail);
    CHECK(x.has_memory == y.has_memory);
    CHECK(x.has_step == y.has_step);
    const StepReport &r = x.report, &s = y.report;
    CHECK(r.step_time_ms == s.step_time_ms);
    CHECK(r.tokens_per_second_per_gpu == s.tokens_per_second_per_gpu);
    CHECK(r.mfu == s.mfu);
    CHECK(r.compute_ms == s.compute_ms);
    CHECK(r.exposed_tp_comm_ms == s.exposed_tp_comm_ms);
    CHECK(r.exposed_dp_comm_ms == s.exposed_dp_comm_ms);
    CHECK(r.tp_comm_busy_ms == s.tp_comm_busy_ms);
    CHECK(r.dp_comm_busy_ms == s.dp_comm_busy_ms);
    CHECK(r.block_forward_ms == s.block_forward_ms);
    CHECK(r.block_backward_ms == s.block_backward_ms);
    CHECK(r.memory.peak == s.memory.peak);
    CHECK(r.memory.activations == s.memory.activations);
    CHECK(r.memory.working_set == s.memory.working_set);
    CHECK(r.memory.params_in_flight == s.memory.params_in_flight);
    CHECK(r.memory.model_states() == s.memory.model_states());
    CHECK(r.memory.peak_phase == s.memory.peak_phase);
    CHECK(r.plan == s.plan);
    CHECK(r.local_batch_size == s.local_batch_size);
  }
  CHECK(a.ranking == b.ranking);
  CHECK(a.pruned == b.pruned);
  CHECK(a.closest == b.closest);
}

// The count of a's candidates that the larger-batch shortcut pruned without a Program.
size_t shortcut_pruned(const SearchResult& a) {
  size_t n = 0;
  for (const CandidateResult& c : a.results) n += test::pruned_by_larger_batch_shortcut(c);
  return n;
}

void check_fast_equals_slow(const Config& cfg, bool expect_patched = true) {
  SearchOptions fast;
  fast.threads = 2;
  const SearchResult a = search(cfg, fast), b = test::reference_search(cfg, 2);
  if (expect_patched) CHECK(a.patched > 0);
  CHECK(a.lowered < a.finished);  // one lowering served several policies
  CHECK(b.patched == 0);
  CHECK(b.finished == 0);
  // Every Program the reference lowered, the fast path made, or proved out of memory without making it.
  CHECK(a.finished + a.patched + shortcut_pruned(a) == b.lowered);
  check_same_search(a, b);
  // On one thread every async-TP-on structure follows its async-off sibling on the same evaluator, which hands it
  // its unfinished Programs (unfinished_with_async_tp()): the same results, with fewer lowerings.
  SearchOptions one = fast;
  one.threads = 1;
  const SearchResult c = search(cfg, one);
  CHECK(c.lowered <= a.lowered);
  CHECK(c.finished + c.patched + shortcut_pruned(c) == b.lowered);
  check_same_search(c, b);
}

}  // namespace

TEST_CASE("batch program: at(b) is lower(b) field for field, every structure of the 8B space", "[search][batch]") {
  // 4 tp degrees x 2 presets x ...: every structure that lowers; batch sizes in and beyond the space (3 and 16: not
  // the two it was made from).
  Config cfg = test::example_config("llama3-8b-h100.yaml");
  CHECK(check_space(cfg, {1, 2, 3, 4, 16}) > 50);
}

TEST_CASE("batch program: at(b) is lower(b), GPT on A100s (layernorm, gelu) and torchtitan 0.3 405B",
          "[search][batch]") {
  CHECK(check_space(test::example_config("gpt-a100.yaml"), {1, 5, 8}) > 0);
  // torchtitan 0.3: fused wqkv, chunked loss, FSDP always.
  Config tt = test::example_config("llama3-8b-h100.yaml");
  tt.search.framework = "torchtitan-0.3";
  tt.search.float8 = {Float8Recipe::none, Float8Recipe::rowwise};
  tt.search.loss_parallel = {true};
  CHECK(check_space(tt, {3, 4}) > 0);
}

TEST_CASE("batch program: at(b) is lower(b) on HSDP spaces (dp_replicate > 1, torchtitan 0.3 at dp_shard 1)",
          "[search][batch][hsdp]") {
  // 8B on 4 nodes x 8: dp_replicate 2 and 4 beside 1; and torchtitan 0.3, whose dp_shard 1 x dp_replicate 32 is
  // FSDP2's replicate path (all-reduces without reduce-scatters).
  Config cfg = test::example_config("llama3-8b-h100.yaml");
  cfg.cluster.nodes = 4;
  cfg.search.dp_replicate = {1, 2, 4};
  cfg.search.float8 = {Float8Recipe::none, Float8Recipe::tensorwise};
  CHECK(check_space(cfg, {1, 3, 4}) > 50);
  Config tt = test::example_config("llama3-8b-h100.yaml");
  tt.cluster.nodes = 4;
  tt.search.framework = "torchtitan-0.3";
  tt.search.float8 = {Float8Recipe::none};
  tt.search.loss_parallel = {true};
  tt.search.tp_degrees = {1, 8};
  tt.search.dp_replicate = {4, 32};
  CHECK(check_space(tt, {3, 4}) > 0);
}

TEST_CASE("lower() in two steps: one unfinished Program finished for every policy is lower() of each",
          "[search][batch]") {
  // Every structure of the 8B and GPT spaces (vanilla, sequence parallel, float8, async TP, loss parallel; FSDP and
  // not), at two batch sizes: finish_lowering(lower_unfinished(plan with policy A), B) == lower(plan with policy B).
  size_t compared = 0;
  for (const char* file : {"llama3-8b-h100.yaml", "gpt-a100.yaml", "llama3-405b-h100.yaml"}) {
    Config cfg = test::example_config(file);
    const ResolvedSpace space = resolve_space(cfg);
    const ClusterSpec cluster = resolve_cluster(cfg);
    for (const Candidate& c : enumerate_candidates(space)) {
      if (c.activation_checkpointing != ActivationCheckpointing::full || c.local_batch_size > 2) continue;
      if (c.index % test::kSanitizerStride || !check_static(cfg, cluster, space, c).ok()) continue;
      const Plan plan = candidate_plan(space, c);
      std::optional<UnfinishedProgram> u;
      try {
        u = lower_unfinished(cfg.model, cfg.training, plan);
      } catch (const Error&) {
        continue;
      }
      // One Program finished from one prepared unfinished Program under policy after policy and block counts, each
      // time told where it comes from (finish_lowering_into()'s out_from: only what finishing changes is copied).
      UnfinishedProgram shared = *u;
      prepare_async_tp(shared);
      Program chained;
      uint64_t chained_from = 0;
      const int64_t half = cfg.model.n_layers / 2;
      for (auto [ac, k] : {std::pair{ActivationCheckpointing::selective, half},
                           {ActivationCheckpointing::none, -1},
                           {ActivationCheckpointing::full, 1},
                           {ActivationCheckpointing::full, 0},
                           {ActivationCheckpointing::selective, 0},
                           {ActivationCheckpointing::full, half}}) {
        Plan with = plan;
        with.activation_checkpointing = ac;
        if (k >= 0) with.ac_layers = k;
        INFO(describe(space, c) << " finished as " << to_string(ac) << " on " << k << " blocks, from " << chained_from);
        std::string lowered_error, chained_error;
        Program lowered;
        try {
          lowered = lower(cfg.model, cfg.training, with);
        } catch (const Error& e) {
          lowered_error = e.what();
        }
        try {
          finish_lowering_into(shared, ac, chained, k, chained_from);
          chained_from = shared.id;
        } catch (const Error& e) {
          chained_error = e.what();
          chained_from = 0;
        }
        CHECK(chained_error == lowered_error);
        if (lowered_error.empty()) CHECK(program_difference(chained, lowered).empty());
      }
      for (ActivationCheckpointing ac :
           {ActivationCheckpointing::none, ActivationCheckpointing::selective, ActivationCheckpointing::full}) {
        Plan with = plan;
        with.activation_checkpointing = ac;
        INFO(describe(space, c) << " finished as " << to_string(ac));
        std::string lowered_error, finished_error;
        Program lowered, finished;
        try {
          lowered = lower(cfg.model, cfg.training, with);
        } catch (const Error& e) {
          lowered_error = e.what();
        }
        try {
          finished = finish_lowering(*u, ac);
        } catch (const Error& e) {
          finished_error = e.what();
        }
        CHECK(finished_error == lowered_error);
        if (lowered_error.empty()) CHECK(program_difference(finished, lowered).empty());
        // With async TP's policy-free rewrite done once beforehand (prepare_async_tp()), into a recycled Program.
        UnfinishedProgram prepared = *u;
        prepare_async_tp(prepared);
        CHECK(prepared.forward.has_value() == (plan.async_tp && c.tp_degree > 1));
        std::string prepared_error;
        Program into;  // holding an earlier Program where there is one
        try {
          into = finish_lowering(*u, ActivationCheckpointing::none);
        } catch (const Error&) {
        }
        try {
          finish_lowering_into(prepared, ac, into);
        } catch (const Error& e) {
          prepared_error = e.what();
        }
        CHECK(prepared_error == lowered_error);
        if (lowered_error.empty()) CHECK(program_difference(into, lowered).empty());
        ++compared;
      }
    }
  }
  CHECK(compared > 100 / test::kSanitizerStride);
}

TEST_CASE("lower_unfinished() into a recycled Program is lower_unfinished() into a fresh one", "[search][batch]") {
  // The search lowers into Programs it has evaluated (CandidateEvaluator::take_program()): every candidate of the
  // example spaces, lowered into the Program of the candidate before it (another plan, larger or smaller: its tensors,
  // segments and ops are overwritten and the rest dropped), and into the last Program of another config, equals its
  // lowering into an empty Program field for field, or throws the same.
  size_t compared = 0;
  Program other_config;  // the last Program of the previous config: another model
  for (const char* file : {"tiny-llama.yaml", "llama3-8b-h100.yaml", "gpt-a100.yaml", "llama3-405b-h100.yaml",
                           "llama3-405b-hsdp.yaml", "llama3-70b-ga.yaml", "tiny-gpt.yaml"}) {
    Config cfg = test::example_config(file);
    const ResolvedSpace space = resolve_space(cfg);
    const ClusterSpec cluster = resolve_cluster(cfg);
    Program previous = other_config;
    for (const Candidate& c : enumerate_candidates(space)) {
      if (c.index % test::kSanitizerStride || !check_static(cfg, cluster, space, c).ok()) continue;
      const Plan plan = candidate_plan(space, c);
      INFO(file << ": " << describe(space, c));
      std::string fresh_error, recycled_error, other_error;
      UnfinishedProgram fresh, recycled, other;
      try {
        fresh = lower_unfinished(cfg.model, cfg.training, plan);
      } catch (const Error& e) {
        fresh_error = e.what();
      }
      try {
        recycled = lower_unfinished(cfg.model, cfg.training, plan, previous);
      } catch (const Error& e) {
        recycled_error = e.what();
      }
      try {
        other = lower_unfinished(cfg.model, cfg.training, plan, other_config);
      } catch (const Error& e) {
        other_error = e.what();
      }
      CHECK(recycled_error == fresh_error);
      CHECK(other_error == fresh_error);
      if (!fresh_error.empty()) continue;
      CHECK(program_difference(recycled.prog, fresh.prog).empty());
      CHECK(program_difference(other.prog, fresh.prog).empty());
      // And finished: the Program lower() gives, or what it throws (async TP without sequence-parallel collectives).
      std::string lowered_error, finished_error;
      Program lowered, finished;
      try {
        lowered = lower(cfg.model, cfg.training, plan);
      } catch (const Error& e) {
        lowered_error = e.what();
      }
      try {
        finished = finish_lowering(recycled, plan.activation_checkpointing);
      } catch (const Error& e) {
        finished_error = e.what();
      }
      CHECK(finished_error == lowered_error);
      if (lowered_error.empty()) CHECK(program_difference(finished, lowered).empty());
      previous = std::move(recycled.prog);
      ++compared;
    }
    other_config = std::move(previous);
  }
  CHECK(compared > 500 / test::kSanitizerStride);
}

// `p` without its names (what lower_unfinished(..., names = false) leaves empty).
Program without_names(Program p) {
  for (TensorDesc& t : p.tensors) {
    t.name.clear();
    t.param.clear();
  }
  for (Segment& s : p.segments)
    for (Op& op : s.ops) {
      op.module.clear();
      op.name.clear();
    }
  return p;
}

TEST_CASE("lower_unfinished() without names is the same Program but for its names", "[search][batch]") {
  // The search lowers without names: every candidate of the example spaces, lowered without names (into the previous
  // one's Program, as the search does), equals its lowering with names once those are cleared, unfinished and
  // finished under every policy (recompute ops and async TP's rewrite derive names, and must derive none); and it
  // throws exactly when lowering with names throws.
  size_t compared = 0;
  for (const char* file : {"tiny-llama.yaml", "llama3-8b-h100.yaml", "gpt-a100.yaml", "llama3-405b-h100.yaml",
                           "llama3-405b-hsdp.yaml", "llama3-70b-ga.yaml", "tiny-gpt.yaml"}) {
    Config cfg = test::example_config(file);
    const ResolvedSpace space = resolve_space(cfg);
    const ClusterSpec cluster = resolve_cluster(cfg);
    Program previous;
    for (const Candidate& c : enumerate_candidates(space)) {
      if (c.activation_checkpointing != ActivationCheckpointing::full || c.index % test::kSanitizerStride ||
          !check_static(cfg, cluster, space, c).ok())
        continue;
      const Plan plan = candidate_plan(space, c);
      INFO(file << ": " << describe(space, c));
      bool named_threw = false, nameless_threw = false;
      UnfinishedProgram named, nameless;
      try {
        named = lower_unfinished(cfg.model, cfg.training, plan);
      } catch (const Error&) {
        named_threw = true;
      }
      try {
        nameless = lower_unfinished(cfg.model, cfg.training, plan, previous, /*names=*/false);
      } catch (const Error&) {
        nameless_threw = true;
      }
      REQUIRE(nameless_threw == named_threw);
      if (named_threw) continue;
      CHECK(program_difference(nameless.prog, without_names(named.prog)).empty());
      CHECK(program_difference(nameless.prog, without_names(nameless.prog)).empty());  // no name at all
      UnfinishedProgram prepared = nameless;
      prepare_async_tp(prepared);
      for (ActivationCheckpointing ac :
           {ActivationCheckpointing::none, ActivationCheckpointing::selective, ActivationCheckpointing::full}) {
        INFO("finished as " << to_string(ac));
        std::string named_error, nameless_error;
        Program a, b;
        try {
          a = finish_lowering(named, ac);
        } catch (const Error& e) {
          named_error = e.what();
        }
        try {
          finish_lowering_into(prepared, ac, b);
        } catch (const Error& e) {
          nameless_error = e.what();
        }
        CHECK(nameless_error == named_error);
        if (!named_error.empty()) continue;
        CHECK(program_difference(b, without_names(a)).empty());
        CHECK(program_difference(b, without_names(b)).empty());
        ++compared;
      }
      previous = std::move(nameless.prog);
    }
  }
  CHECK(compared > 300 / test::kSanitizerStride);
}

TEST_CASE("lower() with async TP from its async-off sibling's unfinished Program, and what it throws",
          "[search][batch]") {
  // Every async-TP structure of the example spaces (and of torchtitan 0.3, and with compile off, which async TP
  // refuses), at two batch sizes: unfinished_with_async_tp(lower_unfinished(plan without async TP), plan) is
  // lower_unfinished(plan) field for field, or throws what it throws; and finished for every policy it is lower().
  Config off = test::example_config("llama3-8b-h100.yaml");
  off.training.compile = false;
  Config tt = test::example_config("llama3-8b-h100.yaml");
  tt.search.framework = "torchtitan-0.3";
  std::vector<Config> configs = {test::example_config("llama3-8b-h100.yaml"), test::example_config("gpt-a100.yaml"),
                                 test::example_config("llama3-405b-h100.yaml"), off, tt};
  size_t compared = 0, refused = 0;
  for (const Config& cfg : configs) {
    const ResolvedSpace space = resolve_space(cfg);
    const ClusterSpec cluster = resolve_cluster(cfg);
    for (const Candidate& c : enumerate_candidates(space)) {
      if (!c.async_tp || c.activation_checkpointing != ActivationCheckpointing::full || c.local_batch_size > 2)
        continue;
      Candidate sib = c;  // async TP off, lowered for another policy (finish_lowering() sets the policy)
      sib.async_tp = false;
      sib.activation_checkpointing = ActivationCheckpointing::none;
      if (!check_static(cfg, cluster, space, sib).ok()) continue;
      const Plan plan = candidate_plan(space, c);
      std::optional<UnfinishedProgram> u;
      try {
        u = lower_unfinished(cfg.model, cfg.training, candidate_plan(space, sib));
      } catch (const Error&) {
        continue;
      }
      INFO(describe(space, c));
      std::string direct_error, shared_error;
      std::optional<UnfinishedProgram> direct, shared;
      try {
        direct = lower_unfinished(cfg.model, cfg.training, plan);
      } catch (const Error& e) {
        direct_error = e.what();
      }
      try {
        shared = unfinished_with_async_tp(*u, cfg.model, cfg.training, plan);
      } catch (const Error& e) {
        shared_error = e.what();
      }
      CHECK(shared_error == direct_error);
      if (!direct_error.empty()) {
        ++refused;
        continue;
      }
      REQUIRE(shared);
      CHECK(program_difference(shared->prog, direct->prog).empty());
      for (ActivationCheckpointing ac :
           {ActivationCheckpointing::none, ActivationCheckpointing::selective, ActivationCheckpointing::full}) {
        Plan with = plan;
        with.activation_checkpointing = ac;
        std::string lowered_error, finished_error;
        Program lowered, finished;
        try {
          lowered = lower(cfg.model, cfg.training, with);
        } catch (const Error& e) {
          lowered_error = e.what();
        }
        try {
          finish_lowering_into(*shared, ac, finished);
        } catch (const Error& e) {
          finished_error = e.what();
        }
        CHECK(finished_error == lowered_error);
        if (lowered_error.empty()) CHECK(program_difference(finished, lowered).empty());
      }
      ++compared;
    }
  }
  CHECK(compared > 20);
  CHECK(refused > 0);  // compile off
  // A Program of another structure is not taken for a sibling: it is lowered anew.
  Config cfg = test::example_config("llama3-8b-h100.yaml");
  const ResolvedSpace space = resolve_space(cfg);
  Candidate c;
  c.tp_degree = 2, c.dp_shard = 4, c.family = 1, c.async_tp = true,
  c.activation_checkpointing = ActivationCheckpointing::full;
  Candidate other = c;
  other.async_tp = false, other.loss_parallel = true;
  const UnfinishedProgram u = lower_unfinished(cfg.model, cfg.training, candidate_plan(space, other));
  CHECK(program_difference(unfinished_with_async_tp(u, cfg.model, cfg.training, candidate_plan(space, c)).prog,
                           lower_unfinished(cfg.model, cfg.training, candidate_plan(space, c)).prog)
            .empty());
}

TEST_CASE("batch program: refuses Programs whose sizes are not affine in the batch, and throws what lower() throws",
          "[search][batch]") {
  Config cfg = test::example_config("llama3-8b-h100.yaml");
  Plan plan = candidate_plan(resolve_space(cfg), enumerate_candidates(resolve_space(cfg))[0]);
  const Program p1 = lower(cfg.model, cfg.training, at_batch(plan, 1));
  const Program p3 = lower(cfg.model, cfg.training, at_batch(plan, 3));
  std::string why;
  CHECK_FALSE(BatchProgram::make(cfg.model, cfg.training, plan, p1, p1, &why));
  CHECK_THAT(why, Contains("both Programs are at local batch 1"));
  // A size that moved by 1 between batch 1 and 3 is not b x something + something: refused, with the field.
  Program odd = p3;
  odd.tensors[0].local_shape[1] += 1;  // tokens (b, s): s moved by one
  CHECK_FALSE(BatchProgram::make(cfg.model, cfg.training, plan, p1, odd, &why));
  CHECK_THAT(why, Contains("tokens local shape") && Contains("not affine in the batch"));
  // A batch-free field that differs: refused too.
  Program renamed = p3;
  renamed.segments[1].ops[2].module = "elsewhere";
  CHECK_FALSE(BatchProgram::make(cfg.model, cfg.training, plan, p1, renamed, &why));
  CHECK_THAT(why, Contains("module differs"));
  // The real pair is accepted, and at(b) throws lower()'s own message past the limits.
  auto bp = BatchProgram::make(cfg.model, cfg.training, plan, p1, p3, &why);
  REQUIRE(bp);
  for (int64_t b : {int64_t{0}, int64_t{70000}}) {
    std::string lowered, fast;
    try {
      lower(cfg.model, cfg.training, at_batch(plan, b));
    } catch (const Error& e) {
      lowered = e.what();
    }
    try {
      bp->at(b);
    } catch (const Error& e) {
      fast = e.what();
    }
    CHECK_FALSE(lowered.empty());
    CHECK(fast == lowered);
  }
  CHECK(program_difference(bp->at(2), lower(cfg.model, cfg.training, at_batch(plan, 2))).empty());
}

TEST_CASE("search fast path == slow path, bit for bit, over every candidate: 8B on 8 H100s with 7 batch sizes",
          "[search][batch]") {
  Config cfg = test::example_config("llama3-8b-h100.yaml");
  cfg.search.local_batch_sizes = {1, 2, 3, 4, 6, 8, 16};
  check_fast_equals_slow(cfg);
}

TEST_CASE("search fast path == slow path on HSDP spaces: the 405B HSDP example, 8B with dp_replicate",
          "[search][batch][hsdp]") {
  // Under ASan the 8B space below stands for HSDP alone: the 405B one took 100 s there.
  if (!test::kSanitized) check_fast_equals_slow(test::example_config("llama3-405b-hsdp.yaml"));
  Config cfg = test::example_config("llama3-8b-h100.yaml");
  cfg.cluster.nodes = 4;
  cfg.search.dp_replicate = {1, 2, 4, 32};  // 32 at tp 1: DDP, pruned
  cfg.search.local_batch_sizes = {1, 2, 3, 4};
  check_fast_equals_slow(cfg);
}

TEST_CASE("search fast path == slow path: 405B on 1024 H100s, 70B, GPT on A100s", "[search][batch]") {
  check_fast_equals_slow(test::example_config("llama3-405b-h100.yaml"));
  check_fast_equals_slow(test::example_config("llama3-70b-h100.yaml"));
  check_fast_equals_slow(test::example_config("gpt-a100.yaml"));
}
