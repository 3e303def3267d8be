#pragma once
// Element types of tensors in the Program IR, with their canonical names (`bf16`, `fp8_e4m3`, ...) and sizes.

#include <cstdint>
#include <string>
#include <string_view>

namespace tptune {

enum class DType { bf16, fp16, fp32, fp8_e4m3, fp8_e5m2 };

// Bytes per element: bf16/fp16 2, fp32 4, both float8 formats 1. (Inline: the cost and memory models ask it for every
// tensor of every Program the search models.)
inline int bytes_per_element(DType t) {
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
bool is_float8(DType t);
std::string_view to_string(DType t);
// Parses a canonical name; throws tptune::Error naming `where` (e.g. "config.yaml:7: training.dtype").
DType parse_dtype(std::string_view name, const std::string& where);

}  // namespace tptune
