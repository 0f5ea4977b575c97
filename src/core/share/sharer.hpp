// Sharer: exports and imports of pool memory (docs/ipc.md).
//
// What is exported is physical memory, and a handle maps whole: an export
// carries every handle that holds a byte of its allocations. With
// large_rounding below the page, or handles larger than a page, those handles
// may hold bytes of neighbouring allocations too; the importer maps them
// whole and is told where its allocations lie in them. A live allocation's
// handles never move (only handles lying entirely in free memory are
// remapped or trimmed), so an export stays true until the allocation is
// freed or paused, and then the importers are told (on_free, on_release,
// called by the pool's free and the pauser; slab_gone when a slab shared by
// a tag export goes back to the pool, told by the allocator).
//
// An import is mapped into VA reserved for it alone, outside the pool's
// chunks and region map: it is memory of another pool, which this one may
// neither free, pause, trim nor count against its limit.
//
// Owns: the open exports and imports (IpcTables).
// May call: PoolState (the region map, tags, the backend), the allocator
// (small-object slabs: what a pointer or a tag covers), and the channels of
// an export or import (channel_interfaces.hpp, implemented in src/ipc/). It implements
// SlabWatcher, through which the allocator tells it a slab went.
// Every call is made with the pool mutex held, except prepare_export,
// import_memory and close_import, which take it themselves: their driver
// work runs without it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/alloc/allocator.hpp"
#include "core/share/channel_interfaces.hpp"
#include "core/share/ipc_tables.hpp"
#include "core/state/pool_state.hpp"
#include "core/state/pool_mutex.hpp"

namespace vpmm {

// An allocation (or a tag export's small-object slab, shared whole) an
// export covers, before its handles are known.
struct IpcRange {
  uint64_t ptr = 0;
  uint64_t size = 0;
  bool slab = false;
};

class Sharer final : private StateRefs, private SlabWatcher {
 public:
  Sharer(PoolState& st, Allocator& alloc, PoolMutex& mu);
  Sharer(const Sharer&) = delete;
  Sharer& operator=(const Sharer&) = delete;

  // An export (of the allocations holding ptrs, or of a tag) fills ch with a
  // descriptor per covering handle and is recorded until closed; an import
  // maps req's handles and returns the importer's address of each entry. An
  // import of memory this pool already maps for another import (the same
  // handles, exported again) uses that mapping. `call` names the public
  // function in messages.
  vpmm_status export_memory(const char* call, const std::vector<const void*>& ptrs, const char* tag, bool by_tag,
                            const std::shared_ptr<ExportChannel>& ch, ExportLayout* layout, uint64_t* id);
  vpmm_status close_export(const char* call, uint64_t id);
  // Does now, for every handle of tag's active allocations, what an export
  // of it would pay the driver for (vpmm_pool_prepare_export); the driver
  // calls run without the pool's mutex. *n_handles: the handles prepared.
  vpmm_status prepare_export(const char* call, const char* tag, uint64_t* n_handles);
  vpmm_status import_memory(const char* call, const ImportRequest& req, const std::shared_ptr<ImportChannel>& ch,
                            uint64_t* id, std::vector<uint64_t>* entry_ptrs);
  vpmm_status close_import(const char* call, uint64_t id);
  void stats(vpmm_ipc_stats* out) { ipc_.stats(out); }

  // An allocation at va was freed; [va, va+size) released its memory (a pause).
  void on_free(uint64_t va) {
    if (ipc_.exporting()) ipc_.on_free(va);
  }
  void on_release(uint64_t va, uint64_t size) {
    if (ipc_.exporting()) ipc_.on_release(va, size);
  }
  // Closes every export and unmaps every import (the pool's end).
  void close_all();
  // What the allocator tells when a slab's pages go (set_slab_watcher).
  SlabWatcher& slab_watcher() { return *this; }

 private:
  void slab_gone(uint64_t va) override {
    if (ipc_.exporting()) ipc_.on_slab_gone(va);
  }
  // Under the mutex: the allocations an export of ptrs (or of a tag) covers,
  // in address order, and every handle holding a byte of them.
  vpmm_status exported_ranges(const char* call, const std::vector<const void*>& ptrs, const char* tag,
                              bool by_tag, std::vector<IpcRange>* out);
  std::map<uint64_t, Mapping> covering_handles(const std::vector<IpcRange>& ranges) const;

  TagTable& tags_;
  Allocator& alloc_;
  PoolMutex& mu_;
  IpcTables ipc_;
};

}  // namespace vpmm
