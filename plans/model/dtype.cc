#include "plans/model/dtype.h"

#include <fmt/format.h>

#include "plans/util/enum_names.h"
#include "plans/util/error.h"

namespace tptune {

bool is_float8(DType t) { return t == DType::fp8_e4m3 || t == DType::fp8_e5m2; }

// DType's enumerators, in declaration order.
constexpr std::string_view kDTypeNames[] = {"bf16", "fp16", "fp32", "fp8_e4m3", "fp8_e5m2"};
static_assert(std::size(kDTypeNames) == enum_count(DType::fp8_e5m2));

std::string_view to_string(DType t) { return name_of(kDTypeNames, t); }

DType parse_dtype(std::string_view name, const std::string& where) {
  return parse_name<DType>(kDTypeNames, name, where);
}

}  // namespace tptune
