#pragma once
// The GPU preset files of sim/gpus/, embedded into the library at build time (see sim/CMakeLists.txt). Internal to
// sim/: use gpu_preset() / gpu_preset_names() in sim/gpu_spec.h.
#include <string_view>
#include <vector>

namespace tptune {

struct EmbeddedPreset {
  std::string_view name;  // file name without .yaml: "h100-sxm"
  std::string_view path;  // "sim/gpus/h100-sxm.yaml", for errors
  std::string_view text;  // the file's contents
};
const std::vector<EmbeddedPreset>& embedded_gpu_presets();

}  // namespace tptune
