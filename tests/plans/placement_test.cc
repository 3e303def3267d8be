// Placement algebra: canonical form, shapes, redistribution and its backward (plans/language/placement.h's table),
// bytes.
#include "plans/language/placement.h"

#include <catch2/catch.hpp>

#include "plans/util/error.h"

using namespace tptune;
using Catch::Matchers::Contains;
using P = Placement;
using K = CollectiveKind;

TEST_CASE("placements print and parse in one canonical form") {
  for (P p : {P::R(), P::P(), P::S(0), P::S(1), P::S(-1), P::S(-2)}) CHECK(parse_placement(to_string(p), "t") == p);
  CHECK(to_string(P::S(-1)) == "S(-1)");
  CHECK(parse_placement(" S( 1 ) ", "t") == P::S(1));
  CHECK(parse_placement("Shard(-1)", "t") == P::S(-1));
  CHECK(parse_placement("Replicate()", "t") == P::R());
  CHECK(parse_placement("Partial()", "t") == P::P());
  for (const char* bad : {"", "S()", "S(x)", "Q", "S(1", "R()x", "S(--1)"}) {
    try {
      parse_placement(bad, "plan.yaml:4: modules.output.input_layouts");
      FAIL("accepted '" << bad << "'");
    } catch (const Error& e) {
      CHECK_THAT(e.what(), Contains("plan.yaml:4: modules.output.input_layouts") && Contains("expected a placement"));
    }
  }
}

TEST_CASE("S(-1) and S(2) are the same placement on a 3-D tensor") {
  CHECK(P::S(-1).same_as(P::S(2), 3));
  CHECK(!P::S(-1).same_as(P::S(1), 3));
  CHECK(!P::R().same_as(P::P(), 3));
}

TEST_CASE("sharding then all-gathering restores the global shape (property over shapes and tp)") {
  for (int tp : {1, 2, 4, 8})
    for (Shape g : {Shape{2, 64, 96}, Shape{1, 8192, 4096}, Shape{16, 8}})
      for (int d = -static_cast<int>(g.size()); d < static_cast<int>(g.size()); ++d) {
        P s = P::S(d);
        if (g[static_cast<size_t>(s.normalized_dim(static_cast<int>(g.size())))] % tp != 0) continue;
        Shape local = local_shape(g, s, tp, "x");
        CHECK(numel(local) * tp == numel(g));
        CHECK(global_shape(local, s, tp, "x") == g);
        Redistribution r = plan_redistribution(s, P::R(), static_cast<int>(g.size()), "x");
        REQUIRE(r.collective);
        CHECK(*r.collective == K::all_gather);
        CHECK(r.gather_dim == s.normalized_dim(static_cast<int>(g.size())));
      }
}

TEST_CASE("local shapes refuse a dim that tp does not divide, naming it") {
  try {
    local_shape({1, 1001, 64}, P::S(1), 2, "tok_embeddings");
    FAIL();
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Contains("tok_embeddings") && Contains("1001") && Contains("tp=2"));
  }
}

TEST_CASE("redistribution table and its backward") {
  auto coll = [](P a, P b) { return plan_redistribution(a, b, 3, "x"); };
  CHECK(*coll(P::P(), P::R()).collective == K::all_reduce);
  CHECK(*coll(P::P(), P::S(1)).collective == K::reduce_scatter);
  CHECK(coll(P::P(), P::S(1)).scatter_dim == 1);
  CHECK(*coll(P::S(1), P::R()).collective == K::all_gather);
  CHECK(*coll(P::S(1), P::S(2)).collective == K::all_to_all);
  CHECK(!coll(P::R(), P::S(1)).collective);
  CHECK(coll(P::R(), P::S(1)).local_slice);
  CHECK(!coll(P::S(-1), P::S(2)).collective);
  CHECK(!coll(P::S(-1), P::S(2)).local_slice);
  CHECK_THROWS_AS(coll(P::R(), P::P()), Error);
  // Backward: S(1) -> R forward; the gradient of R arrives P and goes back to S(1): a reduce-scatter.
  CHECK(gradient_target(P::S(1)) == P::S(1));
  CHECK(*coll(P::P(), gradient_target(P::S(1))).collective == K::reduce_scatter);
  // P -> S(1) forward: the gradient arrives S(1) and goes to R (a P source takes R): an all-gather.
  CHECK(*coll(P::S(1), gradient_target(P::P())).collective == K::all_gather);
  // P -> R forward: the gradient arrives R, goes to R: nothing.
  CHECK(!coll(P::R(), gradient_target(P::P())).collective);
}

TEST_CASE("collective bytes are the full tensor's size, as nccl-tests counts them") {
  // [1, 8192, 4096] bf16: 8192 * 4096 * 2 = 67,108,864 whatever the sharding.
  CHECK(collective_bytes({1, 8192, 4096}, 2) == 67108864);
  Shape local = local_shape({1, 8192, 4096}, P::S(1), 8, "x");
  CHECK(collective_bytes(global_shape(local, P::S(1), 8, "x"), 2) == 67108864);
}
