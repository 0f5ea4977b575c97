// Sharer (see sharer.hpp): what an export covers, how an import is mapped.
#include "core/share/sharer.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>

#include "common/status.hpp"

namespace vpmm {

namespace {

std::string hex16(const uint8_t id[16]) {
  static const char digits[] = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 16; ++i) {
    s += digits[id[i] >> 4];
    s += digits[id[i] & 15];
  }
  return s;
}

// Unmaps and releases spans no import uses any more (best effort: an import
// that cannot be undone has nothing left to retry with). A span is reserved
// from its va; its handles map from there in order.
void unmap_spans(Backend& b, const std::vector<SpanRef>& spans) {
  for (const SpanRef& s : spans) {
    uint64_t va = s->va;
    for (const Mapping& m : s->handles) {
      if (b.unmap(va, m.size) != VPMM_OK) (void)b.unmap(va, m.size);
      if (b.release(m.handle, m.size) != VPMM_OK) (void)b.release(m.handle, m.size);
      va += m.size;
    }
    if (s->va && b.unreserve(s->va, s->size) != VPMM_OK) (void)b.unreserve(s->va, s->size);
  }
}

// A mapped span whose handles are, one for one, the memory behind the
// request's handles [first, first + n): already mapped here.
SpanRef same_span(Backend& b, const std::vector<SpanRef>& spans, const ImportRequest& req, size_t first, size_t n) {
  for (const SpanRef& s : spans) {
    if (s->handles.size() != n) continue;
    bool same = true;
    for (size_t k = 0; k < n && same; ++k)
      same = s->handles[k].size == req.handles[first + k].size &&
             b.same_memory(s->handles[k].handle, s->handles[k].size, req.fds[first + k]);
    if (same) return s;
  }
  return nullptr;
}

}  // namespace

Sharer::Sharer(PoolState& st, Allocator& alloc, PoolMutex& mu)
    : StateRefs(st), tags_(st.tags()), alloc_(alloc), mu_(mu) {}

vpmm_status Sharer::exported_ranges(const char* call, const std::vector<const void*>& ptrs, const char* tag,
                                  bool by_tag, std::vector<IpcRange>* out) {
  if (!(backend_->capabilities() & kCapExport))
    return fail(VPMM_ERR_UNSUPPORTED,
                "%s: the pool's memory is not exportable: create the pool with exportable = 1 "
                "(VPMM_EXPORTABLE=1)",
                call);
  std::vector<IpcRange>& wanted = *out;
  if (!by_tag) {
    for (size_t i = 0; i < ptrs.size(); ++i) {
      const void* ptr = ptrs[i];
      // "pointer 3 (0x...)" where a call names several.
      char which[48] = "";
      if (ptrs.size() > 1) std::snprintf(which, sizeof which, "pointer %zu: ", i);
      const uint64_t va = reinterpret_cast<uint64_t>(ptr);
      RegionIt it = m_.find_containing(va);
      const Kind k = it == m_.end() ? Kind::Hole : it->second.kind;
      if (k == Kind::Paused)
        return fail(VPMM_ERR_WRONG_STATE,
                    "%s: %sthe allocation containing %p is paused: its memory is released (resume it, then "
                    "export it)",
                    call, which, ptr);
      uint64_t base = 0, size = 0;
      if (k == Kind::Live && va < it->first + it->second.requested) {
        base = it->first;
        size = it->second.requested;
      } else if (!(k == Kind::Small && alloc_.small().lookup(it, va, &base, &size))) {
        return fail(VPMM_ERR_UNKNOWN_POINTER, "%s: %spointer %p is not inside a live allocation of this pool",
                    call, which, ptr);
      }
      wanted.push_back({base, size, false});
    }
    // One entry per allocation, in address order, however many pointers name it.
    std::sort(wanted.begin(), wanted.end(), [](const IpcRange& a, const IpcRange& b) { return a.ptr < b.ptr; });
    wanted.erase(std::unique(wanted.begin(), wanted.end(),
                             [](const IpcRange& a, const IpcRange& b) { return a.ptr == b.ptr; }),
                 wanted.end());
    return VPMM_OK;
  }
  uint32_t want = 0;
  vpmm_status st = tags_.find_used(call, tag, &want);
  if (st != VPMM_OK) return st;
  for (auto& kv : m_) {
    const Region& r = kv.second;
    if (!TagTable::matches(r.tag, want)) continue;
    if (r.kind == Kind::Live) wanted.push_back({kv.first, r.requested, false});
    // A slab is shared whole: its blocks come and go, its pages stay.
    else if (r.kind == Kind::Small && !alloc_.small().empty_if_settled(r.owner))
      wanted.push_back({kv.first, r.size, true});
  }
  if (wanted.empty())
    return fail(VPMM_ERR_WRONG_STATE, "%s: nothing with tag \"%s\" is active to export", call,
                tag ? tag : "(any)");
  return VPMM_OK;
}

