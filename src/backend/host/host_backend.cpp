// The host backend: CUDA's virtual memory management rebuilt from Linux
// primitives, so the pool runs (and is tested) on a CPU exactly as on a GPU.
// Concern: reservations, physical handles and mappings, and the driver rules
// on them; streams and events live in host_streams.cpp.
//
// Physical memory is one memfd per backend; a handle is a range of it, given
// out by a best-fit OffsetAllocator. A reservation is an anonymous PROT_NONE
// mapping; map() puts a MAP_SHARED view of the handle's range over part of it
// (still PROT_NONE until set_access), and unmap() puts anonymous PROT_NONE
// back, so a stale touch faults just as a GPU would. Mapping one handle at two
// addresses is real double mapping: both views share the same pages.
//
// An exportable backend (BackendParams::exportable, docs/ipc.md) gives each
// handle a memfd of its own instead: it can then be passed to another
// process, and the kernel keeps its pages while any process holds the fd or
// maps it, as CUDA keeps exported memory alive. An imported handle is such a
// memfd received from elsewhere; it counts in no capacity of this backend.
//
// Invariants (all under mu_):
//  - held_bytes_ = sum of the sizes of handles whose memory still exists
//    (live handles, and released handles that are still mapped: CUDA frees
//    a released handle's memory only at its last unmap), imported ones
//    excepted. held_bytes_ <= capacity_.
//  - A handle with its own memfd (fd >= 0) has offset 0 in it and no range
//    of offsets_.
//  - Each handle's range is disjoint from every other handle's and from the
//    free ranges of offsets_; together they cover [0, file_size_).
//  - A range goes back to offsets_ only after its pages are punched out, so
//    memory returns to the OS and a recycled range reads as zeros.
//  - mappings_ never overlap, and each lies inside one reservation; `maps` of
//    a handle counts its entries in mappings_.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>

#include "backend/backend.hpp"
#include "backend/host/host_ipc.hpp"
#include "backend/host/host_offsets.hpp"
#include "backend/registry.hpp"
#include "backend/host/host_streams.hpp"
#include "common/status.hpp"

namespace vpmm {
namespace {

constexpr uint64_t kDefaultCapacity = 1ull << 30;      // 1 GiB
constexpr uint64_t kMaxCapacity = 1ull << 60;          // keeps file-size arithmetic far from overflow
constexpr uint64_t kRecommendedPage = 2ull << 20;      // 2 MiB, as on CUDA
constexpr uint64_t kDefaultVaSize = 64ull << 30;       // 64 GiB per chunk
constexpr uint64_t kMaxFileSize = 1ull << 62;

unsigned long long ull(uint64_t v) { return static_cast<unsigned long long>(v); }

// ENOMEM from the kernel is the host's out-of-memory (or out of VMAs, which
// the pool should treat the same way: back off and free something).
vpmm_status errno_status(int err) {
  return err == ENOMEM ? VPMM_ERR_OUT_OF_MEMORY : VPMM_ERR_BACKEND;
}

// What an address-space reservation could have had when one failed: the
// largest free range between this process's mappings (/proc/self/maps) and
// RLIMIT_AS when it is set. Read only on that failure.
std::string address_space_room() {
  uint64_t largest = 0, prev_end = 1ull << 16;  // below: vm.mmap_min_addr
  bool read = false;
  if (FILE* f = std::fopen("/proc/self/maps", "r")) {
    unsigned long long lo = 0, hi = 0;
    char line[512];
    while (std::fgets(line, sizeof line, f)) {
      // The kernel's [vsyscall] page sits at the top of the 64-bit space,
      // far above any user range: not a bound of the free space below it.
      if (std::sscanf(line, "%llx-%llx", &lo, &hi) != 2 || lo >= (1ull << 63)) continue;
      if (lo > prev_end && lo - prev_end > largest) largest = lo - prev_end;
      if (hi > prev_end) prev_end = hi;
      read = true;
    }
    std::fclose(f);
  }
  char buf[160];
  int n = read ? std::snprintf(buf, sizeof buf, "largest free range %llu bytes", ull(largest))
               : std::snprintf(buf, sizeof buf, "free ranges unknown");
  struct rlimit rl;
  if (n > 0 && n < static_cast<int>(sizeof buf) && getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    std::snprintf(buf + n, sizeof buf - n, ", RLIMIT_AS %llu bytes in all",
                  ull(static_cast<uint64_t>(rl.rlim_cur)));
  return buf;
}

// Every do_* body runs inside this: no exception leaves the backend.
template <class F>
vpmm_status guarded(const char* who, F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return fail(VPMM_ERR_OUT_OF_MEMORY, "%s: out of host memory for bookkeeping", who);
  } catch (const std::exception& ex) {
    return fail(VPMM_ERR_INTERNAL, "%s: unexpected exception: %s", who, ex.what());
  } catch (...) {
    return fail(VPMM_ERR_INTERNAL, "%s: unexpected exception", who);
  }
}

// Handle values are unique across every host backend of the process, so a
// handle passed to the wrong backend is "unknown" rather than someone else's.
std::atomic<uint64_t> g_next_handle{1};

struct CopyJob {
  void* dst;
  const void* src;
  size_t size;
};

void run_copy(void* p) {
  CopyJob* job = static_cast<CopyJob*>(p);
  std::memcpy(job->dst, job->src, job->size);
  delete job;
}

class HostBackend final : public Backend {
 public:
  HostBackend(int fd, uint64_t capacity, uint64_t file_size, uint64_t gran, bool exportable, int device)
      : fd_(fd), capacity_(capacity), gran_(gran), exportable_(exportable), device_(device),
        file_size_(file_size) {
    offsets_.release(0, file_size);
  }

