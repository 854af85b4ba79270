# install() + exported package config: find_package(snug) then snug::snug.
#
# Layout under the prefix:
#   include/snug/snug.h               the umbrella header: #include <snug/snug.h>
#   include/snug/{core,autograd,...}/ public headers, included as "core/tensor.h"
#   include/snug/cuda/cuda_api.h      the plain-C++ CUDA API (no CUDA headers)
#   lib/libsnug.a, lib/cmake/snug/    the library and its package config
# snug::snug's include directories are include/ (for <snug/snug.h>) and
# include/snug (for the "core/..." paths the headers use among themselves).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(SNUG_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/snug)

install(TARGETS snug EXPORT snugTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
foreach(dir core autograd memory nn data parallel prune quant distributed)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/snug/${dir}
    FILES_MATCHING PATTERN "*.h")
endforeach()
# Only the CUDA-free header of cuda/; check.h and friends include CUDA headers.
install(FILES ${PROJECT_SOURCE_DIR}/cuda/cuda_api.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/snug/cuda)
install(FILES ${PROJECT_SOURCE_DIR}/snug/snug.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/snug)

install(EXPORT snugTargets NAMESPACE snug:: DESTINATION ${SNUG_INSTALL_CMAKEDIR})
# Variables substituted into snugConfig.cmake.
set(SNUG_CONFIG_WITH_CUDA ${SNUG_WITH_CUDA})
set(SNUG_CONFIG_CUDNN_LIBDIR "")
if(SNUG_CUDNN_LIBRARY)
  get_filename_component(SNUG_CONFIG_CUDNN_LIBDIR "${SNUG_CUDNN_LIBRARY}" DIRECTORY)
endif()
set(SNUG_CONFIG_CUDNN_INCLUDE "${SNUG_CUDNN_INCLUDE}")
set(SNUG_CONFIG_WITH_MPI ${SNUG_WITH_MPI})
set(SNUG_CONFIG_WITH_NCCL ${SNUG_WITH_NCCL})
set(SNUG_CONFIG_NCCL_LIBRARY "${SNUG_NCCL_LIBRARY}")
set(SNUG_CONFIG_NCCL_LIBDIR "")
if(SNUG_NCCL_LIBRARY)
  get_filename_component(SNUG_CONFIG_NCCL_LIBDIR "${SNUG_NCCL_LIBRARY}" DIRECTORY)
endif()
configure_package_config_file(cmake/snugConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/snugConfig.cmake
  INSTALL_DESTINATION ${SNUG_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/snugConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/snugConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/snugConfigVersion.cmake
  DESTINATION ${SNUG_INSTALL_CMAKEDIR})
