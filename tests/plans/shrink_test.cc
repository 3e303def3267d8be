// shrink_for_verify (plans/language/resolve/shrink.h): the dims chosen (golden, by the rules of the header), the same
// Program structure as the real model (same ops, same collectives, in the same order), and the same refusals.
#include "plans/language/resolve/shrink.h"

#include <catch2/catch.hpp>

#include "plans/lower/lower.h"
#include "plans/util/error.h"
#include "tests/fixtures.h"

using namespace tptune;

namespace {

// Each segment's ops as "name kind [collective kind, group]": what the shrunk model must share with the real one.
std::vector<std::string> structure(const Program& p) {
  std::vector<std::string> out;
  for (const Segment& s : p.segments) {
    out.push_back(std::string(to_string(s.kind)));
    for (const Op& op : s.ops) {
      std::string k(kind_name(op.kind));
      // Appended piecewise: g++ 12 warns (-Wrestrict, a false positive) on " " + std::string(...).
      if (const auto* c = std::get_if<CollectiveOp>(&op.kind)) {
        k += ' ';
        k += to_string(c->kind);
        k += ' ';
        k += to_string(c->group);
      }
      out.push_back(op.name + " " + k);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("shrink: the dims of Llama 3 70B at tp 8", "[shrink]") {
  Training t;  // seq 8192
  const Shrunk s = shrink_for_verify(
      test::model_named("llama3-70b"), t,
      test::make_plan("sequence_parallel", {.tp_degree = 8,
                                            .float8 = Float8Recipe::tensorwise,
                                            .async_tp = true,
                                            .loss_parallel = true,
                                            .activation_checkpointing = ActivationCheckpointing::selective}));
  // kv 8: tp 8 divides it -> 8; heads 8 x (64 / 8) = 64; head_dim 8 -> dim 512; ffn 3/2 x 512 = 768 (a multiple of
  // 8, as 28672 is); vocab 40 x 8 = 320 (128256 = 8 x 16032); seq 4 x 8 = 32.
  CHECK(s.model.n_layers == 2);
  CHECK(s.model.n_kv_heads == 8);
  CHECK(s.model.n_heads == 64);
  CHECK(s.model.dim == 512);
  CHECK(s.model.ffn_dim == 768);
  CHECK(s.model.vocab_size == 320);
  CHECK(s.training.seq_len == 32);
  CHECK(s.changes == std::vector<std::string>{"n_layers 80 -> 2", "head_dim 128 -> 8", "dim 8192 -> 512",
                                              "ffn_dim 28672 -> 768", "vocab_size 128256 -> 320",
                                              "seq_len 8192 -> 32"});
}

TEST_CASE("shrink: Llama 3 8B at tp 2 keeps the 4:1 head grouping", "[shrink]") {
  Training t;
  const Shrunk s = shrink_for_verify(
      test::model_named("llama3-8b"), t,
      test::make_plan("sequence_parallel", {.tp_degree = 2,
                                            .float8 = Float8Recipe::tensorwise,
                                            .async_tp = true,
                                            .loss_parallel = true,
                                            .activation_checkpointing = ActivationCheckpointing::selective}));
  // kv 8 -> tp 2; heads 2 x 4 = 8; dim 8 x 8 = 64; ffn 96; vocab 80; seq 8.
  CHECK(s.model.n_kv_heads == 2);
  CHECK(s.model.n_heads == 8);
  CHECK(s.model.dim == 64);
  CHECK(s.model.ffn_dim == 96);
  CHECK(s.model.vocab_size == 80);
  CHECK(s.training.seq_len == 8);
}

TEST_CASE("shrink: a dim tp does not divide stays indivisible", "[shrink]") {
  Model m = test::model_named("llama3-8b");
  m.vocab_size = 128257;  // odd
  Training t;
  t.seq_len = 8191;
  const Shrunk s = shrink_for_verify(
      m, t,
      test::make_plan("sequence_parallel", {.tp_degree = 8,
                                            .float8 = Float8Recipe::tensorwise,
                                            .async_tp = true,
                                            .loss_parallel = true,
                                            .activation_checkpointing = ActivationCheckpointing::selective}));
  CHECK(s.model.vocab_size == 321);
  CHECK(s.training.seq_len == 33);
}

TEST_CASE("shrink: the shrunk Program has the real one's ops and collectives, in order", "[shrink]") {
  for (const char* name : {"llama3-8b", "llama3-70b", "llama3-405b"})
    for (int tp : {2, 4, 8})
      for (const char* family : {"vanilla", "sequence_parallel"}) {
        INFO(name << " tp " << tp << " " << family);
        const bool sp = std::string(family) == "sequence_parallel";
        const Plan plan = test::make_plan(family, {.tp_degree = tp,
                                                   .float8 = Float8Recipe::tensorwise,
                                                   .async_tp = sp,
                                                   .loss_parallel = true,
                                                   .activation_checkpointing = ActivationCheckpointing::selective});
        const Model m = test::model_named(name);
        Training t;
        const Shrunk s = shrink_for_verify(m, t, plan);
        Model real = m;
        real.n_layers = 2;  // the same layer count, so that the segment repeat counts compare too
        CHECK(structure(lower(real, t, plan)) == structure(lower(s.model, s.training, plan)));
      }
}

TEST_CASE("shrink: context parallelism keeps two rows per sequence chunk of every rank", "[shrink]") {
  // Llama 3 70B at 128K tokens, tp 4 x cp 8 (examples/llama3-70b-128k-cp.yaml's winner): head-tail load balancing
  // cuts each sequence in 2 x 8 chunks and sequence parallelism each chunk over tp 4, so seq' = 2 x (4 x 2 x 8) = 128;
  // without load balancing 2 x (4 x 8) = 64. The shrunk Program has the real one's ring (same ops, same order).
  Training t;
  t.seq_len = 131072;
  const Model m = test::model_named("llama3-70b");
  for (bool balance : {true, false}) {
    const Plan plan = test::make_plan(
        "sequence_parallel",
        {.tp_degree = 4, .dp_shard = 2, .loss_parallel = true, .cp_degree = 8, .cp_load_balance = balance});
    const Shrunk s = shrink_for_verify(m, t, plan);
    CHECK(s.training.seq_len == (balance ? 128 : 64));
    Model real = m;
    real.n_layers = 2;
    CHECK(structure(lower(real, t, plan)) == structure(lower(s.model, s.training, plan)));
  }
}

TEST_CASE("shrink: what the real model refuses, the shrunk one refuses too", "[shrink]") {
  Model m = test::model_named("tiny-llama");  // 8 heads, 4 kv heads: tp 8 cannot shard wk
  Training t;
  const Plan plan =
      test::make_plan("sequence_parallel", {.tp_degree = 8,
                                            .float8 = Float8Recipe::tensorwise,
                                            .async_tp = true,
                                            .loss_parallel = true,
                                            .activation_checkpointing = ActivationCheckpointing::selective});
  CHECK_THROWS_AS(lower(m, t, plan), Error);
  const Shrunk s = shrink_for_verify(m, t, plan);
  CHECK(s.model.n_kv_heads == 4);
  CHECK_THROWS_AS(lower(s.model, s.training, plan), Error);
}
