# SPDX-License-Identifier: MIT
# install() + exported package config: find_package(snug) then snug::snug,
# or pkg-config --cflags --libs snug.
#
# Layout under the prefix:
#   include/snug/snug.h, version.h    the umbrella header and the version
#   include/snug/{core,autograd,...}/ public headers, included as <snug/core/tensor.h>
#   include/snug/cuda/cuda_api.h      the plain-C++ CUDA API (no CUDA headers)
#   lib/libsnug.so.<soversion>        the library (or libsnug.a with SNUG_SHARED=OFF)
#   lib/libsnug-cuda.so, libsnug-mpi.so  the backend plugins this build made, beside
#                                     libsnug.so where its loader looks (NOTE [ The CUDA plugin ])
#   lib/cmake/snug/, lib/pkgconfig/   the package config and snug.pc
# snug::snug's one include directory is include/ (NOTE [ Include paths ]).
# Nothing of the build machine travels: no -march, warning or sanitizer flag,
# and Eigen, OpenMP and zlib stay private (a static libsnug.a lists them as
# link-only dependencies).
include(CMakePackageConfigHelpers)

set(SNUG_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/snug)

install(TARGETS snug EXPORT snugTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The plugins are loaded, never linked: installed, not exported.
get_property(_snug_plugins GLOBAL PROPERTY SNUG_PLUGIN_TARGETS)
if(_snug_plugins)
  install(TARGETS ${_snug_plugins} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
# Internal headers stay out: the CPU backend's (core/cpu/: OpenMP and Eigen
# details, the GEMM's insides) and *_detail.h.
foreach(dir base core autograd memory nn data parallel prune quant distributed)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/snug/${dir}
    FILES_MATCHING PATTERN "*.h"
    PATTERN "cpu" EXCLUDE PATTERN "*_detail.h" EXCLUDE)
endforeach()
# Only the CUDA-free header of cuda/; check.h and friends include CUDA headers.
install(FILES ${PROJECT_SOURCE_DIR}/cuda/cuda_api.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/snug/cuda)
install(FILES ${PROJECT_SOURCE_DIR}/snug/snug.h ${SNUG_INCLUDE_TREE}/snug/version.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/snug)

install(EXPORT snugTargets NAMESPACE snug:: DESTINATION ${SNUG_INSTALL_CMAKEDIR})
set(SNUG_CONFIG_SHARED ${SNUG_SHARED})
configure_package_config_file(cmake/snugConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/snugConfig.cmake
  INSTALL_DESTINATION ${SNUG_INSTALL_CMAKEDIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/snugConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/snugConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/snugConfigVersion.cmake
  DESTINATION ${SNUG_INSTALL_CMAKEDIR})

# pkg-config. A shared libsnug needs nothing more than -lsnug at link time; a
# static one also lists what it was built against (Libs.private, pkg-config --static).
set(SNUG_PC_LIBS_PRIVATE "-lz ${OpenMP_CXX_FLAGS} -lpthread")
file(RELATIVE_PATH SNUG_PC_UP ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
foreach(_lib ${CMAKE_DL_LIBS})  # dlopen, for the plugin loader (core/plugin.cpp)
  string(APPEND SNUG_PC_LIBS_PRIVATE " -l${_lib}")
endforeach()
configure_file(cmake/snug.pc.in ${CMAKE_CURRENT_BINARY_DIR}/snug.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/snug.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
