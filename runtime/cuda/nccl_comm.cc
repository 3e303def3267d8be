#include "runtime/cuda/nccl_comm.h"

#include <fmt/format.h>

#include "plans/util/error.h"
#include "runtime/cuda/cuda_check.h"

namespace tptune::cudabe {

NcclComm::NcclComm(MPI_Comm mpi, const std::string& name) : name_(name) {
  if (mpi == MPI_COMM_NULL) return;
  MPI_Comm_size(mpi, &size_);
  MPI_Comm_rank(mpi, &rank_);
  // One rank: no communicator (its collectives are local copies). Creating one would cost a second or more of
  // NCCL bootstrap per group and process for nothing, in every single-process verify and profile.
  if (size_ == 1) return;
  const std::string where = "nccl " + name;
  ncclUniqueId id{};
  if (rank_ == 0) check(ncclGetUniqueId(&id), where.c_str(), "ncclGetUniqueId");
  if (MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, mpi) != MPI_SUCCESS)
    throw Error(fmt::format("cuda backend: {}: MPI_Bcast of the NCCL unique id failed", where));
  check(ncclCommInitRank(&comm_, size_, id, rank_), where.c_str(), "ncclCommInitRank");
}

void NcclComm::abort() {
  if (comm_) ncclCommAbort(comm_);
  comm_ = nullptr;
}

NcclComm::~NcclComm() {
  if (comm_) ncclCommDestroy(comm_);
}

}  // namespace tptune::cudabe
