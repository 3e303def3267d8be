// The table of named cost parameters (sim/cost/cost_param_fields.h) against the struct (sim/cost/cost_params.h): both
// come from sim/cost/cost_param_list.h, and each TPTUNE_COST_PARAM line must be the table row of its name, in list
// order, wired to the member of that name (a value set by name is read back from that member and from nowhere else).

#include "sim/cost/cost_param_fields.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>

#include "plans/util/error.h"
#include "sim/cost/cost_params.h"

using namespace tptune;

namespace {

// A value in [lo, hi] other than `dflt`: integral for integral fields.
double other_value(double dflt, double lo, double hi, bool integral) {
  if (integral) return dflt != lo ? lo : hi;
  const double v = lo + (hi - lo) * 0.37;
  return v != dflt ? v : lo + (hi - lo) * 0.61;
}

// Checks the list line `name` (member `m`, range [lo, hi]) against the table row at `index`.
template <class T>
void check_param(std::string_view name, T CostParams::*m, double lo, double hi, size_t index) {
  INFO(name);
  const auto& fields = cost_param_fields();
  const CostParamField* f = find_cost_param(name);
  REQUIRE(f != nullptr);
  REQUIRE(index < fields.size());
  CHECK(&fields[index] == f);  // the table keeps the list's order
  CHECK(f->lo == lo);
  CHECK(f->hi == hi);
  CHECK(f->integral == !std::is_floating_point_v<T>);
  const CostParams dflt;
  CHECK(f->get(dflt) == static_cast<double>(dflt.*m));

  // Set by name: the member of that name takes the value, every other field keeps its default.
  const double v = other_value(f->get(dflt), lo, hi, f->integral);
  REQUIRE(v != f->get(dflt));
  CostParams c;
  set_cost_param(c, name, v, "test");
  CHECK(static_cast<double>(c.*m) == v);
  CHECK(f->get(c) == v);
  for (const CostParamField& g : fields)
    if (&g != f) CHECK(g.get(c) == g.get(dflt));

  // Out of range, and a fraction for an integral field, are refused and leave the field as it was.
  CHECK_THROWS_AS(set_cost_param(c, name, hi + std::max(1.0, hi), "test"), Error);
  if (f->integral && lo + 1 <= hi) CHECK_THROWS_AS(set_cost_param(c, name, lo + 0.5, "test"), Error);
  CHECK(f->get(c) == v);
}

}  // namespace

TEST_CASE("cost parameters: every table row is the struct member of its name, in list order, and round-trips") {
  size_t listed = 0;
  std::set<std::string_view> names;
#define TPTUNE_COST_PARAM(type, name, value, lo, hi)             \
  check_param<type>(#name, &CostParams::name, lo, hi, listed++); \
  CHECK(names.insert(#name).second)
#define TPTUNE_COST_FIELD(type, name, ...) CHECK(find_cost_param(#name) == nullptr)
#include "sim/cost/cost_param_list.h"
#undef TPTUNE_COST_PARAM
#undef TPTUNE_COST_FIELD
  CHECK(listed == cost_param_fields().size());
  CHECK(listed > 40);
}
