# SPDX-License-Identifier: MIT
# The programs' command-line convention (docs/programs.md): CLI11 and the
# snug_cli helper (examples/common/cli.h), for examples/ and bench/ only.
# libsnug never sees CLI11; snug_cli is a static library of the programs
# and is not installed. Included from examples/ and bench/, whichever comes
# first defines the targets.
#
# Also snug_cli_tests(): the ctest cases every program gets (--help, a
# misspelt flag, a malformed value), and the JSON-lines check for --json.
if(NOT TARGET snug_cli)
  # CLI11 (header-only): from SNUG_THIRD_PARTY_DIR/cli11/CLI/CLI.hpp when that
  # folder has it (a machine without packages, cmake/third_party.cmake;
  # tools/gpu_check.sh --pack copies it), else Debian's libcli11-dev (a CMake
  # package), else any CLI/CLI.hpp on the include path.
  if(SNUG_THIRD_PARTY_DIR)
    find_path(SNUG_CLI11_INCLUDE CLI/CLI.hpp PATHS "${SNUG_THIRD_PARTY_DIR}" PATH_SUFFIXES cli11 include NO_DEFAULT_PATH)
  endif()
  if(NOT SNUG_CLI11_INCLUDE)
    find_package(CLI11 CONFIG QUIET)
    if(NOT TARGET CLI11::CLI11)
      find_path(SNUG_CLI11_INCLUDE CLI/CLI.hpp)
    endif()
  endif()
  if(NOT TARGET CLI11::CLI11)
    if(NOT SNUG_CLI11_INCLUDE)
      message(FATAL_ERROR "snug: the programs (SNUG_EXAMPLES, SNUG_BENCH) need CLI11's header CLI/CLI.hpp: "
              "install libcli11-dev (scripts/install_deps.sh), put it in SNUG_THIRD_PARTY_DIR/cli11/CLI/, "
              "or configure with -DSNUG_EXAMPLES=OFF -DSNUG_BENCH=OFF")
    endif()
    add_library(CLI11::CLI11 INTERFACE IMPORTED GLOBAL)
    set_target_properties(CLI11::CLI11 PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${SNUG_CLI11_INCLUDE}")
  endif()

  add_library(snug_cli STATIC ${PROJECT_SOURCE_DIR}/examples/common/cli.cpp)
  # "common/cli.h" for the programs; CLI11 is PUBLIC here because cli.h uses
  # its types, and snug_cli is linked only by programs.
  target_include_directories(snug_cli PUBLIC ${PROJECT_SOURCE_DIR}/examples)
  target_link_libraries(snug_cli PUBLIC CLI11::CLI11 snug::snug)
  target_compile_options(snug_cli PRIVATE -Wall -Wextra -Wno-unused-parameter)
endif()

if(SNUG_TESTS)
  # Per directory: find_package's results are directory-scoped.
  find_package(Python3 COMPONENTS Interpreter)
  set(SNUG_CLI_CHECK ${PROJECT_SOURCE_DIR}/tests/cli_check.py)
endif()
if(SNUG_TESTS AND NOT COMMAND snug_cli_tests)
  # snug_cli_tests(<name> <target> [SUB <subcommand>] HELP_SHOWS <flag> BAD_VALUE <flag> <value>)
  # adds cli_<name>_help (--help exits 0 and lists <flag>, and runs nothing:
  # with --json no JSON line appears), cli_<name>_unknown_flag (--stpes 3 exits
  # 2 naming --stpes) and cli_<name>_bad_value (<flag> <value> exits 2 naming <flag>).
  function(snug_cli_tests name target)
    cmake_parse_arguments(A "" "SUB;HELP_SHOWS" "BAD_VALUE" ${ARGN})
    if(NOT Python3_FOUND)
      return()
    endif()
    set(prog $<TARGET_FILE:${target}> ${A_SUB})
    set(check ${Python3_EXECUTABLE} ${SNUG_CLI_CHECK})
    add_test(NAME cli_${name}_help COMMAND ${check} --exit 0 --stdout-has=${A_HELP_SHOWS} "--stdout-has=[default: "
             "--stdout-lacks={\"" -- ${prog} --json --help)
    add_test(NAME cli_${name}_unknown_flag COMMAND ${check} --exit 2 --stderr-has=--stpes -- ${prog} --stpes 3)
    list(GET A_BAD_VALUE 0 bad_flag)
    add_test(NAME cli_${name}_bad_value COMMAND ${check} --exit 2 --stderr-has=${bad_flag} -- ${prog} ${A_BAD_VALUE})
  endfunction()
endif()
