#pragma once
// What every tptune fuzz target asserts about a loader, whatever the bytes it is given:
//
//   - it returns a valid object, or throws tptune::Error with a one-line message of bounded length (the message a
//     user sees after `tp-plan: error:`);
//   - any other exception (std::out_of_range from stoi, yaml-cpp's BadConversion, std::bad_alloc, ...) is a
//     defect: the harness aborts, so libFuzzer records the input as a crash;
//   - a valid object round-trips: write -> read gives an equal object (checked by each target).
// Memory errors and undefined behaviour are caught by ASan and UBSan (-fno-sanitize-recover=undefined).

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "plans/util/error.h"

namespace tptune::fuzz {

// The longest error message accepted: a message echoes at most a short excerpt of the user's text.
inline constexpr size_t kMaxErrorLength = 4096;

[[noreturn]] inline void defect(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz: DEFECT: %s: %.2000s\n", what, detail.c_str());
  std::abort();
}

inline void check_error_message(const std::string& message) {
  if (message.empty()) defect("empty tptune::Error message", "");
  if (message.find('\n') != std::string::npos || message.find('\r') != std::string::npos)
    defect("tptune::Error message spans several lines", message);
  if (message.size() > kMaxErrorLength)
    defect("tptune::Error message too long", std::to_string(message.size()) + " bytes: " + message.substr(0, 300));
}

// Runs `load`, which returns normally for a valid input (and then checks the round trip itself) or throws
// tptune::Error. Anything else aborts.
template <class F>
void expect_clean(F&& load) {
  try {
    load();
  } catch (const tptune::Error& e) {
    check_error_message(e.what());
  } catch (const std::exception& e) {
    defect("exception other than tptune::Error", e.what());
  } catch (...) {
    defect("non-std exception", "");
  }
}

}  // namespace tptune::fuzz
