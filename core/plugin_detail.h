// SPDX-License-Identifier: MIT
// Loading a backend plugin (libsnug-cuda.so, libsnug-mpi.so) with dlopen on
// first use: NOTE [ The CUDA plugin ] in cuda/plugin_loader.cpp says why and
// how. Internal to libsnug and its plugins (not installed).
#pragma once
#include <cstdint>
#include <string>

namespace snug::plugin {

// What every plugin's entry point returns first; the rest of its table
// follows (cuda/plugin_api.h, distributed/mpi_plugin_detail.h). These four
// fields keep their layout across versions so a mismatch can be reported.
struct Header {
  uint32_t abi_version;      // the table's version, checked against the loader's
  uint32_t size;             // sizeof the plugin's whole table
  const char* snug_version;  // SNUG_VERSION_STRING the plugin was built with
  const void* host_token;    // &kHostToken as the plugin resolved it
};

// A libsnug object whose address a plugin reports back (Header::host_token):
// equal to the loader's own only when the plugin is bound to this very copy
// of libsnug (not, say, to a libsnug.so next to a program that linked
// libsnug.a, which would give the plugin a second, empty set of registries).
extern const int kHostToken;

struct Spec {
  const char* what;      // "CUDA backend", for messages
  const char* file;      // "libsnug-cuda.so"
  const char* env;       // "SNUG_CUDA_PLUGIN": a path, or "none"
  const char* entry;     // the extern "C" function returning const Header*
  uint32_t abi_version;  // what this libsnug expects
  uint32_t size;         // sizeof the table this libsnug expects
};

struct Loaded {
  const Header* table = nullptr;  // null when not loaded
  std::string path;               // the file loaded (or last tried)
  std::string error;              // why not, when table is null
};

// Finds and loads the plugin, once per call (callers keep the result in a
// function-local static): the path in $env if set ("none": not at all), else
// `file` in libsnug's own directory, else in the lib directory snug was
// configured to install into. Never throws; Loaded::error says what failed.
Loaded load(const Spec& spec);

}  // namespace snug::plugin
