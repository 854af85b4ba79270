// SPDX-License-Identifier: MIT
// Pinned (page-locked) host memory, for staging host <-> device copies
// (data::DataLoader's pin_memory): a caching pool of its own, labelled cpu
// since the bytes are host memory, over the raw backend that a device plugin
// registers. The CUDA plugin registers cudaHostAlloc's when it finds a GPU
// (cuda/register.cpp); until then, and in a build without CUDA, there is no
// pinned memory and pinned_allocate throws DeviceError.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>

#include <snug/memory/allocator.h>

namespace snug::memory {

// The pool is created from make() on first use; a second registration is ignored.
void register_pinned_backend(std::function<std::unique_ptr<RawBackend>()> make);
// Whether a backend is registered (it asks no plugin to load).
bool pinned_available();
// nbytes of pinned host memory (tagged data); DeviceError without a backend.
void* pinned_allocate(std::size_t nbytes);
void pinned_free(void* p);  // nullptr is a no-op
// p (from pinned_allocate) is read by an asynchronous copy on `stream`: it is
// reused only after that work is done (NOTE [ Stream-aware reuse ]).
void pinned_record_stream(void* p, StreamId stream);
// Whether p is the start of a live pinned allocation (false without a pool).
bool is_pinned(const void* p);

}  // namespace snug::memory
