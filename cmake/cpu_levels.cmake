# SPDX-License-Identifier: MIT
# The CPU backend, compiled once per instruction-set level (NOTE [ CPU levels ]
# in core/cpu/level.h). Each level is an object library: the files of core/cpu/
# with SNUG_CPU_LEVEL=<level> and the level's flags. libsnug links the levels'
# objects after its own, baseline first (see the NOTE for why the order
# matters). core/cpu/dispatch.cpp learns which levels exist through
# SNUG_CPU_HAVE_<level>.
#
# Defines SNUG_CPU_ONCE_SOURCES (the core/cpu/ files compiled once, for the
# baseline, as part of libsnug's own sources) and snug_add_cpu_levels(target).

set(SNUG_CPU_ONCE_SOURCES
  ${PROJECT_SOURCE_DIR}/core/cpu/dispatch.cpp
  ${PROJECT_SOURCE_DIR}/core/cpu/gemm_eigen.cpp
  ${PROJECT_SOURCE_DIR}/core/cpu/threads.cpp)
file(GLOB SNUG_CPU_LEVEL_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/core/cpu/*.cpp)
list(REMOVE_ITEM SNUG_CPU_LEVEL_SOURCES ${SNUG_CPU_ONCE_SOURCES})

set(SNUG_CPU_FLAGS_avx2 -mavx2 -mfma -mf16c -mbmi -mbmi2 -mlzcnt -mpopcnt)
set(SNUG_CPU_FLAGS_avx512 ${SNUG_CPU_FLAGS_avx2} -mavx512f -mavx512cd -mavx512bw -mavx512dq -mavx512vl)

# The levels of this build, best first in dispatch.cpp's eyes; linked in this
# order (baseline first).
if(SNUG_NATIVE)
  set(SNUG_CPU_LEVELS native)  # -march=native: this machine only
  set(SNUG_CPU_FLAGS_native -march=native)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set(SNUG_CPU_LEVELS baseline avx2 avx512)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$")
  set(SNUG_CPU_LEVELS neon)  # NEON is part of armv8-a: no flags
else()
  set(SNUG_CPU_LEVELS baseline)
endif()

function(snug_add_cpu_levels target)
  foreach(level ${SNUG_CPU_LEVELS})
    set(lib snug_cpu_${level})
    add_library(${lib} OBJECT ${SNUG_CPU_LEVEL_SOURCES})
    target_compile_definitions(${lib} PRIVATE SNUG_CPU_LEVEL=${level})
    # -fno-trapping-math: the kernels never read floating-point exception
    # flags, and without it GCC will not vectorize a loop whose body has a
    # select on a compare (the clamps and NaN checks of GELU, exp, erf in
    # core/functors.h) unless the level has AVX-512's masks: at AVX2 the fused
    # GELU of the GEMM's store ran scalar, 22% of a W-GPT step. It changes no
    # value (that would take -ffast-math's reassociation or finite-math
    # assumptions, which stay off).
    target_compile_options(${lib} PRIVATE ${SNUG_CPU_FLAGS_${level}} -fno-trapping-math -Wall -Wextra
                                          -Wno-unused-parameter)
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
      target_compile_options(${lib} PRIVATE -fno-semantic-interposition)
    endif()
    target_include_directories(${lib} PRIVATE ${SNUG_INCLUDE_TREE})
    target_compile_features(${lib} PRIVATE cxx_std_20)
    # Usage requirements only (compile flags, include paths); libsnug links them.
    target_link_libraries(${lib} PRIVATE OpenMP::OpenMP_CXX Threads::Threads)
    set_target_properties(${lib} PROPERTIES POSITION_INDEPENDENT_CODE ON)
    target_sources(${target} PRIVATE $<TARGET_OBJECTS:${lib}>)
    set_property(SOURCE ${PROJECT_SOURCE_DIR}/core/cpu/dispatch.cpp APPEND PROPERTY COMPILE_DEFINITIONS
      SNUG_CPU_HAVE_${level}=1)
  endforeach()
  # GCC and Clang vectorize with 256-bit registers by default even on AVX-512
  # CPUs. The elementwise, normalization, softmax, optimizer and GEMM
  # activation loops are compute-bound (GELU's erf and exp are ~50 vector
  # operations per element group) and run ~1.5x faster with 512-bit vectors
  # (docs/lab/cpu-performance-log.md), so those files alone ask for them. No
  # effect on a level without AVX-512.
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag(-mprefer-vector-width=512 SNUG_HAS_PREFER_VECTOR_WIDTH)
  if(SNUG_HAS_PREFER_VECTOR_WIDTH)
    foreach(f elementwise layer_norm softmax attention reduce gemm_act update)
      set_source_files_properties(${PROJECT_SOURCE_DIR}/core/cpu/${f}.cpp PROPERTIES COMPILE_OPTIONS
        -mprefer-vector-width=512)
    endforeach()
  endif()
endfunction()
