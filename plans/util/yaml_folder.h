#pragma once
// A folder of YAML files as one input (the public record's profiles/published, the kernel-level record's
// profiles/kernels): its *.yaml files, sorted by name so that reading them is repeatable.

#include <string>
#include <string_view>
#include <vector>

namespace tptune {

// The *.yaml files directly in `dir`, sorted. One-line errors (tptune::Error): "<dir>: no such folder (expected
// <folder_what>)", "<dir>: cannot list the folder: <why>", "<dir>: no *.yaml files (expected <files_what>)".
std::vector<std::string> yaml_files_of(const std::string& dir, std::string_view folder_what,
                                       std::string_view files_what);

}  // namespace tptune
