// SPDX-License-Identifier: MIT
// Finding and loading a backend plugin (core/plugin_detail.h; NOTE [ The CUDA
// plugin ] in cuda/plugin_loader.cpp).
#include <snug/core/plugin_detail.h>

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <snug/base/error.h>
#include <snug/version.h>

namespace snug::plugin {

const int kHostToken = 0;

namespace {

// The directory of the file this function was loaded from: libsnug.so's (or,
// with a static libsnug.a, the program's).
std::string own_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&own_directory), &info) == 0 || info.dli_fname == nullptr) return "";
  const std::string path = info.dli_fname;
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

// Opens `path` and checks its table; fills out.error on failure.
bool open_one(const Spec& spec, const std::string& path, Loaded& out) {
  out.path = path;
  // RTLD_LOCAL: the plugin's definitions (which share names with libsnug's
  // forwarders) stay out of the global scope; RTLD_NOW: a missing library or
  // symbol is reported here, not at the first call that needs it.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = dlerror();
    out.error = str("dlopen(", path, ") failed: ", e ? e : "unknown error");
    return false;
  }
  // Never dlclose'd: the plugin's backends, allocators and atexit handlers
  // live as long as the process.
  using Entry = const Header* (*)();
  auto entry = reinterpret_cast<Entry>(dlsym(handle, spec.entry));
  if (entry == nullptr) {
    out.error = str(path, " has no entry point ", spec.entry, " (not a snug plugin?)");
    return false;
  }
  const Header* h = entry();
  if (h == nullptr || h->abi_version != spec.abi_version || h->size != spec.size) {
    out.error = str(path, " has plugin ABI version ", h ? h->abi_version : 0u, " (table of ", h ? h->size : 0u,
                    " bytes), this libsnug expects ", spec.abi_version, " (", spec.size,
                    " bytes): the plugin and libsnug come from different builds");
    return false;
  }
  if (std::strcmp(h->snug_version, SNUG_VERSION_STRING) != 0) {
    out.error = str(path, " was built for snug ", h->snug_version, ", this libsnug is ", SNUG_VERSION_STRING);
    return false;
  }
  if (h->host_token != &kHostToken) {
    out.error = str(path,
                    " is bound to another copy of libsnug than this program's (a plugin needs the shared "
                    "libsnug.so, SNUG_SHARED=ON, and the one it was built against)");
    return false;
  }
  out.table = h;
  return true;
}

}  // namespace

Loaded load(const Spec& spec) {
  Loaded out;
  if (const char* env = std::getenv(spec.env); env != nullptr && *env != '\0') {
    if (std::strcmp(env, "none") == 0) {
      out.error = str("disabled by ", spec.env, "=none");
      return out;
    }
    open_one(spec, env, out);  // the path asked for, and only that one
    if (out.table == nullptr) out.error += str(" (from ", spec.env, ")");
    return out;
  }
  std::vector<std::string> dirs;
  if (std::string d = own_directory(); !d.empty()) dirs.push_back(d);
  if (dirs.empty() || dirs[0] != SNUG_PLUGIN_INSTALL_DIR) dirs.push_back(SNUG_PLUGIN_INSTALL_DIR);
  std::string absent;
  for (const std::string& dir : dirs) {
    const std::string path = dir + "/" + spec.file;
    // A file that is there but does not load (a missing libcudart, a wrong
    // version) is the answer; only an absent one sends us to the next place.
    if (access(path.c_str(), F_OK) == 0) {
      open_one(spec, path, out);
      return out;
    }
    absent += str(absent.empty() ? "" : ", ", path);
  }
  out.error = str("not found (looked for ", absent, "; ", spec.env, " may name it)");
  return out;
}

}  // namespace snug::plugin
