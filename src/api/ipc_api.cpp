// The C functions that share pool memory with other processes (vpmm.h,
// "Sharing memory with other processes"; docs/ipc.md): argument checks, the
// export and import handles users hold, and the wiring between the core
// (what is exported, what is mapped) and src/ipc (status pages, descriptors,
// sockets, pidfds).
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "api/pool_shell.hpp"
#include "common/status.hpp"
#include "core/share/channel_interfaces.hpp"
#include "ipc/channels.hpp"
#include "ipc/descriptor.hpp"
#include "ipc/fd_passing.hpp"
#include "ipc/fd_table.hpp"
#include "ipc/status_page.hpp"
#include "vpmm.h"

namespace {

constexpr uint64_t kExportMagic = 0x76706d6d2d657870ull;  // "vpmm-exp"
constexpr uint64_t kImportMagic = 0x76706d6d2d696d70ull;  // "vpmm-imp"
constexpr uint64_t kClosedMagic = 0x76706d6d2d636c6full;  // "vpmm-clo"

}  // namespace

// Closed handles keep their shell (the magic says closed), so a call with a
// closed handle is reported rather than reading freed memory; what they held
// is gone.
struct vpmm_export {
  uint64_t magic = kExportMagic;
  vpmm_pool* pool = nullptr;
  uint64_t id = 0;  // in the pool's IpcTables
  std::shared_ptr<vpmm::ipc::Exporter> channel;
  vpmm::ExportLayout layout;
};

struct vpmm_import {
  uint64_t magic = kImportMagic;
  vpmm_pool* pool = nullptr;
  uint64_t id = 0;
  std::shared_ptr<vpmm::ipc::Importer> channel;
  std::vector<vpmm::IpcEntry> entries;  // the exporter's
  std::vector<uint64_t> ptrs;           // the same bytes here
};

namespace {

using vpmm::api::guarded;
using vpmm::api::kDeadMagic;

vpmm_status check_export(const char* call, const vpmm_export* ex) {
  if (!ex) return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: export is NULL", call);
  if (ex->magic == kClosedMagic)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: export %p was already closed", call,
                      static_cast<const void*>(ex));
  if (ex->magic != kExportMagic)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: %p is not a vpmm_export", call, static_cast<const void*>(ex));
  return VPMM_OK;
}

vpmm_status check_import(const char* call, const vpmm_import* imp) {
  if (!imp) return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: import is NULL", call);
  if (imp->magic == kClosedMagic)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: import %p was already closed", call,
                      static_cast<const void*>(imp));
  if (imp->magic != kImportMagic)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: %p is not a vpmm_import", call,
                      static_cast<const void*>(imp));
  if (imp->pool->magic == kDeadMagic)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT,
                      "%s: the pool of import %p was destroyed, which unmapped the import", call,
                      static_cast<const void*>(imp));
  return VPMM_OK;
}

vpmm_status check_entry_out(const char* call, vpmm_ipc_entry* out) {
  if (!out) return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: out is NULL", call);
  if (out->struct_size < 2 * sizeof(uint32_t) || out->struct_size > 4096)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: out->struct_size %u is not a vpmm_ipc_entry size (expected %u)",
                      call, out->struct_size, static_cast<unsigned>(sizeof(vpmm_ipc_entry)));
  return VPMM_OK;
}

void fill_entry(const vpmm::IpcEntry& e, uint64_t ptr, size_t n, vpmm_ipc_entry* out) {
  vpmm_ipc_entry full;
  std::memset(&full, 0, sizeof full);
  full.struct_size = out->struct_size;
  full.exporter_ptr = e.ptr;
  full.size = e.size;
  full.ptr = reinterpret_cast<void*>(ptr);
  full.n_entries = n;
  std::memcpy(out, &full, std::min<size_t>(out->struct_size, sizeof full));
}

// Closed shells, kept (reachable) for the life of the process.
std::mutex g_closed_mu;
std::vector<void*>* g_closed = nullptr;

