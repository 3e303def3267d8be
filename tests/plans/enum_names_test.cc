// Every enum printed or parsed through a name table (plans/util/enum_names.h) has a complete table: each enumerator has
// a name of its own, the value past the last one has none ("?"), and the parsable ones read back what they print.
#include "plans/util/enum_names.h"

#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "../error_text.h"
#include "plans/language/config.h"
#include "plans/language/placement.h"
#include "plans/language/plan.h"
#include "plans/model/dtype.h"
#include "plans/model/model.h"
#include "plans/program/program.h"
#include "plans/program/segment_kind.h"

using namespace tptune;

namespace {

// `last` is the enum's last enumerator (declaration order): the table must name 0..last and nothing after.
template <typename E>
std::set<std::string> check_complete(E last) {
  const int count = static_cast<int>(last) + 1;
  std::set<std::string> names;
  for (int i = 0; i < count; ++i) {
    const std::string name(to_string(static_cast<E>(i)));
    INFO("enumerator " << i << " is named '" << name << "'");
    CHECK(name != "?");
    CHECK(names.insert(name).second);  // distinct
  }
  CHECK(to_string(static_cast<E>(count)) == "?");
  return names;
}

template <typename E, typename Parse>
void check_round_trip(E last, Parse parse) {
  for (int i = 0; i <= static_cast<int>(last); ++i) {
    const E e = static_cast<E>(i);
    CHECK(parse(to_string(e), "k") == e);
  }
}

}  // namespace

TEST_CASE("enum name tables name every enumerator once", "[enum_names]") {
  check_complete(ActivationCheckpointing::full);
  check_complete(Float8Recipe::rowwise_with_gw_hp);
  check_complete(Objective::cost_per_token);
  check_complete(DType::fp8_e5m2);
  check_complete(Mlp::gelu);
  check_complete(Norm::layernorm);
  check_complete(CollectiveKind::p2p);
  check_complete(Framework::torchtitan_0_3);
  check_complete(StyleKind::no_parallel);
  check_complete(Phase::optimizer);
  check_complete(Group::efsdp);
  check_complete(ElementwiseOp::Fn::moe_bias_update);
  check_complete(CpRotate::alltoall);
  check_complete(CrossEntropyOp::Stage::backward);
  check_complete(SegmentKind::optimizer);
}

TEST_CASE("parsable enums read back what they print", "[enum_names]") {
  check_round_trip(ActivationCheckpointing::full, parse_activation_checkpointing);
  check_round_trip(Float8Recipe::rowwise_with_gw_hp, parse_float8);
  check_round_trip(Framework::torchtitan_0_3, parse_framework);
  check_round_trip(DType::fp8_e5m2, parse_dtype);
  check_round_trip(CpRotate::alltoall, parse_cp_rotate);
}

TEST_CASE("an unknown name is refused with the list of names", "[enum_names]") {
  // The message lists the table's names in declaration order: none, selective, full.
  CHECK(test::error_of([] { parse_activation_checkpointing("some", "plan.yaml:3: activation_checkpointing"); }) ==
        "plan.yaml:3: activation_checkpointing: expected one of none, selective, full, got 'some'");
  CHECK(test::error_of([] { parse_framework("torchtitan", "f"); }) ==
        "f: expected one of dtensor, torchtitan-0.3, got 'torchtitan'");
}

TEST_CASE("an unknown name with line breaks is echoed on one line", "[enum_names]") {
  // The fuzzer's finding tests/fuzz/findings/plan/multiline-enum-echo: a quoted "\n" in the value reached the message
  // raw. The name is echoed through yaml::shown(): the line break as the two characters \n.
  CHECK(test::error_of([] { parse_activation_checkpointing("full\nx", "plan.yaml:3: activation_checkpointing"); }) ==
        "plan.yaml:3: activation_checkpointing: expected one of none, selective, full, got 'full\\nx'");
}

TEST_CASE("an error message is one line whatever a site echoes", "[enum_names]") {
  // tptune::Error itself escapes line breaks (plans/util/error.h), the last guard behind yaml::shown().
  CHECK(std::string(Error("a.yaml:1: got 'x\ny\rz'").what()) == "a.yaml:1: got 'x\\ny\\rz'");
}
