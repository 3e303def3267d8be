#include "tools/tp_run/memory.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "plans/util/checked_math.h"
#include "plans/util/error.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/executor.h"

namespace tptune::tools {
namespace {

constexpr double kGiB = 1073741824.0;

// The first line of a small system file ("max", "4294967296"); empty when it cannot be read.
std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  return line;
}

// A non-negative decimal integer, or -1.
int64_t parse_bytes(const std::string& s) {
  if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(s);
}

// MemAvailable of /proc/meminfo in bytes, or -1.
int64_t mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  int64_t kb = -1;
  for (int lines = 0; lines < 200 && in >> key; ++lines) {
    if (key == "MemAvailable:") {
      if (in >> kb >> unit && unit == "kB" && kb >= 0 && kb < (int64_t{1} << 50)) return kb * 1024;
      return -1;
    }
    std::getline(in, unit);
  }
  return -1;
}

}  // namespace

HostMemory available_memory() {
  HostMemory m;
  m.bytes = mem_available();
  m.source = "MemAvailable in /proc/meminfo";
  if (m.bytes < 0) {
    const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && pages < (1L << 40)) {
      m.bytes = static_cast<int64_t>(pages) * page;
      m.source = "sysconf(_SC_AVPHYS_PAGES)";
    }
  }
  // A cgroup limit below that (a container, a Slurm job): v2, then v1 ("max" or a huge number: no limit).
  struct Limit {
    const char *max, *current, *source;
  };
  for (const Limit& l :
       {Limit{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current",
              "the cgroup's memory.max less memory.current"},
        Limit{"/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes",
              "the cgroup's memory.limit_in_bytes less memory.usage_in_bytes"}}) {
    const int64_t limit = parse_bytes(first_line(l.max)), used = parse_bytes(first_line(l.current));
    if (limit < 0 || used < 0 || limit >= (int64_t{1} << 60)) continue;
    const int64_t left = std::max<int64_t>(0, limit - used);
    if (m.bytes < 0 || left < m.bytes) m = {left, l.source};
    break;
  }
  return m;
}

void check_fits_in_memory(const World& w, const std::vector<StepProgram>& programs, const std::string& command,
                          const std::string& hint) {
  const HostMemory avail = available_memory();
  if (avail.bytes < 0) return;
  const CpuBackend cpu;  // its storage_for: fp32 for every tensor
  const auto storage = [&cpu](DType t) { return cpu.storage_for(t); };
  int64_t per_rank = 0, largest_param = 0;
  std::vector<std::string> parts;
  for (const StepProgram& p : programs) {
    const int64_t b = executor_buffer_bytes(*p.program, storage);
    per_rank = checked_add(per_rank, b, "bytes of the step's memory");
    parts.push_back(fmt::format("{} {:.1f} GiB", p.what, b / kGiB));
    for (const TensorDesc& d : p.program->tensors)
      if (d.role == TensorRole::parameter) largest_param = std::max(largest_param, numel(d.global_shape));
  }
  const int64_t transient = checked_mul({3, largest_param, 4}, "bytes of the transient full tensors");
  per_rank = checked_add(per_rank, transient, "bytes of the step's memory");
  parts.push_back(fmt::format("transient full tensors {:.1f} GiB", transient / kGiB));
  const int64_t on_host = checked_mul(per_rank, w.local_size, "bytes of the step's memory on this host");
  if (on_host <= avail.bytes) return;
  throw Error(
      fmt::format("{} needs at least {:.1f} GiB of memory on this host ({} rank{} x {:.1f} GiB: {}), but {:.1f} GiB is "
                  "available ({}): {}",
                  command, on_host / kGiB, w.local_size, w.local_size == 1 ? "" : "s", per_rank / kGiB,
                  fmt::join(parts, ", "), avail.bytes / kGiB, avail.source, hint));
}

}  // namespace tptune::tools
