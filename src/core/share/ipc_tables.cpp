// IpcTables: the pool's open exports and imports (see ipc.hpp).
#include "core/share/ipc_tables.hpp"

#include <cstring>
#include <utility>

namespace vpmm {

uint64_t IpcTables::add_export(ExportRecord r) {
  const uint64_t id = next_id_++;
  auto it = exports_.emplace(id, std::move(r)).first;
  for (uint64_t p : it->second.ptrs) by_ptr_.emplace(p, id);
  for (uint64_t p : it->second.slabs) by_slab_.emplace(p, id);
  ++n_exports_;
  return id;
}

void IpcTables::unindex(uint64_t id, const ExportRecord& r) {
  for (auto* index : {&by_ptr_, &by_slab_})
    for (uint64_t p : index == &by_ptr_ ? r.ptrs : r.slabs) {
      auto range = index->equal_range(p);
      for (auto i = range.first; i != range.second;) i = i->second == id ? index->erase(i) : std::next(i);
    }
}

void IpcTables::revoke_all(std::multimap<uint64_t, uint64_t>& index, uint64_t key, int32_t state) {
  auto range = index.equal_range(key);
  std::vector<uint64_t> ids;
  for (auto i = range.first; i != range.second; ++i) ids.push_back(i->second);
  for (uint64_t id : ids) {
    ExportRecord& r = exports_.at(id);
    unindex(id, r);
    r.channel->revoke(state);
  }
}

bool IpcTables::close_export(uint64_t id) {
  auto it = exports_.find(id);
  if (it == exports_.end()) return false;
  unindex(id, it->second);
  it->second.channel->revoke(VPMM_EXPORT_CLOSED);
  exports_.erase(it);
  return true;
}

void IpcTables::on_free(uint64_t ptr) { revoke_all(by_ptr_, ptr, VPMM_EXPORT_FREED); }

void IpcTables::on_slab_gone(uint64_t va) { revoke_all(by_slab_, va, VPMM_EXPORT_FREED); }

void IpcTables::on_release(uint64_t va, uint64_t size) {
  std::vector<uint64_t> ids;
  for (const auto* index : {&by_ptr_, &by_slab_})
    for (auto i = index->lower_bound(va); i != index->end() && i->first < va + size; ++i) ids.push_back(i->second);
  for (uint64_t id : ids) {
    auto it = exports_.find(id);
    if (it == exports_.end()) continue;
    unindex(id, it->second);  // an export with two entries here comes twice: revoke is idempotent
    it->second.channel->revoke(VPMM_EXPORT_PAUSED);
  }
}

uint64_t IpcTables::add_import(ImportRecord r) {
  const uint64_t id = next_id_++;
  imports_.emplace(id, std::move(r));
  ++n_imports_;
  return id;
}

bool IpcTables::take_import(uint64_t id, ImportRecord* out, std::vector<SpanRef>* unmap) {
  auto it = imports_.find(id);
  if (it == imports_.end()) return false;
  *out = std::move(it->second);
  nonces_.erase(out->nonce);
  imports_.erase(it);
  for (const SpanRef& s : out->spans)
    if (release_span(s)) unmap->push_back(s);
  return true;
}

std::vector<ImportRecord> IpcTables::take_all_imports(std::vector<SpanRef>* unmap) {
  std::vector<ImportRecord> all;
  std::set<const ImportSpan*> seen;
  for (auto& kv : imports_) {
    for (const SpanRef& s : kv.second.spans)
      if (seen.insert(s.get()).second) unmap->push_back(s);
    all.push_back(std::move(kv.second));
  }
  imports_.clear();
  nonces_.clear();
  return all;
}

std::vector<SpanRef> IpcTables::take_spans() {
  std::vector<SpanRef> out;
  std::set<const ImportSpan*> seen;
  for (const auto& kv : imports_)
    for (const SpanRef& s : kv.second.spans)
      if (seen.insert(s.get()).second) {
        ++s->refs;
        out.push_back(s);
      }
  return out;
}

void IpcTables::close_all_exports() {
  for (auto& kv : exports_) kv.second.channel->revoke(VPMM_EXPORT_CLOSED);
  exports_.clear();
  by_ptr_.clear();
  by_slab_.clear();
}

void IpcTables::stats(vpmm_ipc_stats* out) const {
  vpmm_ipc_stats s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  for (const auto& kv : exports_) {
    const ExportRecord& r = kv.second;
    ++s.exports;
    const int32_t state = r.channel->state();
    const uint32_t importers = r.channel->live_importers();
    s.importers += importers;
    if (state == VPMM_EXPORT_ACTIVE) {
      ++s.exports_active;
      s.exported_bytes += r.bytes;
    } else if (state == VPMM_EXPORT_PAUSED && importers > 0) {
      s.held_by_importers_bytes += r.bytes;
    }
  }
  std::set<const ImportSpan*> seen;  // a span two imports use is mapped once
  for (const auto& kv : imports_) {
    ++s.imports;
    for (const SpanRef& sp : kv.second.spans)
      if (seen.insert(sp.get()).second) s.imported_bytes += sp->size;
  }
  s.n_exports = n_exports_;
  s.n_imports = n_imports_;
  *out = s;
}

}  // namespace vpmm
