#pragma once
// Overflow-checked 64-bit arithmetic for byte, element and FLOP counts formed from user sizes.
//
// A product of user sizes (batch x seq x vocab, 2 x m x n x k, ...) that does not fit int64 is a tptune::Error that
// names what was being computed, never a wrapped value:
//
//   checked_mul({b, s, vocab}, "elements of the logits")
//   -> "elements of the logits: 1000000000000 x 8192 x 128256 overflows 64-bit integers"
//
// Load-time ranges (plans/util/limits.h) keep every single quantity physical; these checks catch their products.

#include <cstdint>
#include <initializer_list>
#include <string_view>

namespace tptune {

// a x b, or Error "<what>: a x b overflows 64-bit integers".
int64_t checked_mul(int64_t a, int64_t b, std::string_view what);
// The product of all factors (1 for none), or Error naming every factor.
int64_t checked_mul(std::initializer_list<int64_t> factors, std::string_view what);
// a + b, or Error "<what>: a + b overflows 64-bit integers".
int64_t checked_add(int64_t a, int64_t b, std::string_view what);
// v as an int, or Error "<what>: v does not fit a 32-bit int".
int checked_int(int64_t v, std::string_view what);

}  // namespace tptune
