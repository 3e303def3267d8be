#pragma once
// The config a run records beside its results (tp-run profile's program.config_yaml and program.hf_config_json,
// plans/program/profile_format.h), so that a reader (tp-plan accuracy, calibrate, simulate --measured) lowers the
// very Program that ran:
//   - the config file's text, verbatim, unless an option replaced one of its values; then the file's YAML with the
//     option's value in place (comments and layout are lost, the values are not): --compile / --no-compile set
//     training.compile, --hf-config sets model to {hf_config: <the option's path>};
//   - the transformers config.json the model was read from (--hf-config, or the file's model.hf_config), as text:
//     the reader takes the model from it (load_config_string's hf_config_text), not from a path that need not exist
//     where the profile is read.

#include <optional>
#include <string>

#include "plans/language/config.h"

namespace tptune {

struct RecordedConfig {
  std::string yaml;
  std::optional<std::string> hf_config_json;
};

// `config_path`: the config file the run read; `hf_config_option`: the --hf-config path ("" for none); `cfg`: the
// config as the run used it (after the options). Throws tptune::Error naming a file that cannot be read.
RecordedConfig record_config(const std::string& config_path, const std::string& hf_config_option, const Config& cfg);

}  // namespace tptune