  ~HostBackend() override {
    // The pool should have returned everything; whatever is left must not
    // leak address space or the memfd. Unmapping a reservation drops every
    // mapping inside it, and closing the fd then frees the pages.
    for (const auto& r : reservations_)
      munmap(reinterpret_cast<void*>(static_cast<uintptr_t>(r.first)), r.second);
    for (const auto& p : pinned_) munmap(p.first, p.second);
    for (const auto& h : handles_)
      if (h.second.fd >= 0) close(h.second.fd);
    close(fd_);
  }

  const char* name() const override { return backend_kind_name(VPMM_BACKEND_HOST); }
  int32_t kind() const override { return VPMM_BACKEND_HOST; }
  uint64_t granularity() const override { return gran_; }
  uint64_t recommended_page_size() const override { return kRecommendedPage; }
  uint64_t default_va_size() const override { return kDefaultVaSize; }
  // Copies are real (memcpy on the stream's worker). "Pinned" memory is
  // claimed because for a CPU copy every page is as fast as a pinned one, so
  // the pinned path (its cache and limit) runs as it would on a GPU. Memory
  // info is the capacity and what handles hold of it.
  uint32_t capabilities() const override {
    return kCapDeviceCopy | kCapPinnedHost | kCapMemInfo | (exportable_ ? kCapExport : 0u);
  }
  int device() const override { return 0; }
  uint64_t max_handle_size() const override { return 0; }  // any size up to the capacity
 protected:
  bool do_stream_valid(Stream s) const override { return host::stream_is_valid(s); }
  vpmm_status do_reserve(uint64_t size, uint64_t alignment, uint64_t* va) override;
  vpmm_status do_unreserve(uint64_t va, uint64_t size) override;
  vpmm_status do_create(uint64_t size, PhysHandle* out) override;
  vpmm_status do_release(PhysHandle h, uint64_t size) override;
  vpmm_status do_map(uint64_t va, uint64_t size, PhysHandle h) override;
  vpmm_status do_unmap(uint64_t va, uint64_t size) override;
  vpmm_status do_set_access(uint64_t va, uint64_t size) override;

  vpmm_status do_event_record(Stream s, EventHandle* out) override {
    return host::event_record(s, out);
  }
  vpmm_status do_event_query(EventHandle e, bool* done) override {
    return host::event_query(e, done);
  }
  vpmm_status do_event_destroy(EventHandle e) override { return host::event_destroy(e); }
  vpmm_status do_stream_wait(Stream s, EventHandle e) override {
    return host::stream_wait_event(s, e);
  }
  vpmm_status do_event_sync(EventHandle e) override { return host::event_sync(e); }
  vpmm_status do_stream_sync(Stream s) override {
    return host::stream_synchronize(s, "host stream_sync");
  }

