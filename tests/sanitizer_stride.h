#pragma once
// Exhaustive loops over whole example spaces (every candidate lowered several ways) take seconds in a Release build
// and minutes under ASan (cmake/sanitizers.cmake), past ctest's 300 s limit on 2 cores. Under ASan they check every
// kSanitizerStride-th candidate instead, and leave out the largest example spaces (the 405B ones: 1080 candidates, 4320
// with HSDP) where a smaller one exercises the same code; Release builds check all of them.

namespace tptune::test {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr int kSanitizerStride = 8;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr int kSanitizerStride = 8;
#else
inline constexpr int kSanitizerStride = 1;
#endif
#else
inline constexpr int kSanitizerStride = 1;
#endif

inline constexpr bool kSanitized = kSanitizerStride > 1;

}  // namespace tptune::test
