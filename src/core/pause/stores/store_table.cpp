// StoreTable and the store registry (see store_table.hpp). Pure C++: memory
// and files come from the backend, through the stores.
#include "core/pause/stores/store_table.hpp"

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>

#include "common/status.hpp"

namespace vpmm {

// The library's stores, one line each: its name (its factory is
// make_<name>_store, in <name>_store.cpp), the VPMM_ALLOC_* flag that
// chooses it (0: the default) and whether an allocation names a directory
// for it. Adding a store: its file, a line here, its flag in vpmm.h.
#define VPMM_BACKUP_STORES(X)             \
  X(pinned, 0, false)                     \
  X(mmap, VPMM_ALLOC_BACKUP_MMAP, false)  \
  X(disk, VPMM_ALLOC_BACKUP_DISK, true)

#define VPMM_DECLARE_STORE_(name, flag, dir) std::unique_ptr<BackupStore> make_##name##_store(const StoreContext&);
VPMM_BACKUP_STORES(VPMM_DECLARE_STORE_)
#undef VPMM_DECLARE_STORE_

namespace {

constexpr size_t kMaxDirBytes = 4095;  // PATH_MAX less the NUL

#define VPMM_STORE_ENTRY_(name, flag, dir) {#name, flag, dir, make_##name##_store},
const StoreEntry kBuiltIn[] = {VPMM_BACKUP_STORES(VPMM_STORE_ENTRY_)};
#undef VPMM_STORE_ENTRY_

// The flag bits of every store, kept up to date by register_backup_store:
// the C API reads them on every allocation with flags, and a malloc's hot
// path must not walk the registry.
#define VPMM_STORE_FLAG_(name, flag, dir) | (flag)
std::atomic<uint32_t> g_store_flags{0u VPMM_BACKUP_STORES(VPMM_STORE_FLAG_)};
#undef VPMM_STORE_FLAG_

std::mutex& registry_mu() {
  static std::mutex mu;
  return mu;
}
std::deque<StoreEntry>& registered() {  // a deque: entries handed out stay put
  static std::deque<StoreEntry> v;
  return v;
}

// Every entry, the library's first; later ones win a flag test (store_for).
std::vector<StoreEntry> entries() {
  std::vector<StoreEntry> all(std::begin(kBuiltIn), std::end(kBuiltIn));
  std::lock_guard<std::mutex> lock(registry_mu());
  all.insert(all.end(), registered().begin(), registered().end());
  return all;
}

StoreEntry entry_for(uint32_t flags) {
  const std::vector<StoreEntry> all = entries();
  for (size_t i = all.size(); i-- > 0;)
    if (all[i].flag & flags) return all[i];
  return all[0];
}

}  // namespace

bool register_backup_store(const StoreEntry& e) {
  if (e.name == nullptr || e.make == nullptr || e.flag == 0 || (e.flag & (e.flag - 1)) ||
      (e.flag & ~kAllocFlagsMask) || (e.flag & (VPMM_ALLOC_HOST_BACKUP | VPMM_ALLOC_RETAIN_BACKUP)))
    return false;
  for (const StoreEntry& x : entries())
    if (x.flag == e.flag || std::strcmp(x.name, e.name) == 0) return false;
  std::lock_guard<std::mutex> lock(registry_mu());
  registered().push_back(e);
  g_store_flags.fetch_or(e.flag, std::memory_order_relaxed);
  return true;
}

uint32_t backup_store_flags() { return g_store_flags.load(std::memory_order_relaxed); }

const char* backup_store_name(uint32_t flags) { return entry_for(flags).name; }
bool backup_store_wants_dir(uint32_t flags) { return (flags & backup_store_flags()) && entry_for(flags).wants_dir; }

// ---------------------------------------------------------------------------
// StoreTable
// ---------------------------------------------------------------------------

StoreTable::StoreTable(Backend& b, HostServices& host, PinnedCache& pinned) : backend_(b), host_(host) {
  const StoreContext ctx{b, host, pinned};
  for (const StoreEntry& e : entries()) stores_.emplace_back(e.flag, e.make(ctx));
}

StoreTable::~StoreTable() {
  // The pool releases every backup it holds before it goes; whatever is
  // left (a bug) still gives its memory and files back.
  std::unordered_set<Backup*> left;
  left.swap(live_);
  for (Backup* b : left) {
    live_.insert(b);
    release(b);
  }
  for (const auto& kv : files_in_)
    if (host_.dir_close(kv.first) != VPMM_OK) host_.dir_close(kv.first);
}

void StoreTable::close_dir(DirHandle fd) {
  files_in_.erase(fd);
  retired_dirs_.erase(fd);
  if (host_.dir_close(fd) != VPMM_OK) host_.dir_close(fd);
}

void StoreTable::add_file_ref(DirHandle fd) {
  auto it = files_in_.find(fd);
  if (it != files_in_.end()) ++it->second;
}

void StoreTable::drop_file_ref(DirHandle fd) {
  auto it = files_in_.find(fd);
  if (it == files_in_.end() || it->second == 0) return;
  // The last file of a removed directory's old descriptor: nothing names it now.
  if (--it->second == 0 && retired_dirs_.count(fd)) close_dir(fd);
}

void StoreTable::close_removed_dirs() {
  if (files_in_.size() < sweep_at_) return;
  for (BackupDir& d : dirs_) {
    if (d.fd < 0) continue;
    auto it = files_in_.find(d.fd);
    bool removed = false;
    if (it == files_in_.end() || it->second != 0 || host_.dir_check(d.fd, &removed) != VPMM_OK || !removed)
      continue;
    close_dir(d.fd);
    d.fd = -1;  // opened again if its path is named again
  }
  sweep_at_ = std::max<size_t>(16, 2 * files_in_.size());
}

BackupStore& StoreTable::store_for(uint32_t flags) const {
  for (size_t i = stores_.size(); i-- > 0;)
    if (stores_[i].first & flags) return *stores_[i].second;
  return *stores_[0].second;
}

vpmm_status StoreTable::intern_dir(const char* call, const char* dir, uint32_t* id) {
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
    BackupDir& d = dirs_[it->second];
    bool removed = d.fd < 0;  // closed as a removed directory nothing used
    if (removed || (host_.dir_check(d.fd, &removed) == VPMM_OK && removed)) {
      close_removed_dirs();
      DirHandle fresh = -1;
      // May throw: before the directory is opened.
      files_in_.reserve(files_in_.size() + 1);
      retired_dirs_.reserve(retired_dirs_.size() + 1);
      vpmm_status st = host_.dir_open(key, &fresh);
      if (st != VPMM_OK) return fail_context(st, call);
      files_in_.emplace(fresh, 0);
      if (d.fd >= 0) {
        // The files made in the old one name it: it closes with the last.
        auto old = files_in_.find(d.fd);
        if (old != files_in_.end() && old->second != 0)
          retired_dirs_.insert(d.fd);
        else
          close_dir(d.fd);
      }
      d.fd = fresh;
    }
    *id = it->second;
    return VPMM_OK;
  }
  if (dirs_.size() > kMaxBackupDirs)
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: more than %u distinct backup directories in one pool", call,
                kMaxBackupDirs);
  close_removed_dirs();
  BackupDir d;
  d.path = key;
  // May throw: before the directory is opened.
  dir_ids_.reserve(dir_ids_.size() + 1);
  files_in_.reserve(files_in_.size() + 1);
  vpmm_status st = host_.dir_open(key, &d.fd);
  if (st != VPMM_OK) return fail_context(st, call);
  const uint32_t next = static_cast<uint32_t>(dirs_.size());
  try {
    dirs_.push_back(d);
    try {
      dir_ids_.emplace(std::move(key), next);
    } catch (...) {
      dirs_.pop_back();
      throw;
    }
  } catch (...) {
    host_.dir_close(d.fd);
    throw;
  }
  files_in_.emplace(d.fd, 0);  // reserved above: no throw
  *id = next;
  return VPMM_OK;
}

