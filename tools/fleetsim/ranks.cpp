#include "tools/fleetsim/ranks.hpp"

#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <string>

#ifdef FLEETSIM_MPI
#include <mpi.h>
#endif

namespace fleetsim {
namespace {

// The processes the launcher says it started, 1 when none did.
long launched_processes() {
  // Open MPI's mpirun, or a PMI launcher (srun --mpi=pmi2). Slurm's srun without an MPI plugin
  // leaves no trace that a batch script's own environment would not also have.
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    if (const char* value = std::getenv(variable)) return std::strtol(value, nullptr, 10);
  }
  return 1;
}

void refuse_lone_copies(int size) {
  if (launched_processes() > 1 && size == 1) {
    throw std::invalid_argument(
        "started as one of " + std::to_string(launched_processes()) +
        " processes, but MPI did not make them one job: every copy would do all the work and "
        "write the same files (hint: build with -DFLEETSIM_MPI=ON, as tools/setup.sh does; under "
        "Slurm start it with srun --mpi=pmix)");
  }
}

}  // namespace

#ifdef FLEETSIM_MPI

namespace {

bool launched_by_mpi() {
  for (const char* variable : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    if (std::getenv(variable) != nullptr) return true;
  }
  return false;
}

void check(int status, const char* call) {
  if (status != MPI_SUCCESS) throw std::runtime_error(std::string("MPI: ") + call + " failed");
}

}  // namespace

Ranks::Ranks(int& argc, char**& argv) {
  if (launched_by_mpi()) {
    check(MPI_Init(&argc, &argv), "MPI_Init");
    started_ = true;
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
  }
  try {
    refuse_lone_copies(size_);
  } catch (...) {
    if (started_) MPI_Finalize();
    throw;
  }
}

void Ranks::abort(int code) const {
  if (started_) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

Ranks::~Ranks() {
  if (started_) MPI_Finalize();
}

std::vector<std::string> Ranks::gather(const std::string& mine) const {
  if (size_ == 1) return {mine};
  // The sizes first, then the bytes into one buffer at rank 0 (MPI counts in int).
  if (mine.size() > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    throw std::runtime_error("MPI: a rank's results exceed 2 GiB");
  }
  const int length = static_cast<int>(mine.size());
  std::vector<int> lengths(rank_ == 0 ? static_cast<std::size_t>(size_) : 0);
  check(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD),
        "MPI_Gather");
  std::vector<int> offsets(lengths.size());
  long long total = 0;
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    if (total > std::numeric_limits<int>::max()) {
      throw std::runtime_error("MPI: the ranks' results exceed 2 GiB");
    }
    offsets[r] = static_cast<int>(total);
    total += lengths[r];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  check(MPI_Gatherv(mine.data(), length, MPI_BYTE, all.data(), lengths.data(), offsets.data(),
                    MPI_BYTE, 0, MPI_COMM_WORLD),
        "MPI_Gatherv");
  std::vector<std::string> by_rank;
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    by_rank.push_back(
        all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(lengths[r])));
  }
  return by_rank;
}

#else

Ranks::Ranks(int&, char**&) {
  refuse_lone_copies(size_);
}
Ranks::~Ranks() = default;
void Ranks::abort(int code) const {
  std::exit(code);
}
std::vector<std::string> Ranks::gather(const std::string& mine) const {
  return {mine};
}

#endif

}  // namespace fleetsim
