// SPDX-License-Identifier: MIT
// The MPI backend's entry point (plain C++: mpi.h stays inside
// distributed/mpi/mpi_group.cpp). Built when CMake's SNUG_MPI is on and
// find_package(MPI) succeeds; otherwise distributed/mpi_loader.cpp says so.
#pragma once
#include <chrono>
#include <memory>

#include <snug/distributed/process_group.h>

namespace snug::distributed {

// A group of every process of the MPI job, on its own communicator (a
// duplicate of MPI_COMM_WORLD, so groups never see each other's messages).
// Initializes MPI on first use (MPI_THREAD_SERIALIZED; the group serializes its
// own calls) and finalizes it at exit, unless the program initialized MPI
// itself. Collective: every rank must call it. Tensors must be on the CPU.
std::shared_ptr<ProcessGroup> make_mpi_group(std::chrono::milliseconds timeout);

}  // namespace snug::distributed
