#pragma once
// The world as a two-dimensional mesh [outer, tp] for the multi-rank tests (tp innermost, as tools/tp_run/backend.h's
// MeshComms lays out [pp, cp, tp]): world rank r is tp rank r % tp of outer rank r / tp. `outer` is the cp or the pp
// group: the ranks of one tp rank.
#include <mpi.h>

namespace tptune::test {

inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

struct Mesh {
  MPI_Comm tp = MPI_COMM_NULL, outer = MPI_COMM_NULL;
  int outer_rank = 0;
  explicit Mesh(int tp_degree) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_split(MPI_COMM_WORLD, rank / tp_degree, rank, &tp);
    MPI_Comm_split(MPI_COMM_WORLD, rank % tp_degree, rank, &outer);
    outer_rank = rank / tp_degree;
  }
  ~Mesh() {
    MPI_Comm_free(&tp);
    MPI_Comm_free(&outer);
  }
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;
};

}  // namespace tptune::test
