// Host-side (no device needed, so not [cuda]): a group of one rank never creates an NCCL communicator. Single-process
// runs (tp-run verify / profile at tp 1, every profile of bench/gpu-check.sh) passed MPI_COMM_WORLD of one rank for
// the tp and dp groups, and each NcclComm bootstrapped NCCL (ncclGetUniqueId + ncclCommInitRank, a second or more
// each) for collectives that are local copies anyway.
#include <mpi.h>

#include <catch2/catch.hpp>
#include <cstdlib>

#include "runtime/cuda/nccl_comm.h"

TEST_CASE("NcclComm of a one-rank MPI communicator calls no NCCL and has no communicator", "[runtime][nccl]") {
  // A singleton MPI process, as tp-run without mpirun (bench/gpu-check.sh sets the same variables).
  setenv("OMPI_MCA_ess_singleton_isolated", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) MPI_Init(nullptr, nullptr);
  {
    // Without a GPU (this build machine), ncclCommInitRank would throw ("cuda backend: nccl tp: ..."); with one it
    // would bootstrap a communicator. Either way the one-rank group must not get that far.
    tptune::cudabe::NcclComm comm(MPI_COMM_SELF, "tp");
    CHECK(comm.get() == nullptr);
    CHECK(comm.size() == 1);
    CHECK(comm.rank() == 0);
    comm.abort();  // a no-op without a communicator (the watchdog calls it on every group)
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();  // ctest runs each test case in a process of its own
}
