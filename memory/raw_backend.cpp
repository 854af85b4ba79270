// SPDX-License-Identifier: MIT
#include <snug/memory/raw_backend.h>

#include <sys/mman.h>
#include <unistd.h>

namespace snug::memory {

// NOTE [ A readable page after each segment ]
// Each segment is mapped with one more page after it, read-only, so reading a
// few bytes past the segment's last block never faults. Code that loads a
// vector where it needs a scalar at a block's end relies on it: qemu's x86
// emulation does so for scalar FMAs with a memory operand (vfmadd231ss reads
// 16 bytes), and AdamW's loop over an optimizer state that ended a segment
// crashed with SIGSEGV under qemu-x86_64 while it ran natively. The page
// costs address space only: nothing writes it, and a read maps the zero page.
namespace {
std::size_t tail_page() {
  static const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return page;
}
}  // namespace

void* HostBackend::alloc(std::size_t nbytes) {
  const std::size_t tail = tail_page();
  void* p = ::mmap(nullptr, nbytes + tail, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  // The mapping spans round_up(nbytes) + one page: the last page is the tail.
  ::mprotect(static_cast<char*>(p) + (nbytes + tail - 1) / tail * tail, tail, PROT_READ);
  return p;
}

void HostBackend::free(void* p, std::size_t nbytes) { ::munmap(p, nbytes + tail_page()); }

std::size_t HostBackend::total_memory() const {
  long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) : 0;
}

// Addresses only: PROT_NONE pages cost no memory, and MAP_NORESERVE keeps a
// reservation the size of RAM from counting against overcommit.
void* HostBackend::reserve(std::size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// Readable and writable from now on; the kernel supplies each page when first touched.
bool HostBackend::map(void* at, std::size_t bytes) { return ::mprotect(at, bytes, PROT_READ | PROT_WRITE) == 0; }

// The pages go back to the kernel at once (MADV_DONTNEED), and the range is
// inaccessible again, so a use after unmap faults instead of reading zeros.
void HostBackend::unmap(void* at, std::size_t bytes) {
  ::madvise(at, bytes, MADV_DONTNEED);
  ::mprotect(at, bytes, PROT_NONE);
}

void HostBackend::release(void* base, std::size_t bytes) { ::munmap(base, bytes); }

void* SimulatedBackend::reserve(std::size_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  constexpr std::uintptr_t kAlign = std::uintptr_t{2} << 20;
  std::uintptr_t p = next_reserve_;
  next_reserve_ += (bytes + kAlign - 1) / kAlign * kAlign;
  return reinterpret_cast<void*>(p);
}

bool SimulatedBackend::map(void*, std::size_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  if (bytes > total_ - in_use_) return false;
  in_use_ += bytes;
  return true;
}

void SimulatedBackend::unmap(void*, std::size_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  in_use_ -= bytes;
}

void* SimulatedBackend::alloc(std::size_t nbytes) {
  std::lock_guard<std::mutex> l(mu_);
  if (nbytes > total_ - in_use_) return nullptr;
  // Keep every segment 2 MiB-aligned like a GPU driver would.
  constexpr std::uintptr_t kAlign = std::uintptr_t{2} << 20;
  std::uintptr_t p = next_;
  next_ += (nbytes + kAlign - 1) / kAlign * kAlign;
  in_use_ += nbytes;
  return reinterpret_cast<void*>(p);
}

void SimulatedBackend::free(void*, std::size_t nbytes) {
  std::lock_guard<std::mutex> l(mu_);
  in_use_ -= nbytes;
}

std::size_t SimulatedBackend::in_use() const {
  std::lock_guard<std::mutex> l(mu_);
  return in_use_;
}

}  // namespace snug::memory
