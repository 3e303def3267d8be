#include "sim/cost/cost_param_fields.h"

#include <fmt/format.h>

#include <cmath>
#include <type_traits>

#include "plans/util/error.h"
#include "plans/util/yaml_util.h"

namespace tptune {

namespace {

// The table row of one TPTUNE_COST_PARAM: its name, range, and accessors of the member; int and bool fields are
// integral (set from a value already checked to be a whole number in range).
template <class T, T CostParams::*field>
CostParamField row(std::string_view name, double lo, double hi) {
  return CostParamField{name,
                        lo,
                        hi,
                        [](const CostParams& c) { return static_cast<double>(c.*field); },
                        [](CostParams& c, double v) { c.*field = static_cast<T>(v); },
                        !std::is_floating_point_v<T>};
}

}  // namespace

const std::vector<CostParamField>& cost_param_fields() {
  static const std::vector<CostParamField> fields = [] {
    std::vector<CostParamField> f;
#define TPTUNE_COST_PARAM(type, name, value, lo, hi) f.push_back(row<type, &CostParams::name>(#name, lo, hi))
#define TPTUNE_COST_FIELD(type, name, ...)
#include "sim/cost/cost_param_list.h"
#undef TPTUNE_COST_PARAM
#undef TPTUNE_COST_FIELD
    return f;
  }();
  return fields;
}

const CostParamField* find_cost_param(std::string_view name) {
  for (const auto& f : cost_param_fields())
    if (f.name == name) return &f;
  return nullptr;
}

void set_cost_param(CostParams& c, std::string_view name, double value, const std::string& where) {
  const CostParamField* f = find_cost_param(name);
  if (!f) {
    std::vector<std::string_view> names;
    for (const auto& g : cost_param_fields()) names.push_back(g.name);
    throw Error(
        fmt::format("{}: {}: unknown cost parameter (known: {})", where, yaml::shown(name), fmt::join(names, ", ")));
  }
  if (!std::isfinite(value) || value < f->lo || value > f->hi || (f->integral && value != std::floor(value)))
    throw Error(fmt::format("{}: {}: expected {} in [{}, {}], got {}", where, name,
                            f->integral ? "an integer" : "a number", f->lo, f->hi, value));
  f->set(c, value);
}

CostParams device_cost_params(const GpuSpec& gpu) {
  CostParams c = default_cost_params();
  for (const auto& [name, value] : gpu.cost_params) set_cost_param(c, name, value, gpu.origin);
  return c;
}

}  // namespace tptune