  vpmm_status do_copy_d2h(void* dst, uint64_t src, uint64_t size, Stream s) override;
  vpmm_status do_copy_h2d(uint64_t dst, const void* src, uint64_t size, Stream s) override;
  vpmm_status do_host_alloc_pinned(uint64_t size, void** out) override;
  vpmm_status do_host_free_pinned(void* p, uint64_t size) override;
  vpmm_status do_mem_info(uint64_t* free_bytes, uint64_t* total_bytes) override;
  vpmm_status do_stream_create(Stream* out) override { return host::stream_create(out); }
  vpmm_status do_stream_destroy(Stream s) override { return host::stream_destroy(s); }
  // A destroyed host stream drained its work, and live ones are synchronised
  // through their own events: nothing device-wide is left to wait for.
  vpmm_status do_device_sync() override { return VPMM_OK; }
  vpmm_status do_device_id(uint8_t out[16]) override {
    host::device_id(device_, out);
    return VPMM_OK;
  }
  vpmm_status do_export_handle(PhysHandle h, uint64_t size, int* fd) override;
  vpmm_status do_import_handle(int fd, uint64_t size, PhysHandle* out) override;
  bool do_same_memory(PhysHandle h, uint64_t size, int fd) override;

 private:
  struct Handle {
    uint64_t offset;
    uint64_t size;
    uint64_t maps = 0;
    bool released = false;
    int fd = -1;            // its own memfd (exportable or imported), else a range of fd_
    bool imported = false;  // memory of another backend, usually of another process
  };
  struct Mapping {
    uint64_t size;
    PhysHandle handle;
    bool access = false;
  };

  static void* ptr(uint64_t va) { return reinterpret_cast<void*>(static_cast<uintptr_t>(va)); }
  // Anonymous PROT_NONE over [va, va+size): what a reservation is made of.
  static bool make_inaccessible(uint64_t va, uint64_t size) {
    return mmap(ptr(va), size, PROT_NONE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                -1, 0) != MAP_FAILED;
  }
  void free_memory_locked(std::map<PhysHandle, Handle>::iterator it);
  vpmm_status check_accessible_locked(uint64_t va, uint64_t size, const char* who);
  vpmm_status submit_copy(void* dst, const void* src, uint64_t size, Stream s, const char* who);

  std::mutex mu_;
  const int fd_;
  const uint64_t capacity_;
  const uint64_t gran_;
  const bool exportable_;
  const int device_;  // BackendParams::device: only the identity device_id reports
  uint64_t file_size_;
  uint64_t held_bytes_ = 0;
  host::OffsetAllocator offsets_;
  std::map<PhysHandle, Handle> handles_;
  std::map<uint64_t, uint64_t> reservations_;  // va -> size
  std::map<uint64_t, Mapping> mappings_;       // va -> mapping
  std::map<void*, uint64_t> pinned_;           // pointer -> size
};

// The last reference to a handle's memory is gone: return the pages to the
// OS and the range to the allocator. If the hole cannot be punched, zero the
// range by hand so that a recycled range still reads as zeros; if even that
// fails, the range is never reused (address space lost, correctness kept).
void HostBackend::free_memory_locked(std::map<PhysHandle, Handle>::iterator it) {
  if (it->second.fd >= 0) {
    // The kernel frees the pages once no process holds the file or maps it.
    close(it->second.fd);
    if (!it->second.imported) held_bytes_ -= it->second.size;
    handles_.erase(it);
    return;
  }
  const uint64_t off = it->second.offset;
  const uint64_t size = it->second.size;
  bool clean = fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(off),
                         static_cast<off_t>(size)) == 0;
  if (!clean) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, static_cast<off_t>(off));
    if (p != MAP_FAILED) {
      std::memset(p, 0, size);
      munmap(p, size);
      clean = true;
    }
  }
  if (clean) offsets_.release(off, size);
  held_bytes_ -= size;
  handles_.erase(it);
}