template <typename T>
void keep_closed_shell(T* shell) {
  std::lock_guard<std::mutex> lock(g_closed_mu);
  if (!g_closed) g_closed = new std::vector<void*>();
  g_closed->push_back(shell);
}

// An export of the allocations holding ptrs[0..n), or (by_tag) of a tag.
vpmm_status export_with(const char* call, vpmm_pool* pool, const void* const* ptrs, size_t n, const char* tag,
                        bool by_tag, vpmm_export** out) {
  VPMM_CHECK_POOL(call, pool);
  VPMM_CHECK_NONNULL(call, out);
  for (size_t i = 0; i < n; ++i)
    if (!ptrs[i])
      return n == 1 ? vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: ptr is NULL", call)
                    : vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: ptrs[%zu] is NULL", call, i);
  if (by_tag && tag && strnlen(tag, VPMM_TAG_MAX_BYTES + 1) > VPMM_TAG_MAX_BYTES)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: tag \"%.20s...\" is longer than %d bytes", call, tag,
                      VPMM_TAG_MAX_BYTES);
  return guarded(call, [&]() -> vpmm_status {
    std::unique_ptr<vpmm::ipc::StatusPage> page;
    vpmm_status st = vpmm::ipc::StatusPage::create(call, &page);
    if (st != VPMM_OK) return st;
    auto channel = std::make_shared<vpmm::ipc::Exporter>(std::move(page));
    std::unique_ptr<vpmm_export> ex(new vpmm_export);
    st = pool->pool->export_memory(call, std::vector<const void*>(ptrs, ptrs + n), tag, by_tag, channel,
                                   &ex->layout, &ex->id);
    if (st != VPMM_OK) return st;
    ex->pool = pool;
    ex->channel = std::move(channel);
    *out = ex.release();
    return VPMM_OK;
  });
}

// The descriptors of an import: the caller's, or taken from the exporter.
// `owned` receives those this call must close.
vpmm_status import_fds(const char* call, const vpmm::ipc::Descriptor& d, const int* fds, size_t n_fds,
                       std::vector<int>* all, std::vector<int>* owned) {
  const size_t want = vpmm::ipc::fds_for(d.handle_fds.size());
  if (fds || n_fds) {
    if (!fds) return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: fds is NULL with n_fds %zu", call, n_fds);
    if (n_fds != want)
      return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT,
                        "%s: %zu file descriptors given, the descriptor travels with %zu (its status page, its "
                        "counter page and %zu handles)",
                        call, n_fds, want, want - 2);
    all->assign(fds, fds + n_fds);
    vpmm::ipc::make_descriptor_room(n_fds);  // the import keeps a duplicate of each
    return VPMM_OK;
  }
  // Taken, then a duplicate of each kept: the table's room in one step.
  vpmm::ipc::make_descriptor_room(2 * (d.handle_fds.size() + 2));
  vpmm::ipc::PidFd pidfd;
  vpmm_status st = pidfd.open(call, d.pid);
  if (st != VPMM_OK) return st;
  std::vector<int> numbers{d.status_fd, d.counter_fd};
  numbers.insert(numbers.end(), d.handle_fds.begin(), d.handle_fds.end());
  if ((st = pidfd.fetch(call, numbers, owned)) != VPMM_OK) return st;
  *all = *owned;
  return VPMM_OK;
}

}  // namespace

