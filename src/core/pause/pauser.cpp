// Pauser (see pauser.hpp): which regions a pause, resume or trim takes and
// the per-allocation steps the pipelines call back for.
//
// Backups (core/pause/stores/): a paused region holds its backup; an active
// one holds a retained backup or a disk backup's file between pauses, which
// is why freeing an active allocation may give one back too.
#include "core/pause/pauser.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstring>

#include "core/pause/kit.hpp"
#include "core/pause/pipeline.hpp"
#include "common/status.hpp"
#include "core/alloc/small.hpp"

namespace vpmm {

Pauser::Pauser(PoolState& st, Allocator& alloc, Sharer& sharer, PoolMutex& mu)
    : StateRefs(st),
      tags_(st.tags()),
      alloc_(alloc),
      sharer_(sharer),
      mu_(mu),
      kit_(new PauseKit(st.backend(), st.host(), st.options().backup_cache_size, st.options().backup_pinned_limit)) {}

void Pauser::release_backup(Backup* b) { kit_->stores().release(b); }

void Pauser::release_charges(const Region& r) {
  if (r.was_small || r.kind == Kind::Small)
    alloc_.small().for_each_charge(r.owner, [&](Reservation* res, uint64_t b) { cap_.uncharge(b, res); });
  else
    cap_.uncharge(r.charge, r.res);
}

vpmm_status Pauser::retake_charges(const Region& r) {
  // All or nothing: a region is resumed only if its whole charge fits.
  std::vector<std::pair<Reservation*, uint64_t>> taken;
  vpmm_status st = VPMM_OK;
  auto take = [&](Reservation* res, uint64_t b) {
    if (st != VPMM_OK) return;
    st = cap_.admit(b, res);
    if (st == VPMM_OK) taken.emplace_back(res, b);
  };
  if (r.was_small)
    alloc_.small().for_each_charge(r.owner, take);
  else
    take(r.res, r.charge);
  if (st != VPMM_OK)
    for (const auto& t : taken) cap_.uncharge(t.second, t.first);
  return st;
}

// ---------------------------------------------------------------------------
// Pause
// ---------------------------------------------------------------------------

vpmm_status Pauser::release_paused_target(const char* call, uint64_t va, Backup* backup) {
  RegionIt it = m_.find(va);
  Region& r = it->second;
  auto maps = m_.whole_mappings_in(va, r.size);
  uint64_t covered = 0;
  for (const auto& mp : maps) covered += mp.second.size;
  if (covered != r.size)
    return fail(VPMM_ERR_INTERNAL, "%s: allocation 0x%" PRIx64 " does not own whole handles", call, va);
  vpmm_status st = VPMM_OK;
  size_t done = 0;
  for (; done < maps.size(); ++done)
    if ((st = backend_->unmap(maps[done].first, maps[done].second.size)) != VPMM_OK) break;
  if (done < maps.size()) {
    // Re-map what was unmapped so the allocation stays whole and active.
    for (size_t i = 0; i < done; ++i) backend_->map(maps[i].first, maps[i].second.size, maps[i].second.handle);
    if (done) backend_->set_access(maps[0].first, covered);
    return fail_context(st, call);
  }
  for (const auto& mp : maps) {
    st_.release_handle(mp.second);  // unmapped: nothing can use it
    m_.unmap_released(mp.first);
  }
  sharer_.on_release(va, r.size);  // importers learn the exporter let go
  // Paused memory holds no physical memory: its capacity charge goes away
  // until resume takes it again.
  release_charges(r);
  Region p = r;
  p.kind = Kind::Paused;
  p.was_small = r.kind == Kind::Small;
  p.backup = backup;
  if (backup) {
    backup->current = true;  // its copy completed (or was current already)
    kit_->stores().before_pause(backup);
    c_.backup_bytes += p.size;
  }
  if (p.was_small) alloc_.small().on_pause(p.owner);
  m_.erase(it);
  m_.insert(va, p);
  ++c_.n_pause;
  return VPMM_OK;
}

vpmm_status Pauser::pause(const char* tag, uint32_t flags, uint64_t* n_changed) {
  const char* call = (flags & ~kPauseBackupsToDisk) ? "vpmm_pool_pause_flags" : "vpmm_pool_pause";
  uint32_t want = 0;
  vpmm_status st = tags_.find_used(call, tag, &want);
  if (st != VPMM_OK) return st;
  uint32_t disk_dir = 0;  // kPauseBackupsToDisk: the directory of the new backups
  if ((flags & kPauseBackupsToDisk) && (st = backup_dir_id(call, nullptr, &disk_dir)) != VPMM_OK) return st;
  std::vector<uint64_t> plain, backed;  // targets without and with a host backup
  for (auto& kv : m_) {
    const Region& r = kv.second;
    // An empty cached slab holds no allocation: nothing to pause or back up,
    // nor to keep a backup (a disk file, a retained buffer) for.
    if (r.kind == Kind::Small && alloc_.small().empty_if_settled(r.owner)) {
      if (kv.second.backup) st_.drop_backup(kv.second);
      continue;
    }
    if ((r.kind == Kind::Live || r.kind == Kind::Small) && TagTable::matches(r.tag, want))
      (r.flags & VPMM_ALLOC_HOST_BACKUP ? backed : plain).push_back(kv.first);
  }
  // Nothing active with that tag is a success that changed nothing (the
  // caller learns it from *n_changed == 0), not an error.
  if (plain.empty() && backed.empty()) {
    if (n_changed) *n_changed = 0;
    return VPMM_OK;
  }
  std::vector<EventRef> uses;
  std::vector<Stream> recorded;
  for (const auto* list : {&plain, &backed})
    for (uint64_t va : *list)
      if ((st = last_uses(m_.find(va)->second, &recorded, &uses)) != VPMM_OK) return fail_context(st, call);
  PausePipeline pipeline(*this, *kit_, call, std::move(plain), std::move(backed), std::move(uses),
                         opt_.pause_batch_bytes, (flags & VPMM_PAUSE_BACKUP_UNCHANGED) != 0, disk_dir);
  return pipeline.run(n_changed);
}

vpmm_status Pauser::last_uses(const Region& r, std::vector<Stream>* recorded, std::vector<EventRef>* out) {
  // Work queued on the allocating stream before now. A retired stream left
  // its final event on the region instead (it may not exist any more).
  if (r.event) {
    out->push_back(r.event);
  } else if (std::find(recorded->begin(), recorded->end(), r.stream) == recorded->end()) {
    recorded->push_back(r.stream);
    EventRef ev;
    vpmm_status st = st_.record_event(r.stream, &ev);
    if (st == VPMM_ERR_INVALID_ARGUMENT) {
      // Destroyed without vpmm_pool_stream_retire: once the device is idle,
      // nothing queued there can still use the memory.
      if ((st = backend_->device_sync()) != VPMM_OK) return st;
    } else if (st != VPMM_OK) {
      return st;
    } else {
      out->push_back(std::move(ev));
    }
  }
  // Blocks of a slab freed on other streams: work queued there before the
  // free may still read or write them.
  if (r.kind == Kind::Small) alloc_.small().foreign_uses(r.owner, out);
  return VPMM_OK;
}

// ---------------------------------------------------------------------------
// Resume
// ---------------------------------------------------------------------------

vpmm_status Pauser::map_paused_target(const Region& r, uint64_t va, std::vector<Mapping>* out) {
  vpmm_status st = retake_charges(r);
  if (st != VPMM_OK) return st;
  std::vector<Mapping> hs;
  uint64_t cap = st_.growth_handle_size(r.size, true);
  auto create = [&] {
    vpmm_status cs = st_.check_growth_limit(r.size);
    if (cs == VPMM_OK) cs = st_.create_handles(r.size, cap, &hs, st_.orphans());
    return cs;
  };
  st = create();
  if (st == VPMM_ERR_OUT_OF_MEMORY) {
    // Cached free pages may be what stands in the way: give them back once.
    // If that failed, its failure is why there is no room: report it.
    FirstFailure release;
    release.note(release_free(0, true));
    st = create();
    if (st == VPMM_ERR_OUT_OF_MEMORY && release.failed()) st = release.finish();
  }
  if (st != VPMM_OK) {
    release_charges(r);
    return st;
  }
  // Counted against the limit until committed or undone: the next target
  // of the same resume must see these bytes as mapped.
  cap_.creating(r.size);
  uint64_t cur = va;
  size_t n = 0;
  for (; n < hs.size(); ++n) {
    if ((st = backend_->map(cur, hs[n].size, hs[n].handle)) != VPMM_OK) break;
    cur += hs[n].size;
  }
  if (st == VPMM_OK) st = backend_->set_access(va, r.size);
  if (st != VPMM_OK) {
    FirstFailure first;  // the undo below must not overwrite the message
    first.note(st);
    undo_resume_target(r, va, hs, n);
    return first.finish();
  }
  *out = std::move(hs);
  return VPMM_OK;
}

void Pauser::undo_resume_target(const Region& r, uint64_t va, const std::vector<Mapping>& hs,
                              size_t n_mapped) {
  for (size_t i = 0; i < n_mapped; ++i) {  // best effort, in order from va
    backend_->unmap(va, hs[i].size);
    va += hs[i].size;
  }
  st_.release_handles(hs);
  release_charges(r);
  cap_.created(r.size);
}

vpmm_status Pauser::resume(const char* tag, uint32_t flags, uint64_t* n_changed, uint64_t* short_bytes) {
  const char* call = "vpmm_pool_resume";
  uint32_t want = 0;
  vpmm_status st = tags_.find_used(call, tag, &want);
  if (st != VPMM_OK) return st;
  std::vector<uint64_t> targets;
  for (auto& kv : m_)
    if (kv.second.kind == Kind::Paused && TagTable::matches(kv.second.tag, want)) targets.push_back(kv.first);
  if (targets.empty()) {  // nothing paused: success that changed nothing
    if (n_changed) *n_changed = 0;
    return VPMM_OK;
  }
  // Slabs among the targets stay put while the pipeline runs: giving cached
  // memory back to make room settles their pending blocks, which could
  // otherwise empty one and drop it under the pipeline's feet.
  std::vector<void*> slabs;
  for (uint64_t va : targets) {
    const Region& r = m_.find(va)->second;
    if (r.was_small) slabs.push_back(r.owner);
    // Whether the backup outlives this resume is chosen at each resume
    // (torch_memory_saver reads retain_cpu_backup then): the allocation's
    // own flag, or this call's.
    if (r.backup)
      r.backup->retain = (r.flags & VPMM_ALLOC_RETAIN_BACKUP) || (flags & VPMM_RESUME_RETAIN_BACKUP);
  }
  for (void* slab : slabs) alloc_.small().begin_resume(slab);
  const uint64_t mapped_before = m_.totals().mapped;
  ResumePipeline pipeline(*this, *kit_, call, std::move(targets), opt_.pause_batch_bytes);
  st = pipeline.run(n_changed);
  *short_bytes = pipeline.short_bytes();
  for (void* slab : slabs) alloc_.small().end_resume(slab);
  // The resume made new memory beside the pool's cached free pages (the
  // paused addresses need their own handles); give back as much of that
  // cache as it made, so that a pause and resume leave the pool holding
  // what it held (a Rust manager saw 100 MiB mapped for 80 MiB live until a
  // trim). Only whole handles whose work completed: the CPU does not wait.
  const uint64_t made = m_.totals().mapped > mapped_before ? m_.totals().mapped - mapped_before : 0;
  if (made && m_.totals().free) {
    const uint64_t free_now = m_.totals().free;
    // A cached page that cannot be given back (its unmap failed) stays
    // cached: the resume itself succeeded.
    (void)release_free(free_now > made ? free_now - made : 0, false);
  }
  alloc_.note_peaks();
  return st;
}

void Pauser::commit_resumed(uint64_t va, const std::vector<Mapping>& handles) {
  RegionIt it = m_.find(va);
  Region r = it->second;
  uint64_t cur = va;
  for (const Mapping& h : handles) {
    m_.map_new(cur, h);
    cur += h.size;
  }
  c_.handles_created += handles.size();
  cap_.created(r.size);
  if (r.backup) {
    c_.backup_bytes -= r.size;
    if (!kit_->stores().after_resume(r.backup)) r.backup = nullptr;  // given back
  }
  r.kind = r.was_small ? Kind::Small : Kind::Live;
  if (r.was_small) alloc_.small().on_resume(r.owner);
  r.was_small = false;
  m_.erase(it);
  m_.insert(va, r);
  ++c_.n_resume;
}

// ---------------------------------------------------------------------------
// Trim
// ---------------------------------------------------------------------------

vpmm_status Pauser::release_free(uint64_t keep, bool wait) {
  st_.retry_orphans();
  alloc_.reap_zombies();
  alloc_.small().release_empty_slabs();
  alloc_.merge_completed_straddles();  // after the slabs: they may free a straddled handle's rest
  if (m_.totals().free <= keep) return VPMM_OK;
  // Oldest first: their events are the likeliest to have completed.
  std::vector<std::pair<uint64_t, uint64_t>> order;  // (id, va)
  for (const auto& kv : m_.streams())
    for (const auto& e : kv.second.free_by_size) order.emplace_back(std::get<1>(e), std::get<2>(e));
  std::sort(order.begin(), order.end());
  vpmm_status result = VPMM_OK;
  for (const auto& o : order) {
    if (m_.totals().free <= keep) break;
    RegionIt it = m_.find(o.second);
    auto maps = m_.whole_mappings_in(it->first, it->second.size);
    if (maps.empty()) continue;
    bool done = false;
    vpmm_status st = st_.is_complete(it->second, &done);
    if (st == VPMM_OK && !done) {
      if (!wait) continue;
      EventRef ev;
      st_.event_of(it->second, &ev);
      st = backend_->event_sync(ev->handle());
      if (st == VPMM_OK) ev->mark_done();
    }
    if (st != VPMM_OK) {
      result = st;
      continue;  // e.g. a held host stream: leave that region cached
    }
    // Release a contiguous run of whole handles from the region's front.
    uint64_t lo = maps.front().first, hi = lo;
    for (const auto& mp : maps) {
      if (m_.totals().free - (hi - lo) <= keep) break;
      vpmm_status us = backend_->unmap(mp.first, mp.second.size);
      if (us != VPMM_OK) {
        result = us;  // the rest of this region stays mapped and free
        break;
      }
      st_.release_handle(mp.second);
      m_.unmap_released(mp.first);
      hi += mp.second.size;
    }
    if (hi == lo) continue;
    if (lo > it->first) it = m_.split(it, lo - it->first);
    if (hi < it->first + it->second.size) m_.split(it, hi - it->first);
    m_.make_hole(it);
    c_.bytes_trimmed += hi - lo;
  }
  return result;
}

vpmm_status Pauser::trim(uint64_t keep_bytes) {
  ++c_.n_trim;
  // Idle views hold VA and mappings of free handles for a request of their
  // size that may never come again: trim gives them back first, so that
  // the handles it releases below need no unmapping from them.
  FirstFailure first;
  first.note(alloc_.views().release_idle());
  first.note(release_free(keep_bytes, true));
  vpmm_status st = first.finish();
  if (st != VPMM_OK) return fail_context(st, "vpmm_pool_trim");
  return VPMM_OK;
}

vpmm_status Pauser::prepare_backups(const char* tag, uint64_t* cached) {
  const char* call = "vpmm_pool_prepare_backups";
  // Three steps, so that seconds of pinning never hold the pool lock: under
  // the lock, count the buffers a pause of `tag` would take (those the cache
  // already has are taken, so none is counted twice, and put back) and
  // reserve the missing ones against the pinned limit; without the lock, pin
  // them; under the lock again, put them in the cache, where the pause finds
  // them. A pause meanwhile waits for this call (PauseKit::wait_prepares),
  // rather than pinning the same bytes a second time, and takes over: the
  // loop stops after the buffer it is pinning, and the pause pins the rest.
  std::vector<uint64_t> to_pin;
  {
    PoolGuard lock(mu_);
    uint32_t want = 0;
    vpmm_status st = tags_.find_used(call, tag, &want);
    if (st != VPMM_OK) return st;
    if (!(backend_->capabilities() & kCapDeviceCopy))
      return fail(VPMM_ERR_UNSUPPORTED, "%s: the %s backend cannot copy device memory to the host", call,
                  backend_->name());
    std::vector<std::pair<void*, uint64_t>> taken;
    for (const auto& kv : m_.regions()) {
      const Region& r = kv.second;
      // Only pinned backups come from the cache; one the allocation keeps
      // from its last pause (retained) needs no buffer either.
      if ((r.kind != Kind::Live && r.kind != Kind::Small) || !TagTable::matches(r.tag, want) ||
          !(r.flags & VPMM_ALLOC_HOST_BACKUP) || !kit_->stores().prepared_ahead(r.flags) || r.backup)
        continue;
      if (r.kind == Kind::Small && alloc_.small().empty_if_settled(r.owner)) continue;  // a pause skips it too
      void* b = nullptr;
      uint64_t got = 0;
      if (kit_->pinned().take_cached(r.size, &b, &got))
        taken.emplace_back(b, got);
      else if (kit_->pinned().reserve_pinned(r.size))
        to_pin.push_back(r.size);
      // else: past the pinned limit, a pause backs it up in pageable memory
    }
    for (const auto& b : taken) kit_->pinned().put(b.first, b.second);
    kit_->begin_prepare();
  }
  std::vector<std::pair<void*, uint64_t>> pinned;
  vpmm_status st = VPMM_OK;
  for (uint64_t size : to_pin) {
    if (kit_->pause_waiting()) break;  // its reservations are given up below
    void* p = nullptr;
    st = backend_->host_alloc_pinned(size, &p);
    if (st != VPMM_OK) break;
    pinned.emplace_back(p, size);
  }
  {
    PoolGuard lock(mu_);
    for (const auto& b : pinned) kit_->pinned().put(b.first, b.second);
    for (size_t i = pinned.size(); i < to_pin.size(); ++i) kit_->pinned().unreserve_pinned(to_pin[i]);
    kit_->end_prepare();
    if (st != VPMM_OK) st = fail_context(st, call);  // what was pinned stays cached: not lost
    else if (cached) *cached = kit_->pinned().cached_bytes();
  }
  return st;
}

// ---------------------------------------------------------------------------
// Backup directories
// ---------------------------------------------------------------------------

vpmm_status Pauser::backup_dir_id(const char* call, const char* dir, uint32_t* id) {
  StoreTable& st = kit_->stores();
  if (dir != nullptr) return st.intern_dir(call, dir, id);
  if (st.default_dir() != 0) {
    *id = st.default_dir();
    return VPMM_OK;
  }
  // VPMM_BACKUP_DIR, read with the options when the pool was made.
  const std::string& env = opt_.backup_dir;
  if (!env.empty()) return st.intern_dir(call, env.c_str(), id);
  return fail(VPMM_ERR_INVALID_ARGUMENT,
              "%s: VPMM_ALLOC_BACKUP_DISK needs a directory: none in the attributes or the tag scope, "
              "none set for the pool (vpmm_pool_set_backup_dir) and VPMM_BACKUP_DIR is not set",
              call);
}

vpmm_status Pauser::set_backup_dir(const char* dir) {
  uint32_t id = 0;
  if (dir != nullptr && *dir != '\0') {
    vpmm_status st = kit_->stores().intern_dir("vpmm_pool_set_backup_dir", dir, &id);
    if (st != VPMM_OK) return st;
  }
  kit_->stores().set_default_dir(id);
  return VPMM_OK;
}

vpmm_status Pauser::tag_stats(const char* tag, vpmm_tag_stats* out) {
  uint32_t want = 0;
  vpmm_status st = tags_.find_used("vpmm_pool_tag_stats", tag, &want);
  if (st != VPMM_OK) return st;
  vpmm_tag_stats t;
  std::memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  for (const auto& kv : m_.regions()) {
    const Region& r = kv.second;
    if (!TagTable::matches(r.tag, want)) continue;
    // Cached free memory, as the pool's stats count it; a paused slab whose
    // blocks were all freed holds nothing to resume either.
    if ((r.kind == Kind::Small || (r.kind == Kind::Paused && r.was_small)) &&
        alloc_.small().empty_if_settled(r.owner))
      continue;
    if (r.kind == Kind::Live || r.kind == Kind::Small) {
      t.live_bytes += r.size;
      ++t.n_live;
      if (r.backup && r.backup->retain) t.retained_bytes += r.backup->bytes;
    } else if (r.kind == Kind::Paused) {
      t.paused_bytes += r.size;
      t.backup_bytes += r.backup ? r.size : 0;
      ++t.n_paused;
    }
  }
  *out = t;
  return VPMM_OK;
}

// ---------------------------------------------------------------------------
// Backups seen from outside, the limit
// ---------------------------------------------------------------------------

// A view of a paused region's backup, or of an active one's retained backup:
// the pointer stays valid until the region is resumed (unless retained) or
// freed.
vpmm_status Pauser::backup_lookup(const void* ptr, void** host, uint64_t* bytes) {
  const uint64_t va = reinterpret_cast<uint64_t>(ptr);
  RegionIt it = m_.find_containing(va);
  if (it == m_.end()) {
    auto v = alloc_.views().table().containing(va);
    if (v.second && v.second->active && va < v.first + v.second->live.requested)
      return fail(VPMM_ERR_WRONG_STATE,
                  "vpmm_pool_backup_lookup: the allocation containing %p is active, not paused, and "
                  "keeps no retained backup of a completed pause", ptr);
  }
  if (it == m_.end() || it->second.kind == Kind::Hole || it->second.kind == Kind::Free ||
      it->second.kind == Kind::Zombie || it->second.kind == Kind::Transit)
    return fail(VPMM_ERR_UNKNOWN_POINTER,
                "vpmm_pool_backup_lookup: pointer %p is not inside an allocation of this pool", ptr);
  // An active allocation's backup counts only when retained and complete:
  // then it holds the bytes of the last pause.
  if (it->second.kind != Kind::Paused &&
      !(it->second.backup && it->second.backup->retain && it->second.backup->current))
    return fail(VPMM_ERR_WRONG_STATE,
                "vpmm_pool_backup_lookup: the allocation containing %p is active, not paused, and "
                "keeps no retained backup of a completed pause", ptr);
  if (!it->second.backup)
    return fail(VPMM_ERR_WRONG_STATE,
                "vpmm_pool_backup_lookup: the paused allocation containing %p has no host backup "
                "(allocated without VPMM_ALLOC_HOST_BACKUP)", ptr);
  const Backup& b = *it->second.backup;
  if (!b.store->addressable())
    return fail(VPMM_ERR_UNSUPPORTED,
                "vpmm_pool_backup_lookup: the backup of the allocation containing %p is %s, which has "
                "no host address", ptr, b.store->where(b).c_str());
  // The same bytes vpmm_pool_lookup calls an allocation: not a page's
  // padding after it, nor a slab's free blocks.
  uint64_t base = it->first, size = it->second.requested;
  const bool slab = it->second.was_small || it->second.kind == Kind::Small;
  if (slab ? !alloc_.small().lookup(it, va, &base, &size) : va >= base + size)
    return fail(VPMM_ERR_UNKNOWN_POINTER,
                "vpmm_pool_backup_lookup: pointer %p is inside a backed-up range but not inside an "
                "allocation (padding or a free block)", ptr);
  if (host) *host = static_cast<char*>(b.host) + (va - it->first);
  if (bytes) *bytes = base + size - va;
  return VPMM_OK;
}

vpmm_status Pauser::set_limit(uint64_t bytes) {
  if (bytes != 0 && m_.totals().mapped > bytes) {
    const uint64_t used = m_.totals().mapped - m_.totals().free;
    release_free(bytes > used ? bytes - used : 0, true);
    if (m_.totals().mapped > bytes)
      return fail(VPMM_ERR_WRONG_STATE,
                  "vpmm_pool_set_limit: %" PRIu64 " bytes is below the %" PRIu64
                  " bytes still mapped after trimming; the limit stays %" PRIu64,
                  bytes, m_.totals().mapped, cap_.limit());
  }
  cap_.set_limit(bytes);
  return VPMM_OK;
}

void Pauser::fill_stats(vpmm_stats* s) const {
  s->backup_cache_bytes = kit_->pinned().cached_bytes();
  s->backup_pinned_bytes = kit_->pinned().pinned_bytes();
  s->backup_pageable_bytes = kit_->pinned().pageable_bytes();
  kit_->stores().fill_stats(s);
}

}  // namespace vpmm