vpmm_status HostBackend::do_reserve(uint64_t size, uint64_t alignment, uint64_t* va) {
  static const char* const who = "host reserve";
  if (va == nullptr) return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: va is NULL", who);
  if (alignment != 0 && (alignment & (alignment - 1)) != 0)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: alignment %llu is not a power of two", who,
                ull(alignment));
  const uint64_t align = alignment < gran_ ? gran_ : alignment;
  // Over-reserve by (align - gran) so an aligned start exists, then trim.
  if (size > UINT64_MAX - align || size + (align - gran_) > static_cast<uint64_t>(SIZE_MAX))
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: size %llu with alignment %llu overflows", who,
                ull(size), ull(align));
  return guarded(who, [&] {
    std::lock_guard<std::mutex> lk(mu_);
    const uint64_t span = size + (align - gran_);
    void* p = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      if (err == ENOMEM)
        return fail(VPMM_ERR_OUT_OF_MEMORY,
                    "%s: %llu bytes of address space exceed what this process can reserve (%s): "
                    "mmap: %s",
                    who, ull(span), address_space_room().c_str(), std::strerror(err));
      return fail(errno_status(err), "%s: mmap of %llu bytes of address space failed: %s", who,
                  ull(span), std::strerror(err));
    }
    const uint64_t raw = reinterpret_cast<uintptr_t>(p);
    const uint64_t base = (raw + align - 1) & ~(align - 1);
    if (base > raw) munmap(p, base - raw);
    if (raw + span > base + size) munmap(ptr(base + size), raw + span - (base + size));
    try {
      reservations_.emplace(base, size);
    } catch (...) {
      munmap(ptr(base), size);
      throw;
    }
    *va = base;
    return VPMM_OK;
  });
}

vpmm_status HostBackend::do_unreserve(uint64_t va, uint64_t size) {
  static const char* const who = "host unreserve";
  return guarded(who, [&] {
    std::lock_guard<std::mutex> lk(mu_);
    auto r = reservations_.find(va);
    if (r == reservations_.end())
      return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: va 0x%llx is not the start of a reservation",
                  who, ull(va));
    if (r->second != size)
      return fail(VPMM_ERR_INVALID_ARGUMENT,
                  "%s: size %llu is not the size %llu of the reservation at 0x%llx (a reservation "
                  "is released whole)",
                  who, ull(size), ull(r->second), ull(va));
    auto m = mappings_.lower_bound(va);
    if (m != mappings_.end() && m->first < va + size)
      return fail(VPMM_ERR_INVALID_ARGUMENT,
                  "%s: reservation at 0x%llx still has a mapping at 0x%llx (unmap first)", who,
                  ull(va), ull(m->first));
    if (munmap(ptr(va), size) != 0) {
      int err = errno;
      return fail(VPMM_ERR_BACKEND, "%s: munmap(0x%llx, %llu) failed: %s", who, ull(va),
                  ull(size), std::strerror(err));
    }
    reservations_.erase(r);
    return VPMM_OK;
  });
}

vpmm_status HostBackend::do_create(uint64_t size, PhysHandle* out) {
  static const char* const who = "host create";
  if (out == nullptr) return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: out is NULL", who);
  return guarded(who, [&] {
    std::lock_guard<std::mutex> lk(mu_);
    if (size > capacity_ - held_bytes_)
      return fail(VPMM_ERR_OUT_OF_MEMORY,
                  "%s: a %llu-byte handle would pass host_capacity %llu: handles hold %llu (a "
                  "growth's earlier ones included)",
                  who, ull(size), ull(capacity_), ull(held_bytes_));
    if (exportable_) {
      int fd = -1;
      vpmm_status st = host::create_handle_memfd(size, &fd, who);
      if (st != VPMM_OK) return st;
      const PhysHandle id = g_next_handle.fetch_add(1, std::memory_order_relaxed);
      try {
        Handle hd{0, size};
        hd.fd = fd;
        handles_.emplace(id, hd);
      } catch (...) {
        close(fd);
        throw;
      }
      held_bytes_ += size;
      *out = id;
      return VPMM_OK;
    }
    uint64_t off = 0;
    if (!offsets_.allocate(size, &off)) {
      // Capacity allows it but no free range is long enough: grow the sparse
      // file instead of failing (new file space costs no memory).
      const uint64_t grow = size > file_size_ ? size : file_size_;
      if (file_size_ + grow > kMaxFileSize)
        return fail(VPMM_ERR_OUT_OF_MEMORY, "%s: memfd would grow past %llu bytes", who,
                    ull(kMaxFileSize));
      if (ftruncate(fd_, static_cast<off_t>(file_size_ + grow)) != 0) {
        int err = errno;
        return fail(VPMM_ERR_OUT_OF_MEMORY, "%s: cannot grow the memfd to %llu bytes: %s", who,
                    ull(file_size_ + grow), std::strerror(err));
      }
      offsets_.release(file_size_, grow);
      file_size_ += grow;
      if (!offsets_.allocate(size, &off))
        return fail(VPMM_ERR_OUT_OF_MEMORY, "%s: no memfd range of %llu bytes", who, ull(size));
    }
    const PhysHandle id = g_next_handle.fetch_add(1, std::memory_order_relaxed);
    try {
      handles_.emplace(id, Handle{off, size});
    } catch (...) {
      offsets_.release(off, size);  // untouched since allocation: still zeros
      throw;
    }
    held_bytes_ += size;
    *out = id;
    return VPMM_OK;
  });
}

