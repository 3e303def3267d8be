#pragma once
// `tp-run verify|profile|bench --backend auto|cpu|cuda`: which Backend runs the Program, and why.
//
// auto (the default) picks cuda when this build has the CUDA backend (TPTUNE_HAVE_CUDA) and a GPU is visible, else
// cpu; the reason is printed ("backend: cpu (this build has no CUDA backend)", "backend: cpu (no GPU visible)" on a
// machine without a GPU: runtime/cuda/cuda_backend.h cuda_unavailable_reason()). An explicit `cuda` without either is
// an error saying which is missing. On cuda every process uses the GPU of its local rank (one process per GPU), or
// the only GPU it sees (one GPU per task).

#include <mpi.h>

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "runtime/backend.h"

namespace tptune::tools {

struct BackendChoice {
  std::string name;  // "cpu" | "cuda"
  std::string why;   // one line for the output
};

void add_backend_option(CLI::App* cmd, std::string& backend);
// Throws tptune::Error for an unknown name, or cuda where it cannot run.
BackendChoice choose_backend(const std::string& requested);
// The backend over `tp` (MPI_COMM_NULL: this process alone), on GPU `device` for cuda; `timeout_s` is the
// collectives' watchdog (0: none).
std::unique_ptr<Backend> make_backend(const BackendChoice& choice, MPI_Comm tp, int device, double timeout_s);

}  // namespace tptune::tools
