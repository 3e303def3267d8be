#include "tools/tp_run/backend.h"

#include <fmt/format.h>

#include "plans/util/error.h"
#include "runtime/cpu/cpu_backend.h"
#include "tools/tp_run/watchdog.h"
#ifdef TPTUNE_HAVE_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

namespace tptune::tools {

void add_backend_option(CLI::App* cmd, std::string& backend) {
  cmd->add_option("--backend", backend,
                  "auto | cpu | cuda (default auto: cuda when this build has CUDA and a GPU is visible, else cpu)");
}

BackendChoice choose_backend(const std::string& requested) {
  if (requested != "auto" && requested != "cpu" && requested != "cuda")
    throw Error(fmt::format("--backend: expected auto, cpu or cuda, got '{}'", requested));
  if (requested == "cpu") return {"cpu", "asked for with --backend cpu"};
#ifdef TPTUNE_HAVE_CUDA
  const std::string missing = cuda_unavailable_reason();
  if (missing.empty())
    return {"cuda", requested == "cuda"
                        ? "asked for with --backend cuda"
                        : fmt::format("{} GPU(s) visible and this build has CUDA", cuda_device_count())};
  if (requested == "cuda") throw Error(fmt::format("--backend cuda: {}", missing));
  return {"cpu", missing};  // "backend: cpu (no GPU visible)"
#else
  if (requested == "cuda")
    throw Error("--backend cuda: this build has no CUDA backend (configure with the CUDA toolkit, TPTUNE_CUDA=ON)");
  return {"cpu", "this build has no CUDA backend"};
#endif
}

std::unique_ptr<Backend> make_backend(const BackendChoice& choice, MPI_Comm tp, int device, double timeout_s,
                                      MPI_Comm cp, MPI_Comm pp, MPI_Comm ep, MPI_Comm efsdp) {
#ifdef TPTUNE_HAVE_CUDA
  if (choice.name == "cuda") {
    if (cp != MPI_COMM_NULL)
      throw Error(
          "context parallelism runs on the CPU backend only (ring attention has no CUDA kernels): --backend cpu");
    if (pp != MPI_COMM_NULL)
      throw Error("pipeline parallelism runs on the CPU backend only (no CUDA pipeline transfers): --backend cpu");
    if (ep != MPI_COMM_NULL)
      throw Error("expert parallelism runs on the CPU backend only (no CUDA all-to-all dispatch): --backend cpu");
    // One process per GPU: the local rank's device, or the only visible one (srun --gpus-per-task=1 and
    // CUDA_VISIBLE_DEVICES per rank leave each process one GPU, device 0).
    if (cuda_device_count() == 1) device = 0;
    // Its NCCL communicator's set-up broadcasts the unique id with a blocking MPI_Bcast: under the watchdog.
    const WatchdogScope watch("setting up the CUDA backend (NCCL's unique id, broadcast from rank 0)");
    auto be = std::make_unique<CudaBackend>(tp, MPI_COMM_NULL, device);
    be->set_timeout(timeout_s);
    return be;
  }
#else
  (void)choice;  // without the CUDA backend every choice is the CPU
  (void)device;
#endif
  auto be = std::make_unique<CpuBackend>(tp, cp, cp, pp);
  be->set_timeout(timeout_s);
  be->set_expert_groups(ep, efsdp);
  return be;
}

MeshComms::MeshComms(int tp, int cp, int pp, int ep) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (ep > 1) {
    const WatchdogScope watch("MPI_Comm_split (the expert-parallel groups, collective over every rank)");
    MPI_Comm_split(MPI_COMM_WORLD, rank / ep, rank, &ep_);
    if (tp / ep > 1) MPI_Comm_split(MPI_COMM_WORLD, rank / tp * ep + rank % ep, rank, &efsdp_);
  }
  if (cp <= 1 && pp <= 1) return;
  const WatchdogScope watch("MPI_Comm_split (the TP, CP and PP groups of the mesh, collective over every rank)");
  MPI_Comm_split(MPI_COMM_WORLD, rank / tp, rank, &tp_);
  if (cp > 1) MPI_Comm_split(MPI_COMM_WORLD, rank / (tp * cp) * tp + rank % tp, rank, &cp_);
  if (pp > 1) MPI_Comm_split(MPI_COMM_WORLD, rank % (tp * cp), rank, &pp_);
  pp_rank_ = rank / (tp * cp);
  owned_ = true;
}

MeshComms::~MeshComms() {
  if (ep_ != MPI_COMM_NULL) MPI_Comm_free(&ep_);
  if (efsdp_ != MPI_COMM_NULL) MPI_Comm_free(&efsdp_);
  if (!owned_) return;
  MPI_Comm_free(&tp_);
  if (cp_ != MPI_COMM_NULL) MPI_Comm_free(&cp_);
  if (pp_ != MPI_COMM_NULL) MPI_Comm_free(&pp_);
}

}  // namespace tptune::tools
