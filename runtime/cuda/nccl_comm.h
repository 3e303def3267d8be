#pragma once
// One NCCL communicator per Group (tp, dp), bootstrapped over MPI: rank 0 of the group's MPI communicator calls
// ncclGetUniqueId and broadcasts it (MPI_Bcast), then every rank calls ncclCommInitRank on its device (the CUDA
// backend has already set it: one process per GPU, device = local rank). A group of one rank (MPI_COMM_NULL, or an
// MPI communicator of size 1) has no communicator (get() is null; NCCL is not called at all): its collectives are
// local copies.
// Errors name the group and the NCCL call ("cuda backend: nccl tp: ncclCommInitRank: unhandled system error").

#include <mpi.h>
#include <nccl.h>

#include <string>

namespace tptune::cudabe {

class NcclComm {
 public:
  NcclComm() = default;
  NcclComm(MPI_Comm mpi, const std::string& name);  // collective over `mpi`
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t get() const { return comm_; }
  int size() const { return size_; }
  int rank() const { return rank_; }
  const std::string& name() const { return name_; }
  // Ends the communicator's pending operations (watchdog timeout: a peer never joined); the comm is unusable after.
  void abort();

 private:
  ncclComm_t comm_ = nullptr;
  int size_ = 1, rank_ = 0;
  std::string name_;
};

}  // namespace tptune::cudabe
