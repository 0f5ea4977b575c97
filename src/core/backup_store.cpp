// BackupStores (see backup_store.hpp). Pure C++: pinned memory comes from
// BackupBuffers, pageable memory and files from the backend.
#include "core/backup_store.hpp"

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>

#include "common/status.hpp"

namespace vpmm {

namespace {
constexpr size_t kMaxDirBytes = 4095;  // PATH_MAX less the NUL
}  // namespace

const char* store_name(Store s) {
  switch (s) {
    case Store::Pinned: return "pinned";
    case Store::Mmap: return "mmap";
    case Store::Disk: return "disk";
  }
  return "?";
}

BackupStores::~BackupStores() {
  // The pool releases every backup it holds before it goes; whatever is
  // left (a bug) still gives its memory and files back.
  std::unordered_set<Backup*> left;
  left.swap(live_);
  for (Backup* b : left) {
    live_.insert(b);
    release(b);
  }
  for (const Dir& d : dirs_) retired_dirs_.push_back(d.fd);
  for (DirHandle fd : retired_dirs_)
    if (fd >= 0 && backend_.dir_close(fd) != VPMM_OK) backend_.dir_close(fd);
}

vpmm_status BackupStores::intern_dir(const char* call, const char* dir, uint32_t* id) {
  if (dir == nullptr || *dir == '\0')
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: the backup directory is empty", call);
  const size_t n = strnlen(dir, kMaxDirBytes + 1);
  if (n > kMaxDirBytes)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: backup directory \"%.40s...\" is longer than %zu bytes", call, dir,
                kMaxDirBytes);
  std::string key(dir, n);
  auto it = dir_ids_.find(key);
  if (it != dir_ids_.end()) {
    // Named again: the directory opened the first time, unless it was
    // removed since (then the path is opened anew, as the caller means it now).
    Dir& d = dirs_[it->second];
    bool removed = false;
    if (backend_.dir_check(d.fd, &removed) == VPMM_OK && removed) {
      DirHandle fresh = -1;
      retired_dirs_.reserve(retired_dirs_.size() + 1);  // may throw: before the directory is opened
      vpmm_status st = backend_.dir_open(key, &fresh);
      if (st != VPMM_OK) return fail_context(st, call);
      // The old one stays open: the files made in it name it.
      retired_dirs_.push_back(d.fd);
      d.fd = fresh;
    }
    *id = it->second;
    return VPMM_OK;
  }
  if (dirs_.size() > kMaxBackupDirs)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: more than %u distinct backup directories in one pool", call,
                kMaxBackupDirs);
  Dir d;
  d.path = key;
  dirs_.reserve(dirs_.size() + 1);  // may throw: before the directory is opened
  dir_ids_.reserve(dir_ids_.size() + 1);
  vpmm_status st = backend_.dir_open(key, &d.fd);
  if (st != VPMM_OK) return fail_context(st, call);
  const uint32_t next = static_cast<uint32_t>(dirs_.size());
  dirs_.push_back(d);
  try {
    dir_ids_.emplace(std::move(key), next);
  } catch (...) {
    dirs_.pop_back();
    backend_.dir_close(d.fd);
    throw;
  }
  *id = next;
  return VPMM_OK;
}

std::string BackupStores::file_path(const Backup& b) const {
  return b.dir < dirs_.size() ? dirs_[b.dir].path + "/" + b.file.name : b.file.name;
}

bool BackupStores::staged(const Backup& b) const {
  if (b.store == Store::Disk) return true;
  return b.store == Store::Mmap && (backend_.capabilities() & kCapPinnedHost);
}

vpmm_status BackupStores::acquire(uint32_t flags, uint64_t bytes, Backup** out) {
  std::unique_ptr<Backup> b(new Backup);
  b->store = store_of(flags);
  b->retain = (flags & VPMM_ALLOC_RETAIN_BACKUP) != 0;
  b->bytes = bytes;
  live_.reserve(live_.size() + 1);  // may throw: before any storage is taken
  if (!(backend_.capabilities() & kCapDeviceCopy))
    return fail(VPMM_ERR_UNSUPPORTED,
                "backup of %" PRIu64 " bytes: the %s backend cannot copy device memory to the host "
                "(pause without a backup instead)",
                bytes, backend_.name());
  vpmm_status st = VPMM_OK;
  switch (b->store) {
    case Store::Pinned:
      st = pinned_.get(bytes, &b->host, &b->capacity);
      break;
    case Store::Mmap:
      st = backend_.host_alloc_pageable(bytes, &b->host);
      if (st == VPMM_OK) {
        b->capacity = bytes;
        mmap_bytes_ += bytes;
      } else {
        char ctx[96];
        std::snprintf(ctx, sizeof ctx, "mmap backup of %" PRIu64 " bytes", bytes);
        st = fail_context(st, ctx);
      }
      break;
    case Store::Disk: {
      const uint32_t d = backup_dir_of(flags);
      if (d == 0 || d >= dirs_.size())
        return fail(VPMM_ERR_INTERNAL, "disk backup of %" PRIu64 " bytes without a directory", bytes);
      FileHandle fh = -1;
      b->dir = d;
      st = backend_.file_create(dirs_[d].fd, bytes, &b->file, &fh);
      if (st != VPMM_OK) {
        const std::string ctx = "disk backup in directory \"" + dirs_[d].path + "\"";
        st = fail_context(st, ctx.c_str());
      } else {
        // Kept open until the backup goes: its name is only used to remove
        // it (backend.hpp, file_create).
        b->fd = fh;
        b->capacity = bytes;
        disk_bytes_ += bytes;
      }
      break;
    }
  }
  if (st != VPMM_OK) return st;
  live_.insert(b.get());
  *out = b.release();
  return VPMM_OK;
}

void BackupStores::release(Backup* b) {
  if (b == nullptr || live_.erase(b) == 0) return;
  set_with_active(b, false);
  switch (b->store) {
    case Store::Pinned:
      pinned_.put(b->host, b->capacity);
      break;
    case Store::Mmap:
      // Retried once: memory given up on here would stay mapped.
      if (backend_.host_free_pageable(b->host, b->capacity) != VPMM_OK)
        backend_.host_free_pageable(b->host, b->capacity);
      mmap_bytes_ -= b->capacity;
      break;
    case Store::Disk:
      if (backend_.file_remove(b->file, b->fd) != VPMM_OK) backend_.file_remove(b->file, b->fd);
      if (backend_.file_close(b->fd) != VPMM_OK) backend_.file_close(b->fd);
      disk_bytes_ -= b->capacity;
      break;
  }
  delete b;
}

void BackupStores::set_with_active(Backup* b, bool on) {
  if (b->with_active == on) return;
  b->with_active = on;
  if (b->retain) {
    if (on)
      retained_bytes_ += b->bytes;
    else
      retained_bytes_ -= b->bytes;
  }
}

bool BackupStores::after_resume(Backup* b) {
  if (b->retain || b->store == Store::Disk) {
    // A disk file stays for the next pause to overwrite in place; only a
    // retained backup still speaks for the allocation's bytes.
    if (!b->retain) b->current = false;
    set_with_active(b, true);
    return true;
  }
  release(b);
  return false;
}

void BackupStores::before_pause(Backup* b) { set_with_active(b, false); }

}  // namespace vpmm
