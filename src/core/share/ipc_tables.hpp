// IpcTables: the pool's open exports and imports, owned by the sharer
// (core/share/sharer.hpp) and used under the pool mutex. An export is
// recorded until it is closed, with the addresses of its allocations indexed
// so that a free or a pause tells its importers (on_free, on_release); an
// import is recorded with the spans it mapped, for its close or the pool's
// end. Not thread safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "core/share/channel_interfaces.hpp"
#include "core/state/regions.hpp"
#include "vpmm.h"

namespace vpmm {

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
