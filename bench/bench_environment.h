#pragma once
// What every benchmark prints first: CPU, hardware threads, build type (with a warning on a debug
// build), compiler and library versions.
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

namespace tptune::bench {

inline std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

inline void print_environment(const char* bench_name) {
#ifdef NDEBUG
  const char* build = "release (NDEBUG)";
#else
  const char* build = "DEBUG: timings are not representative, build with -DCMAKE_BUILD_TYPE=Release";
#endif
  fmt::print(stderr, "{}: {}, {} hardware threads, build {}\n", bench_name, cpu_model(),
             std::thread::hardware_concurrency(), build);
  fmt::print(stderr, "  compiler {}, fmt {}, nlohmann_json {}.{}.{}\n", __VERSION__, FMT_VERSION,
             NLOHMANN_JSON_VERSION_MAJOR, NLOHMANN_JSON_VERSION_MINOR, NLOHMANN_JSON_VERSION_PATCH);
  fmt::print(stderr,
             "  (a 'Library was built as DEBUG' line below is about the installed Google Benchmark package,\n"
             "   not this code)\n");
#ifndef NDEBUG
  fmt::print(stderr, "WARNING: this is a debug build\n");
#endif
}

}  // namespace tptune::bench
