// SPDX-License-Identifier: MIT
// Shared by the libFuzzer targets in tests/fuzz/ (docs/reliability.md).
//
// A target feeds the bytes to one parser of outside input. snug::Error is the
// parser saying "this input is bad", which is the expected answer; any other
// exception, a crash, a hang, a leak or a sanitizer report is a finding.
// Readers that take a path get the bytes through a per-process temporary file.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace snug::fuzz {

// Writes data to this process's scratch file and returns its path.
inline const std::string& scratch_file(const uint8_t* data, size_t size, const char* suffix = "") {
  static std::string path;
  const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  path = std::string(dir) + "/snug_fuzz_" + std::to_string(getpid()) + suffix;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

// Writes `bytes` as file `name` in the directory named by the environment
// variable SNUG_FUZZ_SEEDS (if set): how tools/fuzz.sh makes seed corpora
// with snug's own writers.
inline void write_seed(const std::string& name, const std::string& bytes) {
  const char* dir = std::getenv("SNUG_FUZZ_SEEDS");
  if (!dir) return;
  const std::string path = std::string(dir) + "/" + name;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

inline std::string read_all(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) std::abort();
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  std::fclose(f);
  return s;
}

}  // namespace snug::fuzz
