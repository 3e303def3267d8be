#pragma once
// A fresh folder under the system's temporary directory for one test, removed with everything in it at the end.

#include <stdlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace tptune::test {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "tptune-test-XXXXXX").string();
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  // The path of `name` in the folder.
  std::string at(const std::string& name) const { return (path / name).string(); }
  // Writes `content` to `name` in the folder; its path.
  std::string file(const std::string& name, const std::string& content) const {
    const std::string p = at(name);
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
  // The names in the folder (a failed write must leave no temporary file behind).
  size_t entries() const { return static_cast<size_t>(std::distance(std::filesystem::directory_iterator(path), {})); }
};

}  // namespace tptune::test
