# SPDX-License-Identifier: MIT
# Decides the process-group backends of distributed/ (docs/distributed.md):
#   SNUG_MPI  (ON)  the MPI group, when CMake's FindMPI finds an MPI (Open MPI:
#                   apt-get install openmpi-bin libopenmpi-dev) -> SNUG_WITH_MPI
#   SNUG_NCCL (ON)  the NCCL group, in CUDA builds, when nccl.h and libnccl are
#                   found (the CUDA toolkit's, or SNUG_NCCL_ROOT) -> SNUG_WITH_NCCL
# Both are plugins: MPI's libsnug-mpi.so (distributed/mpi/), NCCL's inside the
# CUDA plugin (cuda/nccl/). Both optional: without them libsnug answers "not
# built" (distributed/mpi_loader.cpp, cuda/plugin_loader.cpp), and a program
# still runs as one process (the "local" group).
# Included after cmake/cuda.cmake (NCCL is looked for beside the toolkit).
option(SNUG_MPI "Build the MPI process group when MPI is found" ON)
option(SNUG_NCCL "Build the NCCL process group in CUDA builds when NCCL is found" ON)

set(SNUG_WITH_MPI OFF)
if(SNUG_MPI AND NOT SNUG_SHARED)
  # The MPI group is a plugin of the shared libsnug.so (NOTE [ The MPI plugin ]).
  message(STATUS "snug: MPI process group OFF: SNUG_SHARED=OFF (the MPI plugin needs the shared libsnug.so)")
elseif(SNUG_MPI)
  # Only MPI's C API is used; skip the deprecated C++ bindings.
  set(MPI_CXX_SKIP_MPICXX ON CACHE BOOL "")
  find_package(MPI COMPONENTS CXX)
  if(MPI_CXX_FOUND)
    set(SNUG_WITH_MPI ON)
    # Open MPI's launcher takes --oversubscribe (the tests run 2 ranks on any machine).
    execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE _mpiexec_version ERROR_QUIET)
    set(SNUG_MPIEXEC_IS_OPENMPI OFF)
    if(_mpiexec_version MATCHES "Open MPI|OpenRTE")
      set(SNUG_MPIEXEC_IS_OPENMPI ON)
    endif()
    message(STATUS "snug: MPI process group ON (MPI ${MPI_CXX_VERSION}, ${MPIEXEC_EXECUTABLE})")
  else()
    message(STATUS "snug: MPI process group OFF (no MPI found; apt-get install openmpi-bin libopenmpi-dev)")
  endif()
endif()

set(SNUG_WITH_NCCL OFF)
if(SNUG_NCCL AND SNUG_WITH_CUDA)
  set(SNUG_NCCL_ROOT "" CACHE PATH "NCCL root with include/nccl.h and lib/libnccl.so (default: beside the CUDA toolkit)")
  find_path(SNUG_NCCL_INCLUDE nccl.h HINTS "${SNUG_NCCL_ROOT}/include" ${CUDAToolkit_INCLUDE_DIRS} /usr/include)
  find_library(SNUG_NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR
               HINTS "${SNUG_NCCL_ROOT}/lib" "${SNUG_NCCL_ROOT}/lib64" "${CUDAToolkit_LIBRARY_DIR}"
                     /usr/lib/x86_64-linux-gnu)
  if(SNUG_NCCL_INCLUDE AND SNUG_NCCL_LIBRARY)
    set(SNUG_WITH_NCCL ON)
    if(NOT TARGET snug::nccl)
      add_library(snug::nccl UNKNOWN IMPORTED GLOBAL)
      set_target_properties(snug::nccl PROPERTIES
        IMPORTED_LOCATION "${SNUG_NCCL_LIBRARY}"
        INTERFACE_INCLUDE_DIRECTORIES "${SNUG_NCCL_INCLUDE}")
    endif()
    message(STATUS "snug: NCCL process group ON (${SNUG_NCCL_LIBRARY})")
  else()
    message(STATUS "snug: NCCL process group OFF (nccl.h or libnccl not found; set SNUG_NCCL_ROOT)")
  endif()
endif()
set(SNUG_MPI_ENABLED ${SNUG_WITH_MPI} CACHE INTERNAL "Whether the last configure built the MPI group")
set(SNUG_NCCL_ENABLED ${SNUG_WITH_NCCL} CACHE INTERNAL "Whether the last configure built the NCCL group")