extern "C" {

VPMM_API vpmm_status vpmm_pool_export(vpmm_pool* pool, const void* ptr, vpmm_export** out) {
  return export_with("vpmm_pool_export", pool, &ptr, 1, nullptr, false, out);
}

VPMM_API vpmm_status vpmm_pool_export_tag(vpmm_pool* pool, const char* tag, vpmm_export** out) {
  return export_with("vpmm_pool_export_tag", pool, nullptr, 0, tag, true, out);
}

VPMM_API vpmm_status vpmm_pool_export_many(vpmm_pool* pool, const void* const* ptrs, size_t n, vpmm_export** out) {
  const char* call = "vpmm_pool_export_many";
  VPMM_CHECK_POOL(call, pool);
  if (n == 0) return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: n is 0 (nothing to export)", call);
  VPMM_CHECK_NONNULL(call, ptrs);
  if (n > (size_t(1) << 24))
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: n %zu is more pointers than a descriptor holds", call, n);
  return export_with(call, pool, ptrs, n, nullptr, false, out);
}

VPMM_API vpmm_status vpmm_pool_prepare_export(vpmm_pool* pool, const char* tag, uint64_t* n_handles) {
  const char* call = "vpmm_pool_prepare_export";
  VPMM_CHECK_POOL(call, pool);
  if (tag && strnlen(tag, VPMM_TAG_MAX_BYTES + 1) > VPMM_TAG_MAX_BYTES)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: tag \"%.20s...\" is longer than %d bytes", call, tag,
                      VPMM_TAG_MAX_BYTES);
  return guarded(call, [&] { return pool->pool->prepare_export(call, tag, n_handles); });
}

VPMM_API vpmm_status vpmm_export_entry(const vpmm_export* ex, size_t index, vpmm_ipc_entry* out) {
  const char* call = "vpmm_export_entry";
  vpmm_status st = check_export(call, ex);
  if (st == VPMM_OK) st = check_entry_out(call, out);
  if (st != VPMM_OK) return st;
  const size_t n = ex->layout.entries.size();
  if (index >= n)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: index %zu is out of range (%zu entries)", call, index, n);
  fill_entry(ex->layout.entries[index], ex->layout.entries[index].ptr, n, out);
  return VPMM_OK;
}

VPMM_API vpmm_status vpmm_export_descriptor(const vpmm_export* ex, void* buf, size_t capacity, size_t* size,
                                            int* fds, size_t fd_capacity, size_t* n_fds) {
  const char* call = "vpmm_export_descriptor";
  vpmm_status st = check_export(call, ex);
  if (st != VPMM_OK) return st;
  VPMM_CHECK_NONNULL(call, size);
  VPMM_CHECK_NONNULL(call, n_fds);
  if (capacity > 0 && !buf)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: buf is NULL with capacity %zu", call, capacity);
  if (fd_capacity > 0 && !fds)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: fds is NULL with fd_capacity %zu", call, fd_capacity);
  return guarded(call, [&]() -> vpmm_status {
    return ex->channel->with_descriptor(call, ex->layout, [&](const std::string& bytes, const std::vector<int>& f) {
      const bool query = !buf && capacity == 0 && !fds && fd_capacity == 0;
      if (!query && (capacity < bytes.size() || fd_capacity < f.size()))
        return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT,
                          "%s: the descriptor needs %zu bytes and %zu file descriptors, the buffers hold %zu "
                          "and %zu",
                          call, bytes.size(), f.size(), capacity, fd_capacity);
      if (!query) {
        std::memcpy(buf, bytes.data(), bytes.size());
        for (size_t i = 0; i < f.size(); ++i) fds[i] = f[i];
      }
      *size = bytes.size();
      *n_fds = f.size();
      return VPMM_OK;
    });
  });
}

VPMM_API vpmm_status vpmm_export_send(const vpmm_export* ex, int socket) {
  const char* call = "vpmm_export_send";
  vpmm_status st = check_export(call, ex);
  if (st != VPMM_OK) return st;
  return guarded(call, [&]() -> vpmm_status {
    return ex->channel->with_descriptor(call, ex->layout, [&](const std::string& bytes, const std::vector<int>& f) {
      return vpmm::ipc::send_message(call, socket, bytes.data(), bytes.size(), f.data(), f.size());
    });
  });
}

