#include "plans/util/yaml_folder.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "plans/util/error.h"

namespace tptune {

std::vector<std::string> yaml_files_of(const std::string& dir, std::string_view folder_what,
                                       std::string_view files_what) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw Error(fmt::format("{}: no such folder (expected {})", dir, folder_what));
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.path().extension() == ".yaml") files.push_back(e.path().string());
  if (ec) throw Error(fmt::format("{}: cannot list the folder: {}", dir, ec.message()));
  if (files.empty()) throw Error(fmt::format("{}: no *.yaml files (expected {})", dir, files_what));
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace tptune
