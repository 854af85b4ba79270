# SPDX-License-Identifier: MIT
# The backend plugins, libsnug-cuda.so and libsnug-mpi.so (NOTE [ The CUDA
# plugin ] in cuda/plugin_loader.cpp): MODULE libraries that libsnug.so
# dlopen()s on first use. snug_add_plugin(<target> <name>) makes <target> a
# MODULE lib<name>.so that
#   - sits next to libsnug.so in the build tree (where the loader looks first)
#     and is installed beside it (cmake/install.cmake),
#   - links libsnug.so (the one copy of snug's state) plus what the caller adds,
#   - binds its own functions inside itself (-Bsymbolic-functions: they share
#     names with libsnug's forwarders),
#   - has every symbol resolved at link time (--no-undefined), so a missing one
#     is a link error here rather than a dlopen error at a user's,
#   - finds its CUDA / MPI libraries when installed (their directories in its RUNPATH).
# The utility target snug_plugins builds every plugin this configure made.
add_custom_target(snug_plugins)
set_property(GLOBAL PROPERTY SNUG_PLUGIN_TARGETS "")

function(snug_add_plugin target name)
  add_library(${target} MODULE ${ARGN})
  target_link_libraries(${target} PRIVATE snug)
  set_target_properties(${target} PROPERTIES
    OUTPUT_NAME ${name}
    PREFIX lib
    LIBRARY_OUTPUT_DIRECTORY $<TARGET_FILE_DIR:snug>
    POSITION_INDEPENDENT_CODE ON
    INSTALL_RPATH_USE_LINK_PATH ON)
  target_link_options(${target} PRIVATE -Wl,-Bsymbolic-functions)
  if(NOT SNUG_SANITIZE)
    # (Clang's sanitizer runtimes live in the executable, not in modules.)
    target_link_options(${target} PRIVATE -Wl,--no-undefined)
  endif()
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
  add_dependencies(snug_plugins ${target})
  set_property(GLOBAL APPEND PROPERTY SNUG_PLUGIN_TARGETS ${target})
endfunction()
