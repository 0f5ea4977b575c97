// Sharing pool memory with other processes: what the core decides and keeps
// (docs/ipc.md). The core chooses what an export covers (the whole handles
// under its allocations, and where each allocation lies in them), tells the
// importers when that stops being true (a pause or a free of an exported
// allocation, a close, the pool's end), and maps imports into VA of their
// own. Everything that needs the operating system (the status page shared
// with importers, the descriptors of exported handles, sockets, pidfds)
// lives behind the two channel interfaces below, implemented in src/ipc/.
//
// State has one owner: IpcTables, held by the pool and used under its mutex.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "backend/backend.hpp"
#include "core/regions.hpp"
#include "vpmm.h"

namespace vpmm {

// One physical handle of an export: where it is mapped in the exporter.
// Handle i of an export travels as file descriptor i.
struct IpcHandleSpan {
  uint64_t va = 0;
  uint64_t size = 0;
};

// One allocation (or small-object slab) an export shares: its address in the
// exporter, its size, and where it lies in the handles (`handle` is the index
// of the first one, `offset` its distance from that handle's start).
struct IpcEntry {
  uint64_t ptr = 0;
  uint64_t size = 0;
  uint32_t handle = 0;
  uint64_t offset = 0;
};

// An allocation (or a tag export's small-object slab, shared whole) an
// export covers, before its handles are known.
struct IpcRange {
  uint64_t ptr = 0;
  uint64_t size = 0;
  bool slab = false;
};

// What an export shares, in the exporter's terms; the descriptor is this plus
// the channel's identity and descriptors. Handles are in address order, so
// consecutive ones with adjacent addresses form one span an importer maps
// contiguously (an entry never crosses a span).
struct ExportLayout {
  int32_t backend_kind = 0;
  uint8_t device_id[16] = {};
  std::vector<IpcHandleSpan> handles;
  std::vector<IpcEntry> entries;
  uint64_t bytes() const {
    uint64_t b = 0;
    for (const auto& h : handles) b += h.size;
    return b;
  }
};

// The exporter's half of an export, outside the core: a status page the
// importers read, and the descriptors of the exported handles.
class ExportChannel {
 public:
  virtual ~ExportChannel() = default;
  // Room for n descriptors, so that adopt never fails (may throw bad_alloc).
  virtual void reserve(size_t n) = 0;
  // Takes ownership of the descriptor of the next handle.
  virtual void adopt(int fd) = 0;
  // Publishes a final state (VPMM_EXPORT_PAUSED, _FREED or _CLOSED) to the
  // importers, then closes the handle descriptors: the exporter keeps no
  // reference to memory it released. Idempotent; the first state stays.
  virtual void revoke(int32_t state) = 0;
  // The state importers see now (VPMM_EXPORT_*).
  virtual int32_t state() const = 0;
  // Processes holding an import of this export now (best effort: 0 where
  // the platform cannot tell).
  virtual uint32_t live_importers() const = 0;
};

// The importer's half: the status page, mapped, and its place among the
// importers. Released when the import closes.
class ImportChannel {
 public:
  virtual ~ImportChannel() = default;
  // What the exporter published, or VPMM_EXPORT_EXITED when its process is
  // gone without closing the export.
  virtual int32_t state() const = 0;
  // True while the exporter's state word is what it was when the import
  // began: nothing was paused, freed or closed since.
  virtual bool unchanged() const = 0;
  // Takes a place among the importers (the exporter counts them); called
  // once the import is mapped.
  virtual void attach() = 0;
  // Gives it back and forgets the page; state() answers CLOSED afterwards.
  virtual void detach() = 0;
};

// What vpmm_pool_import asks of the core: the descriptor, decoded.
struct ImportRequest {
  int32_t backend_kind = 0;
  uint8_t device_id[16] = {};
  uint64_t nonce = 0;  // names the export: one import of it per pool
  std::vector<IpcHandleSpan> handles;
  std::vector<IpcEntry> entries;
  std::vector<int> fds;  // one per handle, the caller's
};

struct ExportRecord {
  std::shared_ptr<ExportChannel> channel;
  std::vector<uint64_t> ptrs;   // allocations' addresses (indexed while active)
  std::vector<uint64_t> slabs;  // small-object slabs' addresses (likewise)
  uint64_t bytes = 0;           // of its handles
};

// A run of adjacent handles mapped for imports. A later import whose run is
// the same memory handle by handle (Backend::same_memory: a new export of
// it, the sender sharing its weights again) maps nothing: it uses this one.
// Unmapped when the last import using it closes (refs, under the pool mutex).
struct ImportSpan {
  uint64_t va = 0;  // reserved for this span, in the importer
  uint64_t size = 0;
  std::vector<Mapping> handles;  // imported, mapped from va in order
  int refs = 0;                  // imports using it, and imports being made that may
};
using SpanRef = std::shared_ptr<ImportSpan>;

struct ImportRecord {
  std::shared_ptr<ImportChannel> channel;
  uint64_t nonce = 0;
  std::vector<SpanRef> spans;
  uint64_t bytes = 0;
};

// The pool's open exports and imports. Not thread safe: the pool's mutex.
class IpcTables {
 public:
  // Cheap test for the hot paths: is any allocation exported now?
  bool exporting() const { return !by_ptr_.empty() || !by_slab_.empty(); }

