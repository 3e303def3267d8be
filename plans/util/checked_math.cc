#include "plans/util/checked_math.h"

#include <fmt/format.h>

#include <climits>

#include "plans/util/error.h"

namespace tptune {

int64_t checked_mul(int64_t a, int64_t b, std::string_view what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw Error(fmt::format("{}: {} x {} overflows 64-bit integers", what, a, b));
  return r;
}

int64_t checked_mul(std::initializer_list<int64_t> factors, std::string_view what) {
  int64_t r = 1;
  bool overflow = false;
  for (int64_t f : factors) overflow = overflow || __builtin_mul_overflow(r, f, &r);
  if (overflow) throw Error(fmt::format("{}: {} overflows 64-bit integers", what, fmt::join(factors, " x ")));
  return r;
}

int64_t checked_add(int64_t a, int64_t b, std::string_view what) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) throw Error(fmt::format("{}: {} + {} overflows 64-bit integers", what, a, b));
  return r;
}

int checked_int(int64_t v, std::string_view what) {
  if (v < INT_MIN || v > INT_MAX) throw Error(fmt::format("{}: {} does not fit a 32-bit int", what, v));
  return static_cast<int>(v);
}

}  // namespace tptune