VPMM_API vpmm_status vpmm_export_state(const vpmm_export* ex, int32_t* state, uint32_t* importers,
                                       uint64_t* imports) {
  const char* call = "vpmm_export_state";
  vpmm_status st = check_export(call, ex);
  if (st != VPMM_OK) return st;
  VPMM_CHECK_NONNULL(call, state);
  *state = ex->channel->state();
  if (importers) *importers = ex->channel->live_importers();
  if (imports) *imports = ex->channel->imports();
  return VPMM_OK;
}

VPMM_API vpmm_status vpmm_export_close(vpmm_pool* pool, vpmm_export* ex) {
  const char* call = "vpmm_export_close";
  vpmm_status st = check_export(call, ex);
  if (st != VPMM_OK) return st;
  if (pool != ex->pool)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: export %p belongs to pool %p, not %p", call,
                      static_cast<void*>(ex), static_cast<void*>(ex->pool), static_cast<void*>(pool));
  return guarded(call, [&]() -> vpmm_status {
    // A destroyed pool closed its exports: only the handle is left to free.
    if (pool->magic != kDeadMagic) {
      vpmm_status cs = pool->pool->close_export(call, ex->id);
      if (cs != VPMM_OK) return cs;
    }
    ex->channel.reset();
    ex->layout = vpmm::ExportLayout();
    ex->magic = kClosedMagic;
    keep_closed_shell(ex);
    return VPMM_OK;
  });
}

VPMM_API vpmm_status vpmm_pool_import(vpmm_pool* pool, const void* desc, size_t size, const int* fds,
                                      size_t n_fds, vpmm_import** out) {
  const char* call = "vpmm_pool_import";
  VPMM_CHECK_POOL(call, pool);
  VPMM_CHECK_NONNULL(call, desc);
  VPMM_CHECK_NONNULL(call, out);
  return guarded(call, [&]() -> vpmm_status {
    vpmm::ipc::Descriptor d;
    vpmm_status st = vpmm::ipc::decode(call, desc, size, &d);
    if (st != VPMM_OK) return st;
    std::vector<int> all, owned;
    if ((st = import_fds(call, d, fds, n_fds, &all, &owned)) != VPMM_OK) return st;
    struct CloseOwned {
      std::vector<int>* fds;
      ~CloseOwned() { vpmm::ipc::close_all(*fds); }
    } closer{&owned};
    std::unique_ptr<vpmm::ipc::StatusPage> page;
    st = vpmm::ipc::StatusPage::open(call, all[0], all[1], d.request.nonce, &page);
    // Taken by number from the exporter, a page that is not the export's is
    // a descriptor number the exporter has reused: the export is gone.
    if (st == VPMM_ERR_INVALID_ARGUMENT && !owned.empty())
      return vpmm::fail(VPMM_ERR_WRONG_STATE,
                        "%s: process %d no longer holds the export's status page (the export was closed)", call,
                        d.pid);
    if (st != VPMM_OK) return st;
    auto channel = std::make_shared<vpmm::ipc::Importer>(std::move(page));
    const int32_t state = channel->state();
    if (state != VPMM_EXPORT_ACTIVE)
      return vpmm::fail(VPMM_ERR_WRONG_STATE, "%s: the export is %s", call,
                        state == VPMM_EXPORT_PAUSED   ? "paused: the exporter released its memory"
                        : state == VPMM_EXPORT_FREED  ? "freed by the exporter"
                        : state == VPMM_EXPORT_EXITED ? "gone: its process exited"
                                                      : "closed by the exporter");
    d.request.fds.assign(all.begin() + 2, all.end());
    std::unique_ptr<vpmm_import> imp(new vpmm_import);
    std::vector<uint64_t> ptrs;
    if ((st = pool->pool->import_memory(call, d.request, channel, &imp->id, &ptrs)) != VPMM_OK) return st;
    imp->pool = pool;
    imp->channel = std::move(channel);
    imp->entries = d.request.entries;
    imp->ptrs = std::move(ptrs);
    *out = imp.release();
    return VPMM_OK;
  });
}