vpmm_status HostBackend::do_release(PhysHandle h, uint64_t size) {
  static const char* const who = "host release";
  return guarded(who, [&] {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = handles_.find(h);
    if (it == handles_.end() || it->second.released)
      return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: handle %llu is not a live handle%s", who, ull(h),
                  it == handles_.end() ? "" : " (already released)");
    if (it->second.size != size)
      return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: size %llu is not the size %llu of handle %llu",
                  who, ull(size), ull(it->second.size), ull(h));
    // CUDA semantics: releasing a mapped handle is allowed; its memory lives
    // until the last mapping is gone.
    it->second.released = true;
    if (it->second.maps == 0) free_memory_locked(it);
    return VPMM_OK;
  });
}

vpmm_status HostBackend::do_map(uint64_t va, uint64_t size, PhysHandle h) {
  static const char* const who = "host map";
  if (size > UINT64_MAX - va)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: va 0x%llx + size %llu overflows", who, ull(va),
                ull(size));
  return guarded(who, [&] {
    std::lock_guard<std::mutex> lk(mu_);
    auto r = reservations_.upper_bound(va);
    if (r == reservations_.begin() || va >= std::prev(r)->first + std::prev(r)->second)
      return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: va 0x%llx is not inside a reservation", who,
                  ull(va));
    --r;
    if (va + size > r->first + r->second)
      return fail(VPMM_ERR_INVALID_ARGUMENT,
                  "%s: [0x%llx, 0x%llx) runs past the end of the reservation [0x%llx, 0x%llx)", who,
                  ull(va), ull(va + size), ull(r->first), ull(r->first + r->second));
    auto m = mappings_.lower_bound(va + size);
    if (m != mappings_.begin() && std::prev(m)->first + std::prev(m)->second.size > va) {
      --m;
      return fail(VPMM_ERR_INVALID_ARGUMENT,
                  "%s: [0x%llx, 0x%llx) overlaps the mapping [0x%llx, 0x%llx) (unmap it first)",
                  who, ull(va), ull(va + size), ull(m->first), ull(m->first + m->second.size));
    }
    auto it = handles_.find(h);
    if (it == handles_.end() || it->second.released)
      return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: handle %llu is not a live handle%s", who, ull(h),
                  it == handles_.end() ? "" : " (it was released)");
    Handle& hd = it->second;
    if (size < hd.size)
      return fail(VPMM_ERR_UNSUPPORTED,
                  "%s: size %llu is part of handle %llu of %llu bytes; a handle maps whole "
                  "(CUDA: operation not supported)",
                  who, ull(size), ull(h), ull(hd.size));
    if (size > hd.size)
      return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: size %llu exceeds handle %llu of %llu bytes",
                  who, ull(size), ull(h), ull(hd.size));
    auto ins = mappings_.emplace(va, Mapping{size, h}).first;  // may throw: nothing done yet
    void* p = mmap(ptr(va), size, PROT_NONE, MAP_FIXED | MAP_SHARED, hd.fd >= 0 ? hd.fd : fd_,
                   static_cast<off_t>(hd.offset));
    if (p != ptr(va)) {
      int err = p == MAP_FAILED ? errno : EINVAL;
      // A failed MAP_FIXED may already have dropped the old pages: put the
      // reservation's PROT_NONE back so the VA stays reserved.
      make_inaccessible(va, size);
      mappings_.erase(ins);
      return fail(errno_status(err), "%s: mmap of handle %llu at 0x%llx (%llu bytes) failed: %s",
                  who, ull(h), ull(va), ull(size), std::strerror(err));
    }
    hd.maps += 1;
    return VPMM_OK;
  });
}

