#include "plans/language/config_record.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>

#include "plans/util/input_file.h"
#include "plans/util/yaml_util.h"

namespace tptune {

RecordedConfig record_config(const std::string& config_path, const std::string& hf_config_option, const Config& cfg) {
  RecordedConfig out;
  const std::string text = yaml::read_file(config_path, "config");
  YAML::Node root = yaml::parse(text, config_path);
  const yaml::YamlDoc doc(config_path);
  bool replaced = false;

  // training.compile: the file's value (absent: unset) against the one the run used.
  std::optional<bool> stated;
  if (root["training"] && root["training"]["compile"])
    stated = doc.boolean(root["training"]["compile"], "training.compile");
  if (stated != cfg.training.compile) {
    if (cfg.training.compile)
      root["training"]["compile"] = *cfg.training.compile;
    else
      root["training"].remove("compile");
    replaced = true;
  }

  // The transformers config the model came from: the option's, else the file's model.hf_config (relative to it).
  std::string hf_path = hf_config_option;
  if (!hf_config_option.empty()) {
    root["model"] = YAML::Node(YAML::NodeType::Map);
    root["model"]["hf_config"] = hf_config_option;
    replaced = true;
  } else if (root["model"] && root["model"].IsMap() && root["model"]["hf_config"]) {
    const std::filesystem::path p(doc.string(root["model"]["hf_config"], "model.hf_config"));
    hf_path = (p.is_absolute() ? p : std::filesystem::path(config_path).parent_path() / p).string();
  }
  if (!hf_path.empty()) out.hf_config_json = read_input_file(hf_path, "transformers config.json");

  if (!replaced) {
    out.yaml = text;
    return out;
  }
  YAML::Emitter e;
  e << root;
  out.yaml = std::string(e.c_str()) + "\n";
  return out;
}

}  // namespace tptune
