#include "plans/dtype.h"

#include <fmt/format.h>

#include "plans/error.h"

namespace tptune {

int bytes_per_element(DType t) {
  switch (t) {
    case DType::bf16:
    case DType::fp16:
      return 2;
    case DType::fp32:
      return 4;
    case DType::fp8_e4m3:
    case DType::fp8_e5m2:
      return 1;
  }
  return 0;
}

bool is_float8(DType t) { return t == DType::fp8_e4m3 || t == DType::fp8_e5m2; }

std::string_view to_string(DType t) {
  switch (t) {
    case DType::bf16:
      return "bf16";
    case DType::fp16:
      return "fp16";
    case DType::fp32:
      return "fp32";
    case DType::fp8_e4m3:
      return "fp8_e4m3";
    case DType::fp8_e5m2:
      return "fp8_e5m2";
  }
  return "?";
}

DType parse_dtype(std::string_view name, const std::string& where) {
  for (DType t : {DType::bf16, DType::fp16, DType::fp32, DType::fp8_e4m3, DType::fp8_e5m2})
    if (to_string(t) == name) return t;
  throw Error(fmt::format("{}: expected one of bf16, fp16, fp32, fp8_e4m3, fp8_e5m2, got '{}'", where, name));
}

}  // namespace tptune
