// HostServices (see host_services.hpp): the checked, counted face, and the
// process's implementation.
#include "backend/host_services/host_services.hpp"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>

#include "backend/host_services/host_io.hpp"
#include "common/status.hpp"

namespace vpmm {

vpmm_status HostServices::host_alloc_pageable(uint64_t size, void** out) {
  count(Op::pageable_alloc);
  if (out == nullptr) return fail(VPMM_ERR_INVALID_ARGUMENT, "host_alloc_pageable: out is NULL");
  if (size == 0) return fail(VPMM_ERR_INVALID_ARGUMENT, "host_alloc_pageable: size 0 is not allowed");
  vpmm_status st = do_host_alloc_pageable(size, out);
  if (st == VPMM_OK) counters_.live_pageable.fetch_add(1);
  return st;
}

vpmm_status HostServices::host_free_pageable(void* p, uint64_t size) {
  count(Op::pageable_free);
  vpmm_status st = do_host_free_pageable(p, size);
  if (st == VPMM_OK) counters_.live_pageable.fetch_sub(1);
  return st;
}

vpmm_status HostServices::dir_open(const std::string& path, DirHandle* out) {
  count(Op::dir_open);
  if (out == nullptr) return fail(VPMM_ERR_INVALID_ARGUMENT, "dir_open: out is NULL");
  vpmm_status st = do_dir_open(path, out);
  if (st == VPMM_OK) counters_.live_dir_handles.fetch_add(1);
  return st;
}

vpmm_status HostServices::dir_close(DirHandle d) {
  count(Op::dir_close);
  vpmm_status st = do_dir_close(d);
  if (st == VPMM_OK) counters_.live_dir_handles.fetch_sub(1);
  return st;
}

vpmm_status HostServices::dir_check(DirHandle d, bool* removed) {
  count(Op::dir_check);
  if (removed == nullptr) return fail(VPMM_ERR_INVALID_ARGUMENT, "dir_check: removed is NULL");
  return do_dir_check(d, removed);
}

vpmm_status HostServices::file_create(DirHandle dir, uint64_t size, FileRef* ref, FileHandle* out) {
  count(Op::file_create);
  if (ref == nullptr || out == nullptr) return fail(VPMM_ERR_INVALID_ARGUMENT, "file_create: ref or out is NULL");
  if (size == 0) return fail(VPMM_ERR_INVALID_ARGUMENT, "file_create: size 0 is not allowed");
  vpmm_status st = do_file_create(dir, size, ref, out);
  if (st == VPMM_OK) {
    counters_.live_files.fetch_add(1);
    counters_.live_file_handles.fetch_add(1);
  }
  return st;
}

vpmm_status HostServices::file_write(FileHandle f, const void* src, uint64_t size, uint64_t offset) {
  count(Op::file_write);
  if (src == nullptr && size != 0) return fail(VPMM_ERR_INVALID_ARGUMENT, "file_write: src is NULL");
  return do_file_write(f, src, size, offset);
}

vpmm_status HostServices::file_read(FileHandle f, void* dst, uint64_t size, uint64_t offset) {
  count(Op::file_read);
  if (dst == nullptr && size != 0) return fail(VPMM_ERR_INVALID_ARGUMENT, "file_read: dst is NULL");
  return do_file_read(f, dst, size, offset);
}

vpmm_status HostServices::file_close(FileHandle f) {
  count(Op::file_close);
  vpmm_status st = do_file_close(f);
  if (st == VPMM_OK) counters_.live_file_handles.fetch_sub(1);
  return st;
}

vpmm_status HostServices::file_remove(const FileRef& ref, FileHandle f) {
  count(Op::file_remove);
  vpmm_status st = do_file_remove(ref, f);
  if (st == VPMM_OK) counters_.live_files.fetch_sub(1);
  return st;
}

vpmm_status HostServices::host_copy(void* dst, const void* src, uint64_t size) {
  count(Op::host_copy);
  if (size == 0) return VPMM_OK;
  if (dst == nullptr || src == nullptr)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "host_copy: %s is NULL", dst ? "src" : "dst");
  return do_host_copy(dst, src, size);
}

