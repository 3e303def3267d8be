#pragma once
// Does the step fit in this host's memory? Checked before anything is allocated, so that `tp-run verify` of a
// full-size model (examples/llama3-8b-h100.yaml without --shrink) is refused in a second with the numbers instead of
// being killed by the OS minutes later.
//
// Estimate per rank (CPU backend: every tensor in fp32, runtime/backend.h):
//   the Executor's buffers of each Program the rank runs (runtime/executor.h executor_buffer_bytes: parameters,
//   gradients, AdamW moments, every layer's activations; a lower bound, collectives' staging not counted)
//   + transient full tensors: 3 x the largest full parameter in fp32 (Executor::init builds each full parameter
//     before keeping its shard; verify holds a gathered gradient, its assembled copy and the reference's at once).
// On the host: per rank x the ranks on this node (MPI_COMM_TYPE_SHARED). Available: MemAvailable of /proc/meminfo
// (sysconf's free pages where there is none), lowered to the cgroup's limit minus its usage when the process runs
// under one (containers, Slurm).
//
//   tp-run: error: verify needs at least 262.1 GiB of memory on this host (1 rank x 262.1 GiB: ...), but
//   21.4 GiB is available (MemAvailable in /proc/meminfo): verify the plan on a scaled-down model with --shrink

#include <cstdint>
#include <string>
#include <vector>

#include "plans/program/program.h"
#include "tools/tp_run/session.h"

namespace tptune::tools {

struct HostMemory {
  int64_t bytes = -1;  // -1: unknown
  std::string source;  // "MemAvailable in /proc/meminfo", "the cgroup's memory.max less memory.current", ...
};
HostMemory available_memory();

struct StepProgram {
  const Program* program = nullptr;
  std::string what;  // "the sharded step", "the unsharded reference"
};

// Throws tptune::Error (one line: the estimate, its parts, what is available, `hint`) when the estimate for the
// ranks of this node exceeds the available memory. Does nothing when the available memory is unknown. For the CPU
// backend (host memory); a device backend's memory is its own.
void check_fits_in_memory(const World& w, const std::vector<StepProgram>& programs, const std::string& command,
                          const std::string& hint);

}  // namespace tptune::tools