std::map<uint64_t, Mapping> Sharer::covering_handles(const std::vector<IpcRange>& ranges) const {
  // Every handle holding a byte of a wanted range, once, in address order.
  std::map<uint64_t, Mapping> covering;
  const auto& maps = m_.mappings();
  for (const IpcRange& w : ranges) {
    auto it = maps.upper_bound(w.ptr);
    if (it != maps.begin()) --it;
    for (; it != maps.end() && it->first < w.ptr + w.size; ++it)
      if (it->first + it->second.size > w.ptr) covering.emplace(it->first, it->second);
  }
  return covering;
}

vpmm_status Sharer::prepare_export(const char* call, const char* tag, uint64_t* n_handles) {
  std::vector<Mapping> handles;
  {
    PoolGuard lock(mu_);
    std::vector<IpcRange> ranges;
    vpmm_status st = exported_ranges(call, {}, tag, true, &ranges);
    if (st != VPMM_OK) return st;
    for (const auto& kv : covering_handles(ranges)) handles.push_back(kv.second);
  }
  // The driver's exports, without the mutex (hundreds of microseconds each on
  // CUDA): a handle released meanwhile keeps nothing (the backend sees to
  // it), and a later export of it fails as any export of released memory.
  FirstFailure first;
  uint64_t n = 0;
  for (const Mapping& m : handles) {
    vpmm_status st = backend_->export_handle(m.handle, m.size, nullptr);
    if (st == VPMM_OK)
      ++n;
    else if (st != VPMM_ERR_WRONG_STATE && st != VPMM_ERR_INVALID_ARGUMENT)  // released meanwhile
      first.note(fail_context(st, call));
  }
  if (n_handles) *n_handles = n;
  return first.finish();
}

vpmm_status Sharer::export_memory(const char* call, const std::vector<const void*>& ptrs, const char* tag,
                                bool by_tag, const std::shared_ptr<ExportChannel>& ch, ExportLayout* layout,
                                uint64_t* id) {
  std::vector<IpcRange> wanted;
  vpmm_status st = exported_ranges(call, ptrs, tag, by_tag, &wanted);
  if (st != VPMM_OK) return st;
  std::map<uint64_t, Mapping> covering = covering_handles(wanted);
  ExportLayout out;
  out.backend_kind = backend_->kind();
  st = backend_->device_id(out.device_id);
  if (st != VPMM_OK) return fail_context(st, call);
  std::vector<PhysHandle> handles;
  for (const auto& kv : covering) {
    out.handles.push_back({kv.first, kv.second.size});
    handles.push_back(kv.second.handle);
  }
  for (const IpcRange& w : wanted) {
    // The handle holding the first byte: the last one starting at or before it.
    auto pos = std::upper_bound(out.handles.begin(), out.handles.end(), w.ptr,
                                [](uint64_t p, const IpcHandleSpan& h) { return p < h.va; });
    if (pos == out.handles.begin())
      return fail(VPMM_ERR_INTERNAL, "%s: allocation 0x%" PRIx64 " has no mapped handle", call, w.ptr);
    --pos;
    IpcEntry e;
    e.ptr = w.ptr;
    e.size = w.size;
    e.handle = static_cast<uint32_t>(pos - out.handles.begin());
    e.offset = w.ptr - pos->va;
    out.entries.push_back(e);
  }
  ch->reserve(handles.size());
  for (size_t i = 0; i < handles.size(); ++i) {
    int fd = -1;
    if ((st = backend_->export_handle(handles[i], out.handles[i].size, &fd)) != VPMM_OK)
      return fail_context(st, call);  // the caller drops the channel: what it adopted is closed
    ch->adopt(fd);
  }
  ExportRecord rec;
  rec.channel = ch;
  rec.bytes = out.bytes();
  for (const IpcRange& w : wanted) (w.slab ? rec.slabs : rec.ptrs).push_back(w.ptr);
  *id = ipc_.add_export(std::move(rec));
  *layout = std::move(out);
  return VPMM_OK;
}

