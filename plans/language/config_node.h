#pragma once
// A config that is one map inside a larger YAML document (a run of the public record, sim/calibrate/
// published_record.h): the config reader of plans/language/config.h on a node, every key checked as in a config file.
// `root` keeps the marks of its document, so that errors name `name` and the line in it; the keys in errors are those
// of a config file ("training.seq_len: ..."), for the caller to prefix with where the map sits.

#include <yaml-cpp/yaml.h>

#include <string>

#include "plans/language/config.h"

namespace tptune {

// `base_dir` resolves relative paths (model.hf_config, search.plans), as the config file's folder does.
Config load_config_node(const YAML::Node& root, const std::string& name, const std::string& base_dir = {});

}  // namespace tptune
