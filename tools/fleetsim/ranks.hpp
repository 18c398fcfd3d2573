// The processes of a distributed run (`mpirun -n N fleetsim sweep FILE`), or one process alone.
//
// Built with FLEETSIM_MPI, MPI starts when a launcher started the process (its environment
// names a rank: Open MPI's OMPI_COMM_WORLD_RANK, PMIx's PMIX_RANK, or PMI_RANK as Slurm's srun
// sets it), so a plain `fleetsim` never waits on MPI. Built without it, or not launched, the
// process is rank 0 of 1; a process whose launcher says it is one of several (Open MPI's
// OMPI_COMM_WORLD_SIZE, PMI_SIZE) while MPI does not make it so is refused, since every copy
// would do all the work and write the same files.
#pragma once

#include <string>
#include <vector>

namespace fleetsim {

class Ranks {
 public:
  Ranks(int& argc, char**& argv);
  ~Ranks();
  Ranks(const Ranks&) = delete;
  Ranks& operator=(const Ranks&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Every rank's `mine`, in rank order, on rank 0; nothing on the others. Every rank calls it.
  std::vector<std::string> gather(const std::string& mine) const;
  // Ends every rank of the launch with `code`: what a rank that fails must do, since the
  // others may be waiting for it in gather (and MPI_Finalize waits for every rank).
  [[noreturn]] void abort(int code) const;

 private:
  int rank_ = 0;
  int size_ = 1;
  bool started_ = false;  // this process started MPI, and finalizes it
};

}  // namespace fleetsim