  uint64_t add_export(ExportRecord r);
  ExportRecord* find_export(uint64_t id);
  // Closes the export (CLOSED to its importers) and forgets it.
  bool close_export(uint64_t id);
  // An exported allocation at ptr was freed: its exports become FREED.
  void on_free(uint64_t ptr);
  // The slab at va went back to the pool (its last block freed, or the
  // cached empty slab given back): exports sharing it become FREED. A slab
  // is shared whole, so the free of one of its blocks ends nothing (the
  // block at its start included); its pages going does.
  void on_slab_gone(uint64_t va);
  // [va, va+size) released its physical memory (a pause): exports with an
  // allocation there become PAUSED.
  void on_release(uint64_t va, uint64_t size);

  // Imports: a nonce is taken before the import is mapped (so two threads
  // cannot import one export twice) and given back if it fails.
  bool claim_nonce(uint64_t nonce) { return nonces_.insert(nonce).second; }
  void drop_nonce(uint64_t nonce) { nonces_.erase(nonce); }
  uint64_t add_import(ImportRecord r);
  // Removes an import: its spans no other import uses go to *unmap (for the
  // caller to unmap); false if none.
  bool take_import(uint64_t id, ImportRecord* out, std::vector<SpanRef>* unmap);
  // Every import removed; every span once, in *unmap.
  std::vector<ImportRecord> take_all_imports(std::vector<SpanRef>* unmap);
  // The spans of open imports, each taken by the caller (refs + 1) until it
  // gives it back with release_span.
  std::vector<SpanRef> take_spans();
  // Gives a span back; true when nothing uses it any more (unmap it).
  static bool release_span(const SpanRef& s) { return --s->refs == 0; }
  void close_all_exports();

  void stats(vpmm_ipc_stats* out) const;

 private:
  void unindex(uint64_t id, const ExportRecord& r);
  void revoke_all(std::multimap<uint64_t, uint64_t>& index, uint64_t key, int32_t state);
  std::map<uint64_t, ExportRecord> exports_;
  std::multimap<uint64_t, uint64_t> by_ptr_;   // active exports' allocations -> export id
  std::multimap<uint64_t, uint64_t> by_slab_;  // active exports' slabs -> export id
  std::map<uint64_t, ImportRecord> imports_;
  std::set<uint64_t> nonces_;
  uint64_t next_id_ = 1;
  uint64_t n_exports_ = 0, n_imports_ = 0;
};

}  // namespace vpmm
