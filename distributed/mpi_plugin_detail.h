// SPDX-License-Identifier: MIT
// The table libsnug-mpi.so hands to libsnug's loader (distributed/mpi_loader.cpp;
// NOTE [ The MPI plugin ]). Internal (not installed).
#pragma once
#include <snug/core/plugin_detail.h>
#include <snug/distributed/mpi.h>

namespace snug::distributed {

// Bump when the table changes.
inline constexpr uint32_t kMpiPluginAbiVersion = 1;
inline constexpr const char* kMpiPluginEntry = "snug_mpi_plugin";

struct MpiPluginApi {
  plugin::Header header;
  decltype(&::snug::distributed::make_mpi_group) make_mpi_group;  // distributed/mpi/mpi_group.cpp
};

}  // namespace snug::distributed
