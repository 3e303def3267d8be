#pragma once
// The `source:` block of a kernel record file (sim/calibrate/kernel_record.h) for tests, with the given id, ending in
// "measurements:\n": 7 lines, so the first measurement a test appends is on line 8.

#include <string>

namespace tptune::test {

inline std::string kernel_source_header(const std::string& id) {
  return "source:\n  id: " + id + R"yaml(
  citation: "a test"
  repository: stas00/ml-engineering
  path: compute/accelerator/README.md
  commit: 744d01e18b79512572f64a6bbd8b5f4a725203a7
measurements:
)yaml";
}

}  // namespace tptune::test