namespace {

unsigned long long ull(uint64_t v) { return static_cast<unsigned long long>(v); }

// The process's services. Pageable memory is anonymous private pages,
// huge-page advised (a backup's pages are faulted by its first copy, and
// 2 MiB faults made the H200's D2H into fresh memory 2.5x faster), tracked
// so that a pointer it did not hand out, or a wrong size, is refused.
class SystemHostServices final : public HostServices {
 protected:
  vpmm_status do_host_alloc_pageable(uint64_t size, void** out) override {
    static const char* const who = "host_alloc_pageable";
    if (size > static_cast<uint64_t>(SIZE_MAX))
      return fail(VPMM_ERR_OUT_OF_MEMORY, "%s: size %llu does not fit in memory", who, ull(size));
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      return fail(err == ENOMEM ? VPMM_ERR_OUT_OF_MEMORY : VPMM_ERR_BACKEND, "%s: mmap of %llu bytes failed: %s",
                  who, ull(size), std::strerror(err));
    }
    (void)madvise(p, size, MADV_HUGEPAGE);  // advice only: without it, 4 KiB pages
    try {
      std::lock_guard<std::mutex> lk(mu_);
      pageable_.emplace(p, size);
    } catch (const std::bad_alloc&) {
      munmap(p, size);
      return fail(VPMM_ERR_OUT_OF_MEMORY, "%s: out of host memory", who);
    }
    *out = p;
    return VPMM_OK;
  }
  vpmm_status do_host_free_pageable(void* p, uint64_t size) override {
    static const char* const who = "host_free_pageable";
    std::lock_guard<std::mutex> lk(mu_);
    auto it = pageable_.find(p);
    if (it == pageable_.end())
      return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: 0x%llx was not returned by host_alloc_pageable (or was already freed)",
                  who, ull(reinterpret_cast<uintptr_t>(p)));
    if (it->second != size)
      return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: size %llu is not the size %llu of 0x%llx", who, ull(size),
                  ull(it->second), ull(reinterpret_cast<uintptr_t>(p)));
    munmap(p, size);
    pageable_.erase(it);
    return VPMM_OK;
  }
  vpmm_status do_dir_open(const std::string& path, DirHandle* out) override { return host_io::dir_open(path, out); }
  vpmm_status do_dir_close(DirHandle d) override { return host_io::dir_close(d); }
  vpmm_status do_dir_check(DirHandle d, bool* removed) override { return host_io::dir_check(d, removed); }
  vpmm_status do_file_create(DirHandle dir, uint64_t size, FileRef* ref, FileHandle* out) override {
    return host_io::file_create(dir, size, ref, out);
  }
  vpmm_status do_file_write(FileHandle f, const void* src, uint64_t size, uint64_t offset) override {
    return host_io::file_write(f, src, size, offset);
  }
  vpmm_status do_file_read(FileHandle f, void* dst, uint64_t size, uint64_t offset) override {
    return host_io::file_read(f, dst, size, offset);
  }
  vpmm_status do_file_close(FileHandle f) override { return host_io::file_close(f); }
  vpmm_status do_file_remove(const FileRef& ref, FileHandle f) override { return host_io::file_remove(ref, f); }
  vpmm_status do_host_copy(void* dst, const void* src, uint64_t size) override {
    return host_io::copy(dst, src, size);
  }

 private:
  std::mutex mu_;
  std::unordered_map<void*, uint64_t> pageable_;  // handed out: size
};

}  // namespace

std::unique_ptr<HostServices> make_host_services() { return std::unique_ptr<HostServices>(new SystemHostServices); }

std::shared_ptr<HostServices> make_shared_host_services() { return std::shared_ptr<HostServices>(new SystemHostServices); }

}  // namespace vpmm
