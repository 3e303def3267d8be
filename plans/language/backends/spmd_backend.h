#pragma once
// torchtitan 0.3's `parallelism.spmd_backend`, as a plan or config key. tptune models the default backend,
// `spmd_types` (the one plans/language/presets.cc's torchtitan-0.3 sharding and the lowering follow, checked op for op
// against torchtitan's own code on a fake process group). The other values issue other collectives (partial_dtensor:
// DTensor on the model-parallel axes, whose vanilla backward has per layer 4 all-gathers and 3-5 reduce-scatters and an
// embedding all-reduce; full_dtensor likewise), which tptune does not model, so they are refused by name:
//   plan.yaml:4: spmd_backend: 'partial_dtensor' is not modelled: tptune models torchtitan 0.3's spmd_types backend
//   (partial_dtensor and full_dtensor issue other collectives); remove the key or set spmd_types

#include <string_view>

#include "plans/util/yaml_util.h"

namespace tptune {

// Reads `node` (the key `key`, e.g. "spmd_backend" or "training.spmd_backend"): spmd_types is accepted (it changes
// nothing), partial_dtensor and full_dtensor are refused as above, anything else is "expected one of ...".
void read_spmd_backend(const yaml::YamlDoc& doc, const YAML::Node& node, std::string_view key);

}  // namespace tptune
