#include "plans/language/backends/spmd_backend.h"

#include <fmt/format.h>

namespace tptune {

void read_spmd_backend(const yaml::YamlDoc& doc, const YAML::Node& node, std::string_view key) {
  const std::string v = doc.choice(node, key, {"spmd_types", "partial_dtensor", "full_dtensor"});
  if (v == "spmd_types") return;
  doc.fail_msg(node, key,
               fmt::format("'{}' is not modelled: tptune models torchtitan 0.3's spmd_types backend (partial_dtensor "
                           "and full_dtensor issue other collectives); remove the key or set spmd_types",
                           v));
}

}  // namespace tptune
