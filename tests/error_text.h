#pragma once
// For tests of bad input: the one-line message of the tptune::Error a call throws, or "(no error)" when it throws
// none, so that a test compares the whole message (file:line, key, what was expected) with one CHECK.

#include <functional>
#include <string>

#include "plans/util/error.h"

namespace tptune::test {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace tptune::test
