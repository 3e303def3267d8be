// Storage names and sizes, and the checked fp32 view of a DevPtr (runtime/backend.h).
#include "runtime/backend.h"

#include <fmt/format.h>

#include "plans/enum_names.h"
#include "plans/error.h"

namespace tptune {

int storage_bytes(Storage s) {
  switch (s) {
    case Storage::f32:
    case Storage::i32:
      return 4;
    case Storage::bf16:
      return 2;
    case Storage::fp8_e4m3:
    case Storage::fp8_e5m2:
      return 1;
  }
  return 4;
}

// Storage's enumerators, in declaration order.
constexpr std::string_view kStorageNames[] = {"f32", "bf16", "fp8_e4m3", "fp8_e5m2", "i32"};
static_assert(std::size(kStorageNames) == enum_count(Storage::i32));

std::string_view to_string(Storage s) { return name_of(kStorageNames, s); }

float* DevPtr::f32(const char* what) const {
  if (storage != Storage::f32)
    throw Error(fmt::format("{}: expected an f32 tensor, got {} storage", what, to_string(storage)));
  return static_cast<float*>(ptr);
}

}  // namespace tptune