vpmm_status Sharer::close_export(const char* call, uint64_t id) {
  if (!ipc_.close_export(id))
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: export %" PRIu64 " is not open in this pool", call, id);
  return VPMM_OK;
}

vpmm_status Sharer::import_memory(const char* call, const ImportRequest& req, const std::shared_ptr<ImportChannel>& ch,
                                uint64_t* id, std::vector<uint64_t>* entry_ptrs) {
  if (req.backend_kind != backend_->kind())
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: the descriptor is of a pool of backend kind %d, this pool is %s (kind %d)", call,
                req.backend_kind, backend_->name(), backend_->kind());
  uint8_t mine[16];
  vpmm_status st = backend_->device_id(mine);
  if (st != VPMM_OK) return fail_context(st, call);
  if (std::memcmp(mine, req.device_id, 16) != 0)
    return fail(VPMM_ERR_INVALID_ARGUMENT,
                "%s: the memory is on another device (id %s) than this %s pool's (id %s): import it into a "
                "pool of the device it was exported from",
                call, hex16(req.device_id).c_str(), backend_->name(), hex16(mine).c_str());
  if (req.fds.size() != req.handles.size())
    return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: %zu file descriptors for %zu handles", call, req.fds.size(),
                req.handles.size());
  {
    PoolGuard lock(mu_);
    if (!ipc_.claim_nonce(req.nonce))
      return fail(VPMM_ERR_WRONG_STATE,
                  "%s: this export is already imported into this pool (use that import, or close it first)",
                  call);
  }
  // Spans other imports of this pool mapped, held until this import is
  // made: a run of handles that are the same files is not mapped again.
  std::vector<SpanRef> known;
  {
    PoolGuard lock(mu_);
    known = ipc_.take_spans();
  }
  // The driver work runs without the pool's mutex: it touches only VA and
  // handles of this import.
  ImportRecord rec;
  rec.channel = ch;
  rec.nonce = req.nonce;
  std::vector<SpanRef> fresh;  // mapped by this import
  std::vector<uint64_t> handle_va(req.handles.size());
  // Gives back every span held: those this import maps, if it failed, or
  // those it does not use, and unmaps what no import uses any more.
  auto finish = [&](bool failed) {
    std::vector<SpanRef> unmap;
    {
      PoolGuard lock(mu_);
      for (const SpanRef& s : known)
        if ((failed || std::find(rec.spans.begin(), rec.spans.end(), s) == rec.spans.end()) &&
            IpcTables::release_span(s))
          unmap.push_back(s);
      if (failed) {
        for (const SpanRef& s : fresh)
          if (IpcTables::release_span(s)) unmap.push_back(s);
        ipc_.drop_nonce(req.nonce);
      }
    }
    unmap_spans(*backend_, unmap);
  };
  auto undo = [&](vpmm_status failed) {
    FirstFailure first;
    first.note(failed);
    finish(true);
    return first.finish();
  };
  size_t i = 0;
  while (i < req.handles.size()) {
    size_t j = i + 1;  // a span: handles at adjacent addresses in the exporter
    uint64_t size = req.handles[i].size;
    while (j < req.handles.size() && req.handles[j].va == req.handles[j - 1].va + req.handles[j - 1].size)
      size += req.handles[j++].size;
    if (SpanRef same = same_span(*backend_, known, req, i, j - i)) {
      // Already mapped here by another import: the same memory (the files
      // are), used as it is. Held: its pin becomes this import's.
      if (std::find(rec.spans.begin(), rec.spans.end(), same) == rec.spans.end()) rec.spans.push_back(same);
      uint64_t va = same->va;
      for (size_t k = i; k < j; ++k) {
        handle_va[k] = va;
        va += req.handles[k].size;
      }
      rec.bytes += size;
      i = j;
      continue;
    }
    SpanRef s = std::make_shared<ImportSpan>();
    s->size = size;
    s->refs = 1;
    if ((st = backend_->reserve(size, backend_->granularity(), &s->va)) != VPMM_OK)
      return undo(fail_context(st, call));
    fresh.push_back(s);
    uint64_t va = s->va;
    for (size_t k = i; k < j; ++k) {
      Mapping m;
      m.size = req.handles[k].size;
      if ((st = backend_->import_handle(req.fds[k], m.size, &m.handle)) != VPMM_OK)
        return undo(fail_context(st, call));
      if ((st = backend_->map(va, m.size, m.handle)) != VPMM_OK) {
        FirstFailure first;
        first.note(st);
        (void)backend_->release(m.handle, m.size);
        return undo(first.finish());
      }
      s->handles.push_back(m);
      handle_va[k] = va;
      va += m.size;
    }
    if ((st = backend_->set_access(s->va, s->size)) != VPMM_OK) return undo(fail_context(st, call));
    rec.spans.push_back(s);
    rec.bytes += size;
    i = j;
  }
  // A pause, free or close of the export while this was mapping means the
  // descriptors may no longer be the export's memory.
  if (!ch->unchanged()) {
    const int32_t now = ch->state();
    return undo(fail(VPMM_ERR_WRONG_STATE, "%s: the export changed while it was imported (%s): import it again",
                     call,
                     now == VPMM_EXPORT_PAUSED   ? "its memory was paused"
                     : now == VPMM_EXPORT_FREED  ? "an allocation was freed"
                     : now == VPMM_EXPORT_EXITED ? "its process exited"
                                                 : "it was closed"));
  }
  std::vector<uint64_t> ptrs;
  for (const IpcEntry& e : req.entries) {
    if (e.handle >= req.handles.size() || e.offset > UINT64_MAX - handle_va[e.handle])
      return undo(fail(VPMM_ERR_INVALID_ARGUMENT, "%s: the descriptor names handle %u of %zu", call, e.handle,
                       req.handles.size()));
    ptrs.push_back(handle_va[e.handle] + e.offset);
  }
  ch->attach();
  finish(false);  // the spans held and not used go back
  PoolGuard lock(mu_);
  *id = ipc_.add_import(std::move(rec));
  *entry_ptrs = std::move(ptrs);
  return VPMM_OK;
}

vpmm_status Sharer::close_import(const char* call, uint64_t id) {
  ImportRecord rec;
  std::vector<SpanRef> unmap;  // what no other import uses
  {
    PoolGuard lock(mu_);
    if (!ipc_.take_import(id, &rec, &unmap))
      return fail(VPMM_ERR_INVALID_ARGUMENT, "%s: import %" PRIu64 " is not open in this pool", call, id);
  }
  unmap_spans(*backend_, unmap);
  rec.channel->detach();
  return VPMM_OK;
}

void Sharer::close_all() {
  ipc_.close_all_exports();
  std::vector<SpanRef> unmap;
  for (ImportRecord& r : ipc_.take_all_imports(&unmap)) r.channel->detach();
  unmap_spans(*backend_, unmap);
}

}  // namespace vpmm