vpmm_status StoreTable::acquire(uint32_t flags, uint64_t bytes, Backup** out) {
  std::unique_ptr<Backup> b(new Backup);
  b->store = &store_for(flags);
  b->retain = (flags & VPMM_ALLOC_RETAIN_BACKUP) != 0;
  b->bytes = bytes;
  live_.reserve(live_.size() + 1);  // may throw: before any storage is taken
  if (!(backend_.capabilities() & kCapDeviceCopy))
    return fail(VPMM_ERR_UNSUPPORTED,
                "backup of %" PRIu64 " bytes: the %s backend cannot copy device memory to the host "
                "(pause without a backup instead)",
                bytes, backend_.name());
  const uint32_t d = backup_dir_of(flags);
  vpmm_status st = b->store->acquire(d < dirs_.size() ? dirs_[d] : dirs_[0], bytes, b.get());
  if (st != VPMM_OK) return st;
  live_.insert(b.get());
  if (b->fd >= 0) add_file_ref(b->file.dir);
  *out = b.release();
  return VPMM_OK;
}

void StoreTable::release(Backup* b) {
  if (b == nullptr || live_.erase(b) == 0) return;
  set_with_active(b, false);
  const DirHandle dir = b->fd >= 0 ? b->file.dir : -1;  // the store's release forgets the file
  b->store->release(b);
  if (dir >= 0) drop_file_ref(dir);
  delete b;
}

void StoreTable::set_with_active(Backup* b, bool on) {
  if (b->with_active == on) return;
  b->with_active = on;
  if (b->retain) {
    if (on)
      retained_bytes_ += b->bytes;
    else
      retained_bytes_ -= b->bytes;
  }
}

bool StoreTable::after_resume(Backup* b) {
  if (b->retain || b->store->kept_after_resume()) {
    // A disk file stays for the next pause to overwrite in place; only a
    // retained backup still speaks for the allocation's bytes.
    if (!b->retain) b->current = false;
    set_with_active(b, true);
    return true;
  }
  release(b);
  return false;
}

void StoreTable::before_pause(Backup* b) { set_with_active(b, false); }

void StoreTable::fill_stats(vpmm_stats* s) const {
  for (const auto& st : stores_) st.second->add_stats(s);
  s->backup_retained_bytes = retained_bytes_;
  s->backup_skipped_bytes = skipped_bytes_;
}

}  // namespace vpmm
