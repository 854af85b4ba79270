// SPDX-License-Identifier: MIT
// distributed/mpi.h as libsnug implements it in every build: a forwarder to
// the MPI plugin.
//
// NOTE [ The MPI plugin ]
// The MPI process group (distributed/mpi/mpi_group.cpp, the one file that
// includes mpi.h) is built into libsnug-mpi.so, linked against libsnug.so and
// libmpi; libsnug.so does not link libmpi. It is found, checked and loaded as
// the CUDA plugin is (NOTE [ The CUDA plugin ] in cuda/plugin_loader.cpp;
// core/plugin.cpp), from $SNUG_MPI_PLUGIN or next to libsnug.so, on the
// first mpi_available() or make_mpi_group(): init_process_group() asks only
// when the launcher's environment says there are several ranks (or the
// backend "mpi" is asked for), so a program run alone maps no MPI library.
// Loading it does not initialize MPI; make_mpi_group does.
#include <snug/distributed/mpi_plugin_detail.h>

namespace snug::distributed {

namespace {

// Whether this build made libsnug-mpi.so (only for messages; set by CMake).
constexpr bool kBuilt = SNUG_MPI_PLUGIN_BUILT;

const plugin::Loaded& loaded() {
  static const plugin::Loaded l = plugin::load({"MPI process group", "libsnug-mpi.so", "SNUG_MPI_PLUGIN",
                                                kMpiPluginEntry, kMpiPluginAbiVersion, sizeof(MpiPluginApi)});
  return l;
}

const MpiPluginApi* api() { return reinterpret_cast<const MpiPluginApi*>(loaded().table); }

}  // namespace

bool mpi_available() { return api() != nullptr; }

std::shared_ptr<ProcessGroup> make_mpi_group(std::chrono::milliseconds timeout) {
  if (const MpiPluginApi* a = api()) return a->make_mpi_group(timeout);
  throw DistributedError(
      str("make_mpi_group: snug runs without MPI here: the MPI plugin libsnug-mpi.so was not loaded: ", loaded().error,
          kBuilt ? ""
                 : " (this snug was built without MPI: configure with SNUG_MPI=ON after "
                   "installing Open MPI: apt-get install openmpi-bin libopenmpi-dev)"));
}

}  // namespace snug::distributed
