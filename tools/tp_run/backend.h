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
// collectives' watchdog (0: none). `cp`: the context-parallel group, which is also FSDP's shard group (tp-run runs
// dp_shard 1, so dp_shard x cp is the cp ranks); `pp`: the pipeline group; both CPU only (cuda throws tptune::Error).
// `ep`, `efsdp`: expert parallelism's groups (MeshComms::ep(), efsdp()), CPU only.
std::unique_ptr<Backend> make_backend(const BackendChoice& choice, MPI_Comm tp, int device, double timeout_s,
                                      MPI_Comm cp = MPI_COMM_NULL, MPI_Comm pp = MPI_COMM_NULL,
                                      MPI_Comm ep = MPI_COMM_NULL, MPI_Comm efsdp = MPI_COMM_NULL);

// The mesh [pp, cp, tp] of the MPI world (tp innermost, torchtitan's order): world rank r is tp rank r % tp, cp rank
// r / tp % cp and pp rank r / (tp cp). Collective over the world (MPI_Comm_split under the process watchdog); frees
// its communicators. Expert parallelism (ep > 1, which tp-run runs inside the TP group: ep divides tp): the ep group
// is ep consecutive tp ranks, the experts' FSDP group (efsdp) the tp ranks ep apart (torchtitan's sparse mesh, whose
// innermost axis is ep).
class MeshComms {
 public:
  MeshComms(int tp, int cp, int pp = 1, int ep = 1);
  ~MeshComms();
  MeshComms(const MeshComms&) = delete;
  MeshComms& operator=(const MeshComms&) = delete;
  MPI_Comm tp() const { return tp_; }
  MPI_Comm cp() const { return cp_; }  // MPI_COMM_NULL when cp is 1
  MPI_Comm pp() const { return pp_; }  // MPI_COMM_NULL when pp is 1
  int pp_rank() const { return pp_rank_; }
  MPI_Comm ep() const { return ep_; }        // MPI_COMM_NULL when ep is 1
  MPI_Comm efsdp() const { return efsdp_; }  // MPI_COMM_NULL when ep is 1 or tp / ep is 1

 private:
  MPI_Comm tp_ = MPI_COMM_WORLD, cp_ = MPI_COMM_NULL, pp_ = MPI_COMM_NULL, ep_ = MPI_COMM_NULL, efsdp_ = MPI_COMM_NULL;
  int pp_rank_ = 0;
  bool owned_ = false;
};

}  // namespace tptune::tools
