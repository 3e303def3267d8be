// Storage names and sizes, and the checked fp32 view of a DevPtr (runtime/backend.h).
#include "runtime/backend.h"

#include <fmt/format.h>

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

std::string_view to_string(Storage s) {
  switch (s) {
    case Storage::f32:
      return "f32";
    case Storage::bf16:
      return "bf16";
    case Storage::fp8_e4m3:
      return "fp8_e4m3";
    case Storage::fp8_e5m2:
      return "fp8_e5m2";
    case Storage::i32:
      return "i32";
  }
  return "?";
}

float* DevPtr::f32(const char* what) const {
  if (storage != Storage::f32)
    throw Error(fmt::format("{}: expected an f32 tensor, got {} storage", what, to_string(storage)));
  return static_cast<float*>(ptr);
}

}  // namespace tptune