vpmm_status HostBackend::do_unmap(uint64_t va, uint64_t size) {
  static const char* const who = "host unmap";
  return guarded(who, [&] {
    std::lock_guard<std::mutex> lk(mu_);
    auto m = mappings_.find(va);
    if (m == mappings_.end()) {
      auto before = mappings_.upper_bound(va);
      if (before != mappings_.begin() && std::prev(before)->first + std::prev(before)->second.size > va)
        return fail(VPMM_ERR_INVALID_ARGUMENT,
                    "%s: va 0x%llx is inside the mapping at 0x%llx; a mapping is unmapped whole", who,
                    ull(va), ull(std::prev(before)->first));
      return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: no mapping starts at va 0x%llx", who, ull(va));
    }
    if (m->second.size != size)
      return fail(VPMM_ERR_INVALID_ARGUMENT,
                  "%s: size %llu is not the size %llu of the mapping at 0x%llx; a mapping is "
                  "unmapped whole",
                  who, ull(size), ull(m->second.size), ull(va));
    if (!make_inaccessible(va, size)) {
      int err = errno;
      return fail(errno_status(err), "%s: replacing the mapping at 0x%llx failed: %s", who,
                  ull(va), std::strerror(err));
    }
    auto h = handles_.find(m->second.handle);
    mappings_.erase(m);
    if (h != handles_.end()) {
      h->second.maps -= 1;
      if (h->second.released && h->second.maps == 0) free_memory_locked(h);
    }
    return VPMM_OK;
  });
}

vpmm_status HostBackend::do_export_handle(PhysHandle h, uint64_t size, int* fd) {
  static const char* const who = "host export_handle";
  return guarded(who, [&] {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = handles_.find(h);
    if (it == handles_.end() || it->second.released)
      return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: handle %llu is not a live handle", who, ull(h));
    if (it->second.size != size)
      return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: size %llu is not the size %llu of handle %llu", who,
                  ull(size), ull(it->second.size), ull(h));
    if (it->second.fd < 0 || it->second.imported)
      return fail(VPMM_ERR_UNSUPPORTED, "%s: handle %llu was not created exportable", who, ull(h));
    if (fd == nullptr) return VPMM_OK;  // prepared ahead: an export here is a dup, nothing to prepare
    return host::dup_fd(it->second.fd, fd, who);
  });
}

vpmm_status HostBackend::do_import_handle(int fd, uint64_t size, PhysHandle* out) {
  static const char* const who = "host import_handle";
  return guarded(who, [&] {
    vpmm_status st = host::check_handle_fd(fd, size, who);
    if (st != VPMM_OK) return st;
    int mine = -1;
    if ((st = host::dup_fd(fd, &mine, who)) != VPMM_OK) return st;
    std::lock_guard<std::mutex> lk(mu_);
    const PhysHandle id = g_next_handle.fetch_add(1, std::memory_order_relaxed);
    try {
      Handle hd{0, size};
      hd.fd = mine;
      hd.imported = true;
      handles_.emplace(id, hd);
    } catch (...) {
      close(mine);
      throw;
    }
    *out = id;
    return VPMM_OK;
  });
}

bool HostBackend::do_same_memory(PhysHandle h, uint64_t size, int fd) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = handles_.find(h);
  if (it == handles_.end() || it->second.released || !it->second.imported || it->second.size != size) return false;
  // A live memfd's inode is its memory: no other file has its number while
  // the handle holds it open.
  struct stat a, b;
  return fstat(it->second.fd, &a) == 0 && fstat(fd, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

vpmm_status HostBackend::do_set_access(uint64_t va, uint64_t size) {
  static const char* const who = "host set_access";
  if (size > UINT64_MAX - va)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: va 0x%llx + size %llu overflows", who, ull(va),
                ull(size));
  return guarded(who, [&] {
    std::lock_guard<std::mutex> lk(mu_);
    const uint64_t end = va + size;
    // The range must be exactly a run of adjacent whole mappings.
    auto first = mappings_.find(va);
    if (first == mappings_.end())
      return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: no mapping starts at va 0x%llx", who, ull(va));
    uint64_t cur = va;
    auto it = first;
    while (cur < end) {
      if (it == mappings_.end() || it->first != cur)
        return fail(VPMM_ERR_INVALID_ARGUMENT,
                    "%s: [0x%llx, 0x%llx) is not covered by mappings: nothing mapped at 0x%llx", who,
                    ull(va), ull(end), ull(cur));
      cur += it->second.size;
      ++it;
    }
    if (cur != end)
      return fail(VPMM_ERR_INVALID_ARGUMENT,
                  "%s: [0x%llx, 0x%llx) ends inside the mapping that ends at 0x%llx (ranges cover "
                  "whole mappings)",
                  who, ull(va), ull(end), ull(cur));
    if (mprotect(ptr(va), size, PROT_READ | PROT_WRITE) != 0) {
      int err = errno;
      return fail(errno_status(err), "%s: mprotect(0x%llx, %llu) failed: %s", who, ull(va),
                  ull(size), std::strerror(err));
    }
    for (auto m = first; m != it; ++m) m->second.access = true;
    return VPMM_OK;
  });
}

