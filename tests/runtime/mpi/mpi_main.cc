// Catch2 main for tests that run under mpirun: every rank runs every test case; the process exits non-zero when
// any rank saw a failure. Tests use CHECK (not REQUIRE) around collectives, so that a failing rank still takes part
// in the collectives its peers wait on.
#define CATCH_CONFIG_RUNNER
#include <mpi.h>

#include <catch2/catch.hpp>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int result = Catch::Session().run(argc, argv);
  int failed = result != 0, any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any ? 1 : 0;
}
