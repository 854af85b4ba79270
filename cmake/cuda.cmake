# SPDX-License-Identifier: MIT
# Decides SNUG_WITH_CUDA from SNUG_CUDA (AUTO|ON|OFF), and when on, enables the
# CUDA language and defines the targets the CUDA plugin snug_cuda links
# (cuda/CMakeLists.txt): CUDA::cudart, CUDA::cublas, CUDA::cublasLt
# (FindCUDAToolkit) and snug::cudnn (below; CMake has no cuDNN module). They
# are private to the plugin: neither libsnug nor its consumers link them.
set(SNUG_WITH_CUDA OFF)
# The CUDA backend is a plugin that shares libsnug.so's state (NOTE [ The CUDA
# plugin ] in cuda/plugin_loader.cpp); a static libsnug.a has nothing to share.
if(NOT SNUG_SHARED AND NOT SNUG_CUDA STREQUAL "OFF")
  if(SNUG_CUDA STREQUAL "ON")
    message(FATAL_ERROR "SNUG_CUDA=ON needs SNUG_SHARED=ON: the CUDA backend is a plugin (libsnug-cuda.so) "
                        "loaded by the shared libsnug.so; a static libsnug.a is CPU-only")
  endif()
  message(STATUS "snug: CUDA backend OFF: SNUG_SHARED=OFF (the CUDA plugin needs the shared libsnug.so)")
elseif(NOT SNUG_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    get_filename_component(_cuda_bin "${CMAKE_CUDA_COMPILER}" DIRECTORY)
    # SNUG_CUDNN_ROOT: a cuDNN outside the toolkit, e.g. the pip wheel's
    # site-packages/nvidia/cudnn (whose library is only libcudnn.so.9).
    set(SNUG_CUDNN_ROOT "" CACHE PATH "cuDNN root with include/cudnn.h and lib/libcudnn.so* (e.g. pip's nvidia/cudnn)")
    find_library(SNUG_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 NAMES_PER_DIR
                 HINTS "${SNUG_CUDNN_ROOT}/lib" "${SNUG_CUDNN_ROOT}/lib64" "${_cuda_bin}/../lib64" "${_cuda_bin}/../lib"
                       /usr/lib/x86_64-linux-gnu)
    find_path(SNUG_CUDNN_INCLUDE cudnn.h HINTS "${SNUG_CUDNN_ROOT}/include" "${_cuda_bin}/../include" /usr/include)
  endif()
  if(CMAKE_CUDA_COMPILER AND SNUG_CUDNN_LIBRARY AND SNUG_CUDNN_INCLUDE)
    set(SNUG_WITH_CUDA ON)
  elseif(SNUG_CUDA STREQUAL "ON")
    message(FATAL_ERROR "SNUG_CUDA=ON but nvcc (${CMAKE_CUDA_COMPILER}) or cuDNN (${SNUG_CUDNN_LIBRARY}) was not found")
  else()
    message(STATUS "snug: SNUG_CUDA=AUTO found no nvcc or no cuDNN (nvcc: '${CMAKE_CUDA_COMPILER}', cuDNN: '${SNUG_CUDNN_LIBRARY}')")
  endif()
endif()

if(SNUG_WITH_CUDA)
  enable_language(CUDA)
  # CMake 3.25 predates nvcc 13; tell it the C++20 flag.
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  # By default machine code for Ampere (A100 sm_80, RTX 30 sm_86), Jetson Orin
  # (sm_87), Ada (RTX 40, L4: sm_89) and Hopper (H100/H200: sm_90), plus sm_90's
  # PTX, which the driver compiles for newer GPUs on first use. One GPU
  # only: -DSNUG_CUDA_ARCHITECTURES=native (or 87 on a Jetson) builds ~5x less.
  set(SNUG_CUDA_ARCHITECTURES "80-real;86-real;87-real;89-real;90" CACHE STRING
      "CUDA architectures for snug's kernels (CMake's CUDA_ARCHITECTURES syntax)")
  # GLOBAL so that a parent project that add_subdirectory()s snug can resolve
  # these names in snug's link interface.
  find_package(CUDAToolkit REQUIRED GLOBAL)
  if(NOT TARGET snug::cudnn)
    add_library(snug::cudnn UNKNOWN IMPORTED GLOBAL)
    set_target_properties(snug::cudnn PROPERTIES
      IMPORTED_LOCATION "${SNUG_CUDNN_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${SNUG_CUDNN_INCLUDE}")
  endif()
  message(STATUS "snug: CUDA backend ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, archs ${SNUG_CUDA_ARCHITECTURES}, cuDNN ${SNUG_CUDNN_LIBRARY})")
else()
  message(STATUS "snug: CUDA backend OFF")
endif()
# For scripts and CI (.ci/run checks it): what this configure decided.
set(SNUG_CUDA_ENABLED ${SNUG_WITH_CUDA} CACHE INTERNAL "Whether the last configure built the CUDA target")
