// SPDX-License-Identifier: MIT
// RawBackend: the small interface the caching allocator needs from a kind of
// memory. It hands out and takes back whole segments (megabytes at a time;
// the caching allocator does all the carving), and it records and queries
// events so that a block used on another stream is reused only when that
// stream is done with it.
//
// Backends here: HostBackend (page-aligned host memory, used for cpu and
// every virtual cpu:N) and SimulatedBackend (address ranges that are never
// touched, so a trace from an 80 GB GPU replays on a laptop). cuda/ adds
// device memory through register_backend_factory() (memory/allocator.h) and
// pinned host memory through register_pinned_backend() (memory/pinned.h);
// nothing in memory/ includes a CUDA header.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mutex>

#include <snug/memory/allocator.h>

namespace snug::memory {

// An opaque event handle (a cudaEvent_t on CUDA). 0 may be a valid handle.
using EventHandle = std::uintptr_t;

class RawBackend {
 public:
  virtual ~RawBackend() = default;
  virtual const char* name() const = 0;
  // A segment of nbytes, aligned to at least 512 bytes; nullptr when the
  // memory is not there (the caching allocator then frees its cache, retries,
  // and finally throws OutOfMemoryError). Must not throw for lack of memory.
  virtual void* alloc(std::size_t nbytes) = 0;
  // Returns a segment; nbytes is what alloc was given.
  virtual void free(void* p, std::size_t nbytes) = 0;
  // Total memory of the device (physical RAM for the host), for
  // set_capacity_fraction; 0 when unknown.
  virtual std::size_t total_memory() const = 0;
  // Bytes the device could still hand out now (CUDA: cudaMemGetInfo's free,
  // which other processes' use lowers too); 0 when unknown (the host: RAM is
  // shared and swapped, so no figure would be honest). What a placement may
  // plan for on a device without a capacity (CachingAllocator::available).
  virtual std::size_t free_memory() const { return 0; }

  // Events. The defaults suit a device with one stream whose work is done
  // when the call returns (the CPU): an event is complete as soon as recorded.
  virtual EventHandle record_event(StreamId /*stream*/) { return 0; }
  virtual bool query_event(EventHandle /*e*/) { return true; }
  virtual void synchronize_event(EventHandle /*e*/) {}
  virtual void destroy_event(EventHandle /*e*/) {}

  // Streams of one's own (memory/stream.h). The defaults suit a device with
  // one stream (the CPU): there is no other to make, and no device to bind.
  virtual StreamId create_stream() { return 0; }
  // A stream for copies that overlap the kernels of every other stream, the
  // legacy default one included (CUDA: cudaStreamNonBlocking); its work is
  // ordered only by waits (wait_stream). 0 on the CPU.
  virtual StreamId create_copy_stream() { return 0; }
  // Work queued on `waiter` from now on waits (on the device, not the host)
  // for the work queued on `s` so far. Nothing to do on the CPU.
  virtual void wait_stream(StreamId /*waiter*/, StreamId /*s*/) {}
  // Events that keep the time the device reaches them, for profiles of the
  // work on a stream (data::DevicePrefetcher's GPU tracks); 0: this device
  // keeps no such times (the CPU). Destroyed with destroy_event.
  virtual EventHandle record_timed_event(StreamId /*stream*/) { return 0; }
  // Milliseconds from timed event a to timed event b, both done.
  virtual double elapsed_ms(EventHandle /*a*/, EventHandle /*b*/) { return 0; }
  // Waits for the work queued on s, then releases it.
  virtual void destroy_stream(StreamId /*s*/) {}
  // Makes this device the calling thread's current one (CUDA: cudaSetDevice).
  virtual void make_current() {}

  // Expandable segments (policy=expandable, memory/alloc_policy.h): a range
  // of addresses reserved once, with memory mapped into it and out of it on
  // demand (CPU: mmap PROT_NONE, then mprotect; CUDA: cuMemAddressReserve,
  // cuMemCreate + cuMemMap). The defaults say "not supported".
  virtual bool can_reserve() const { return false; }
  // Addresses for `bytes`, aligned to 2 MiB, nothing mapped; nullptr: none.
  virtual void* reserve(std::size_t /*bytes*/) { return nullptr; }
  // Maps memory at [at, at + bytes) inside a reservation (at and bytes are
  // multiples of the policy's map_granularity); false: the memory is not there.
  virtual bool map(void* /*at*/, std::size_t /*bytes*/) { return false; }
  // Unmaps a range mapped by map (whole calls' ranges or their tails).
  virtual void unmap(void* /*at*/, std::size_t /*bytes*/) {}
  // Gives back a reservation whose memory is all unmapped.
  virtual void release(void* /*base*/, std::size_t /*bytes*/) {}
};

// Host memory from mmap: page-aligned (>= 4096, so AVX-512 loads are aligned)
// and returned to the OS on free. mmap rather than malloc because a failed
// request returns nullptr under every sanitizer and segments are large anyway.
class HostBackend final : public RawBackend {
 public:
  const char* name() const override { return "host"; }
  void* alloc(std::size_t nbytes) override;
  void free(void* p, std::size_t nbytes) override;
  std::size_t total_memory() const override;  // physical RAM
  bool can_reserve() const override { return true; }
  void* reserve(std::size_t bytes) override;
  bool map(void* at, std::size_t bytes) override;
  void unmap(void* at, std::size_t bytes) override;
  void release(void* base, std::size_t bytes) override;
};

// Address ranges only: alloc never touches memory, so a simulated device may
// be far larger than the machine. Addresses start at a high, 2 MiB-aligned
// base and are handed out by a bump pointer (never reused: 2^46 bytes of
// addresses last a very long replay). Never dereference them.
class SimulatedBackend final : public RawBackend {
 public:
  explicit SimulatedBackend(std::size_t total_memory = std::size_t{80} << 30) : total_(total_memory) {}
  const char* name() const override { return "simulated"; }
  void* alloc(std::size_t nbytes) override;
  void free(void* p, std::size_t nbytes) override;
  std::size_t total_memory() const override { return total_; }
  // Bytes currently handed out (the backend enforces total_memory too).
  std::size_t in_use() const;
  // Reservations come from their own addresses above 2^52; mapped bytes count in in_use.
  bool can_reserve() const override { return true; }
  void* reserve(std::size_t bytes) override;
  bool map(void* at, std::size_t bytes) override;
  void unmap(void* at, std::size_t bytes) override;
  void release(void*, std::size_t) override {}

 private:
  std::size_t total_;
  mutable std::mutex mu_;
  std::uintptr_t next_ = std::uintptr_t{1} << 44;
  std::uintptr_t next_reserve_ = std::uintptr_t{1} << 52;
  std::size_t in_use_ = 0;
};

}  // namespace snug::memory
