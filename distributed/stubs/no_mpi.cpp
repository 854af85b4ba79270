// SPDX-License-Identifier: MIT
// The stand-in for builds without MPI (SNUG_MPI=OFF or MPI not found).
#include <snug/distributed/mpi.h>

namespace snug::distributed {

bool mpi_available() { return false; }

std::shared_ptr<ProcessGroup> make_mpi_group(std::chrono::milliseconds) {
  throw DistributedError(
      "make_mpi_group: this snug was built without MPI (configure with SNUG_MPI=ON after installing Open MPI: "
      "apt-get install openmpi-bin libopenmpi-dev)");
}

}  // namespace snug::distributed