// A copy may only touch mapped memory with access set, like a GPU copy that
// would otherwise fault. Checked when the copy is queued; the pool's event
// discipline keeps it mapped until the copy has run.
vpmm_status HostBackend::check_accessible_locked(uint64_t va, uint64_t size, const char* who) {
  if (size > UINT64_MAX - va)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: va 0x%llx + size %llu overflows", who, ull(va),
                ull(size));
  const uint64_t end = va + size;
  auto it = mappings_.upper_bound(va);
  if (it == mappings_.begin() || std::prev(it)->first + std::prev(it)->second.size <= va)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: va 0x%llx is not mapped", who, ull(va));
  --it;
  for (;;) {
    if (!it->second.access)
      return fail(VPMM_ERR_INVALID_ARGUMENT,
                  "%s: the mapping at 0x%llx has no access yet (set_access not called)", who,
                  ull(it->first));
    const uint64_t mend = it->first + it->second.size;
    if (mend >= end) return VPMM_OK;
    ++it;
    if (it == mappings_.end() || it->first != mend)
      return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: [0x%llx, 0x%llx) is not mapped at 0x%llx", who,
                  ull(va), ull(end), ull(mend));
  }
}

vpmm_status HostBackend::submit_copy(void* dst, const void* src, uint64_t size, Stream s,
                                     const char* who) {
  CopyJob* job = new CopyJob{dst, src, static_cast<size_t>(size)};
  vpmm_status st = host::stream_submit(s, run_copy, job, who);
  if (st != VPMM_OK) delete job;  // not run, still ours
  return st;
}

vpmm_status HostBackend::do_copy_d2h(void* dst, uint64_t src, uint64_t size, Stream s) {
  static const char* const who = "host copy_d2h";
  if (size == 0) return VPMM_OK;
  if (dst == nullptr) return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: dst is NULL", who);
  return guarded(who, [&] {
    {
      std::lock_guard<std::mutex> lk(mu_);
      vpmm_status st = check_accessible_locked(src, size, who);
      if (st != VPMM_OK) return st;
    }
    return submit_copy(dst, ptr(src), size, s, who);
  });
}

vpmm_status HostBackend::do_copy_h2d(uint64_t dst, const void* src, uint64_t size, Stream s) {
  static const char* const who = "host copy_h2d";
  if (size == 0) return VPMM_OK;
  if (src == nullptr) return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: src is NULL", who);
  return guarded(who, [&] {
    {
      std::lock_guard<std::mutex> lk(mu_);
      vpmm_status st = check_accessible_locked(dst, size, who);
      if (st != VPMM_OK) return st;
    }
    return submit_copy(ptr(dst), src, size, s, who);
  });
}

// "Pinned" host memory is anonymous pages of its own mapping, as a GPU
// backend's is: every host page is as good as pinned for a CPU copy, and
// giving it back returns the pages to the OS whatever the C library's
// allocator keeps (the mmap store's RSS test relies on it). Tracked so that
// a bad pointer is refused, not freed.
vpmm_status HostBackend::do_host_alloc_pinned(uint64_t size, void** out) {
  static const char* const who = "host host_alloc_pinned";
  if (out == nullptr) return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: out is NULL", who);
  if (size == 0) return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: size 0 is not allowed", who);
  if (size > static_cast<uint64_t>(SIZE_MAX))
    return fail(VPMM_ERR_OUT_OF_MEMORY, "%s: size %llu does not fit in memory", who, ull(size));
  return guarded(who, [&] {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      return fail(errno_status(err), "%s: mmap of %llu bytes failed: %s", who, ull(size), std::strerror(err));
    }
    try {
      std::lock_guard<std::mutex> lk(mu_);
      pinned_.emplace(p, size);
    } catch (...) {
      munmap(p, size);
      throw;
    }
    *out = p;
    return VPMM_OK;
  });
}

