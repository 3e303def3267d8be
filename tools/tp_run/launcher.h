#pragma once
// Who started this process: mpirun (Open MPI, MPICH/Hydra), srun (Slurm), or nobody. tp-run's ranks come from
// MPI_Init (MPI_Comm_rank/size), whatever the launcher; the launcher's environment serves to
//  * check that MPI sees the world the launcher started: `srun -n 8 tp-run ...` with an MPI library that cannot talk
//    to Slurm's PMI (srun without --mpi=pmix for Open MPI) starts 8 independent singletons of size 1, each of which
//    would otherwise run alone; that is an error naming the fix;
//  * say how to start tp-run in the "not launched" error (mpirun, or srun inside a Slurm allocation);
// The node-local rank (World::local_rank, for a device backend to pick its GPU; the CPU backend needs none) comes from
// MPI_COMM_TYPE_SHARED, which every launcher supports, rather than from these variables.
//
//   Open MPI    OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK
//   MPICH/Hydra PMI_RANK, PMI_SIZE, MPI_LOCALRANKID
//   Slurm srun  SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID   (SLURM_JOB_ID alone: inside an allocation, not srun)

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace tptune::tools {

struct Launch {
  std::string launcher;  // "Open MPI mpirun" | "MPICH mpiexec" | "Slurm srun" | "" (not detected)
  int rank = -1, size = -1, local_rank = -1;
  bool in_slurm_allocation = false;  // SLURM_JOB_ID set
};

inline int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return -1;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return (*end == '\0' && x >= 0 && x < (1L << 24)) ? static_cast<int>(x) : -1;
}

// Reads the environment. Open MPI first (its mpirun inside Slurm also sets SLURM_*), then MPICH, then srun.
inline Launch detect_launch() {
  Launch l;
  l.in_slurm_allocation = std::getenv("SLURM_JOB_ID") != nullptr;
  auto take = [&](const char* name, const char* r, const char* s, const char* local) {
    if (env_int(r) < 0 || env_int(s) < 1) return false;
    l.launcher = name;
    l.rank = env_int(r);
    l.size = env_int(s);
    l.local_rank = env_int(local);
    return true;
  };
  take("Open MPI mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK") ||
      take("MPICH mpiexec", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID") ||
      take("Slurm srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID");
  return l;
}

// Whether this process's standard output reaches the user through the launcher: started by one (l.launcher set) with
// stdout a pipe, socket or terminal, which is how mpirun, Hydra and srun collect each rank's output and copy it to
// their own. A write the launcher then fails (its stdout on a full disk, a closed pipe) is lost without an error to
// the rank, and the launcher exits 0 all the same (Open MPI 4.1: `mpirun -np 2 tp-run ... > /dev/full`). Stdout that
// is a file or a device (`sh -c '... > out.json'` inside mpirun, `srun --output=FILE`) is written by the rank itself.
inline bool stdout_through_launcher(const Launch& l) {
  if (l.launcher.empty()) return false;
  struct stat st {};
  if (::fstat(STDOUT_FILENO, &st) != 0) return false;
  return S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) || ::isatty(STDOUT_FILENO) == 1;
}

// How to start `np` ranks of `tp-run <command>` here: srun inside a Slurm allocation, else mpirun.
inline std::string start_hint(const Launch& l, int np, const std::string& command) {
  if (l.in_slurm_allocation) return "srun -n " + std::to_string(np) + " --mpi=pmix tp-run " + command + " ...";
  return "mpirun -np " + std::to_string(np) + " tp-run " + command + " ...";
}

}  // namespace tptune::tools