VPMM_API vpmm_status vpmm_import_entry(const vpmm_import* imp, size_t index, vpmm_ipc_entry* out) {
  const char* call = "vpmm_import_entry";
  vpmm_status st = check_import(call, imp);
  if (st == VPMM_OK) st = check_entry_out(call, out);
  if (st != VPMM_OK) return st;
  const size_t n = imp->entries.size();
  if (index >= n)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: index %zu is out of range (%zu entries)", call, index, n);
  fill_entry(imp->entries[index], imp->ptrs[index], n, out);
  return VPMM_OK;
}

VPMM_API vpmm_status vpmm_import_state(const vpmm_import* imp, int32_t* state) {
  const char* call = "vpmm_import_state";
  vpmm_status st = check_import(call, imp);
  if (st != VPMM_OK) return st;
  VPMM_CHECK_NONNULL(call, state);
  *state = imp->channel->state();
  return VPMM_OK;
}

VPMM_API vpmm_status vpmm_import_close(vpmm_pool* pool, vpmm_import* imp) {
  const char* call = "vpmm_import_close";
  if (!imp) return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: import is NULL", call);
  if (imp->magic == kClosedMagic || imp->magic != kImportMagic) return check_import(call, imp);
  if (pool != imp->pool)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: import %p belongs to pool %p, not %p", call,
                      static_cast<void*>(imp), static_cast<void*>(imp->pool), static_cast<void*>(pool));
  return guarded(call, [&]() -> vpmm_status {
    // A destroyed pool unmapped its imports: only the handle is left to free.
    if (pool->magic != kDeadMagic) {
      vpmm_status st = pool->pool->close_import(call, imp->id);
      if (st != VPMM_OK) return st;
    }
    imp->channel.reset();
    imp->entries.clear();
    imp->entries.shrink_to_fit();
    imp->ptrs.clear();
    imp->ptrs.shrink_to_fit();
    imp->magic = kClosedMagic;
    keep_closed_shell(imp);
    return VPMM_OK;
  });
}

VPMM_API vpmm_status vpmm_ipc_send(int socket, const void* desc, size_t size, const int* fds, size_t n_fds) {
  const char* call = "vpmm_ipc_send";
  if (size > 0 && !desc) return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: desc is NULL with size %zu", call, size);
  if (n_fds > 0 && !fds) return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: fds is NULL with n_fds %zu", call, n_fds);
  return guarded(call, [&] { return vpmm::ipc::send_message(call, socket, desc, size, fds, n_fds); });
}

VPMM_API vpmm_status vpmm_ipc_recv(int socket, void* buf, size_t capacity, size_t* size, int* fds,
                                   size_t fd_capacity, size_t* n_fds) {
  const char* call = "vpmm_ipc_recv";
  VPMM_CHECK_NONNULL(call, size);
  VPMM_CHECK_NONNULL(call, n_fds);
  if (capacity > 0 && !buf)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: buf is NULL with capacity %zu", call, capacity);
  if (fd_capacity > 0 && !fds)
    return vpmm::fail(VPMM_ERR_INVALID_ARGUMENT, "%s: fds is NULL with fd_capacity %zu", call, fd_capacity);
  const bool peek = !buf && capacity == 0 && !fds && fd_capacity == 0;
  return guarded(call, [&] {
    return vpmm::ipc::recv_message(call, socket, peek, buf, capacity, size, fds, fd_capacity, n_fds);
  });
}

VPMM_API vpmm_status vpmm_pool_ipc_stats(vpmm_pool* pool, vpmm_ipc_stats* stats) {
  const char* call = "vpmm_pool_ipc_stats";
  VPMM_CHECK_POOL(call, pool);
  VPMM_CHECK_NONNULL(call, stats);
  return vpmm::api::sized_snapshot(call, "stats", "vpmm_ipc_stats", stats,
                                   [&](vpmm_ipc_stats* full) { pool->pool->ipc_stats(full); });
}

}  // extern "C"