vpmm_status HostBackend::do_host_free_pinned(void* p, uint64_t size) {
  static const char* const who = "host host_free_pinned";
  return guarded(who, [&] {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = pinned_.find(p);
    if (it == pinned_.end())
      return fail(VPMM_ERR_INVALID_ARGUMENT,
                  "%s: 0x%llx was not returned by host_alloc_pinned (or was already freed)", who,
                  ull(reinterpret_cast<uintptr_t>(p)));
    if (it->second != size)
      return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: size %llu is not the size %llu of 0x%llx", who,
                  ull(size), ull(it->second), ull(reinterpret_cast<uintptr_t>(p)));
    munmap(p, size);
    pinned_.erase(it);
    return VPMM_OK;
  });
}

vpmm_status HostBackend::do_mem_info(uint64_t* free_bytes, uint64_t* total_bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  if (free_bytes) *free_bytes = capacity_ - held_bytes_;
  if (total_bytes) *total_bytes = capacity_;
  return VPMM_OK;
}

std::unique_ptr<Backend> make_host_backend(const BackendParams& p, vpmm_status* st) {
  static const char* const who = "host backend";
  vpmm_status dummy;
  if (st == nullptr) st = &dummy;
  long page = sysconf(_SC_PAGESIZE);
  const uint64_t gran = page > 0 ? static_cast<uint64_t>(page) : 4096;
  if (p.peer_devices != 0) {
    *st = fail(VPMM_ERR_UNSUPPORTED, "%s: peer_devices 0x%llx: the host backend has no devices to "
               "give access to (peer access needs the CUDA backend)", who, ull(p.peer_devices));
    return nullptr;
  }
  uint64_t capacity = p.host_capacity == 0 ? kDefaultCapacity : p.host_capacity;
  if (capacity < gran) {
    // The OS page, not the pool's page_size (2 MiB by default), which the
    // pool checks next: say which page this is.
    *st = fail(VPMM_ERR_INVALID_ARGUMENT, "%s: host_capacity %llu is less than one OS page (%llu bytes, the "
               "host backend's granularity); a pool needs at least one of its own pages (page_size)",
               who, ull(capacity), ull(gran));
    return nullptr;
  }
  if (capacity > kMaxCapacity) {
    *st = fail(VPMM_ERR_INVALID_ARGUMENT, "%s: host_capacity %llu exceeds the maximum %llu", who,
               ull(capacity), ull(kMaxCapacity));
    return nullptr;
  }
  capacity -= capacity % gran;  // whole pages only: create() sizes are page multiples

  int fd = memfd_create("vpmm-host", MFD_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    *st = fail(err == ENOSYS ? VPMM_ERR_UNSUPPORTED : VPMM_ERR_BACKEND,
               "%s: memfd_create failed: %s", who, std::strerror(err));
    return nullptr;
  }
  // Sparse: the file length is address space for offsets, not memory. It
  // starts at the capacity and create() doubles it when fragmentation leaves
  // no range long enough (rare, and cheap: one ftruncate).
  const uint64_t file_size = capacity;
  if (ftruncate(fd, static_cast<off_t>(file_size)) != 0) {
    int err = errno;
    close(fd);
    *st = fail(VPMM_ERR_BACKEND, "%s: ftruncate of the memfd to %llu bytes failed: %s", who,
               ull(file_size), std::strerror(err));
    return nullptr;
  }
  std::unique_ptr<Backend> b;
  try {
    b.reset(new HostBackend(fd, capacity, file_size, gran, p.exportable, p.device));
  } catch (const std::bad_alloc&) {
    close(fd);
    *st = fail(VPMM_ERR_OUT_OF_MEMORY, "%s: out of host memory", who);
    return nullptr;
  }
  *st = VPMM_OK;
  return b;
}

// Memfd and mmap are all it needs: usable wherever libvpmm runs.
bool host_backend_usable() { return true; }

// The vpmm_host_streams.h functions, as this backend's extension.
const HostStreamControl kHostStreams = {
    host::stream_create,
    host::stream_destroy,
    host::stream_hold,
    host::stream_release,
    host::stream_launch,
    [](vpmm_stream s) { return host::stream_synchronize(s); },
};

}  // namespace

extern const BackendEntry kHostBackendEntry;
const BackendEntry kHostBackendEntry = {VPMM_BACKEND_HOST, backend_kind_name(VPMM_BACKEND_HOST), make_host_backend,
                                        host_backend_usable, &kHostStreams, nullptr};

}  // namespace vpmm
