# SPDX-License-Identifier: MIT
# Header-only dependencies (Eigen, doctest) and zlib. Normally from the
# system's packages; on a machine without them (the GPU machine of issue 8:
# no Debian packages, no network) from a folder copied beside the tree:
#   cmake -DSNUG_THIRD_PARTY_DIR=/path/to/third_party ...
# laid out as tools/gpu_check.sh --pack writes it:
#   <dir>/eigen3/Eigen/Core   <dir>/doctest/doctest/doctest.h
#   <dir>/zlib/include/zlib.h <dir>/zlib/lib/libz.so (optional: a system zlib is used when absent)
#   <dir>/cli11/CLI/CLI.hpp   (the programs' CLI11, looked up by cmake/cli.cmake)
# When the hint is set, Eigen and doctest come from it and nowhere else.
set(SNUG_THIRD_PARTY_DIR "" CACHE PATH "Folder with eigen3/ and doctest/ headers (and optionally zlib/) to use instead of system packages")

if(SNUG_THIRD_PARTY_DIR)
  if(NOT IS_DIRECTORY "${SNUG_THIRD_PARTY_DIR}")
    message(FATAL_ERROR "SNUG_THIRD_PARTY_DIR=${SNUG_THIRD_PARTY_DIR} is not a directory")
  endif()
  find_path(SNUG_EIGEN_INCLUDE Eigen/Core PATHS "${SNUG_THIRD_PARTY_DIR}" PATH_SUFFIXES eigen3 include/eigen3 eigen
            NO_DEFAULT_PATH)
  find_path(SNUG_DOCTEST_INCLUDE doctest/doctest.h PATHS "${SNUG_THIRD_PARTY_DIR}" PATH_SUFFIXES doctest include .
            NO_DEFAULT_PATH)
  if(NOT SNUG_EIGEN_INCLUDE)
    message(FATAL_ERROR "SNUG_THIRD_PARTY_DIR=${SNUG_THIRD_PARTY_DIR} has no Eigen/Core (expected <dir>/eigen3/Eigen/Core)")
  endif()
  add_library(Eigen3::Eigen INTERFACE IMPORTED GLOBAL)
  set_target_properties(Eigen3::Eigen PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${SNUG_EIGEN_INCLUDE}")
  if(SNUG_DOCTEST_INCLUDE)
    add_library(doctest::doctest INTERFACE IMPORTED GLOBAL)
    set_target_properties(doctest::doctest PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${SNUG_DOCTEST_INCLUDE}")
  endif()
  if(IS_DIRECTORY "${SNUG_THIRD_PARTY_DIR}/zlib" AND NOT ZLIB_ROOT)
    set(ZLIB_ROOT "${SNUG_THIRD_PARTY_DIR}/zlib")
  endif()
  message(STATUS "snug: Eigen from ${SNUG_EIGEN_INCLUDE}, doctest from '${SNUG_DOCTEST_INCLUDE}' (SNUG_THIRD_PARTY_DIR)")
else()
  find_package(Eigen3 3.4 REQUIRED NO_MODULE)
endif()
