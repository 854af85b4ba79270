// SPDX-License-Identifier: MIT
// libsnug-mpi.so's one entry point (NOTE [ The MPI plugin ] in
// distributed/mpi_loader.cpp). Linked with -Bsymbolic-functions, so
// &make_mpi_group is this plugin's, not libsnug's forwarder of the same name.
#include <snug/distributed/mpi_plugin_detail.h>
#include <snug/version.h>

extern "C" __attribute__((visibility("default"))) const snug::plugin::Header* snug_mpi_plugin() {
  using snug::distributed::MpiPluginApi;
  static const MpiPluginApi api{
      {snug::distributed::kMpiPluginAbiVersion, sizeof(MpiPluginApi), SNUG_VERSION_STRING, &snug::plugin::kHostToken},
      &::snug::distributed::make_mpi_group};
  return &api.header;
}
