// Staged transfers of mmap and disk backups (see pause_stage.hpp).
#include "core/pause_stage.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "common/status.hpp"

namespace vpmm {

namespace {

uint64_t chunks_of(uint64_t size, uint64_t chunk) { return (size + chunk - 1) / chunk; }

// The store side of one chunk: into the backup (pause) or out of it
// (resume). A disk backup's file is the descriptor it keeps.
vpmm_status store_write(Backend& b, Backup& bk, const char* src, uint64_t off, uint64_t len) {
  if (bk.store == Store::Disk) return b.file_write(bk.fd, src, len, off);
  return b.host_copy(static_cast<char*>(bk.host) + off, src, len);
}
vpmm_status store_read(Backend& b, Backup& bk, char* dst, uint64_t off, uint64_t len) {
  if (bk.store == Store::Disk) return b.file_read(bk.fd, dst, len, off);
  return b.host_copy(dst, static_cast<const char*>(bk.host) + off, len);
}

}  // namespace

// ---------------------------------------------------------------------------
// StagingSlots
// ---------------------------------------------------------------------------

StagingSlots::~StagingSlots() {
  // No copy may still use a slot that is unpinned: wait for the uses nobody
  // waited for (a failed transfer's), the whole stream if that fails.
  for (size_t i = 0; i < last_use_.size(); ++i)
    if (last_use_[i] && wait(i) != VPMM_OK) {
      backups_.backend().stream_sync(cs_);
      break;
    }
  last_use_.clear();
  for (const Buffer& b : slots_) backups_.buffers().put_transient(b.p, b.size);
}

vpmm_status StagingSlots::take(uint64_t slot_bytes, uint64_t chunks) {
  const size_t n = static_cast<size_t>(std::min<uint64_t>(kStageSlots, chunks));
  slots_.reserve(n);
  last_use_.resize(n);
  bytes_ = slot_bytes;
  for (size_t i = 0; i < n; ++i) {
    Buffer b;
    vpmm_status st = backups_.buffers().get_transient(slot_bytes, &b.p, &b.size);
    if (st != VPMM_OK) {
      char ctx[96];
      std::snprintf(ctx, sizeof ctx, "%s: staging slot of %" PRIu64 " bytes", call_, slot_bytes);
      return fail_context(st, ctx);
    }
    slots_.push_back(b);
  }
  return VPMM_OK;
}

vpmm_status StagingSlots::wait(size_t i) {
  if (!last_use_[i]) return VPMM_OK;
  vpmm_status st = backups_.backend().event_sync(last_use_[i]->handle());
  if (st != VPMM_OK) return fail_context(st, call_);
  last_use_[i].reset();
  return VPMM_OK;
}

vpmm_status StagingSlots::mark(size_t i) {
  EventRef ev;
  vpmm_status st = ops_.record_event(cs_, &ev);
  if (st != VPMM_OK) return fail_context(st, call_);
  last_use_[i] = std::move(ev);
  return VPMM_OK;
}

// ---------------------------------------------------------------------------
// Pause: device -> slot (copy engine) -> store (CPU)
// ---------------------------------------------------------------------------

void StagedPause::run(FirstFailure* result, std::vector<bool>* released) {
  released->assign(targets_.size(), false);
  if (targets_.empty()) return;
  uint64_t largest = 0;
  for (const StagedTarget& t : targets_) largest = std::max(largest, t.size);
  const uint64_t chunk = std::min(slot_bytes_, largest);
  struct Chunk {
    size_t t;
    uint64_t off, len;
  };
  std::vector<Chunk> chunks;
  for (size_t t = 0; t < targets_.size(); ++t)
    for (uint64_t off = 0; off < targets_[t].size; off += chunk)
      chunks.push_back({t, off, std::min(chunk, targets_[t].size - off)});

  StagingSlots slots(ops_, backups_, call_, cs_);
  vpmm_status st = slots.take(chunk, chunks.size());
  if (st != VPMM_OK) {
    result->note(st);  // nothing queued: every target stays active
    return;
  }
  Backend& b = backups_.backend();
  const size_t n = slots.count();
  std::vector<bool> ok(targets_.size(), true);  // no failure so far
  std::vector<bool> queued(chunks.size(), false);
  size_t q = 0;        // next chunk to queue
  bool stop = false;   // a copy could not be queued: queue no more
  auto queue_ahead = [&](size_t drained) {
    for (; !stop && q < chunks.size() && q < drained + n; ++q) {
      const Chunk& c = chunks[q];
      if (!ok[c.t]) continue;
      vpmm_status qs = b.copy_d2h(slots.slot(q % n), targets_[c.t].va + c.off, c.len, cs_);
      if (qs == VPMM_OK) qs = slots.mark(q % n);
      if (qs != VPMM_OK) {
        result->note(fail_context(qs, call_));
        stop = true;  // this chunk's target and every later one stay active
        return;
      }
      queued[q] = true;
    }
  };
  queue_ahead(0);
  for (size_t d = 0; d < q; ++d) {
    const Chunk& c = chunks[d];
    const StagedTarget& t = targets_[c.t];
    if (queued[d]) {
      vpmm_status ws = slots.wait(d % n);
      if (ws != VPMM_OK) {
        // The slot's bytes cannot be trusted, nor the later ones': what is
        // not released yet stays active.
        result->note(ws);
        break;
      }
      if (ok[c.t]) {
        vpmm_status ss = store_write(b, *t.backup, slots.slot(d % n), c.off, c.len);
        if (ss != VPMM_OK) {
          result->note(fail_context(ss, call_));
          ok[c.t] = false;
        }
      }
    }
    if (c.off + c.len == t.size) {  // the target's last chunk
      if (ok[c.t] && queued[d]) {
        vpmm_status rs = ops_.release_paused_target(call_, t.va, t.backup);
        if (rs == VPMM_OK)
          (*released)[c.t] = true;
        else
          result->note(rs);
      }
    }
    queue_ahead(d + 1);
  }
}

// ---------------------------------------------------------------------------
// Resume: store (CPU) -> slot -> device (copy engine)
// ---------------------------------------------------------------------------

vpmm_status StagedResume::prepare(uint64_t slot_bytes, const std::vector<StagedTarget>& targets) {
  uint64_t largest = 0, chunks = 0;
  for (const StagedTarget& t : targets) largest = std::max(largest, t.size);
  const uint64_t chunk = std::min(slot_bytes, largest);
  for (const StagedTarget& t : targets) chunks += chunks_of(t.size, chunk);
  return chunks ? slots_.take(chunk, chunks) : VPMM_OK;
}

vpmm_status StagedResume::restore(const StagedTarget& t) {
  Backend& b = backups_.backend();
  const size_t n = slots_.count();
  const uint64_t chunk = slots_.bytes();
  vpmm_status st = VPMM_OK;
  for (uint64_t off = 0; off < t.size && st == VPMM_OK; off += chunk, ++next_) {
    const uint64_t len = std::min(chunk, t.size - off);
    const size_t s = static_cast<size_t>(next_ % n);
    if ((st = slots_.wait(s)) != VPMM_OK) break;
    if ((st = store_read(b, *t.backup, slots_.slot(s), off, len)) != VPMM_OK) {
      st = fail_context(st, call_);
      break;
    }
    if ((st = b.copy_h2d(t.va + off, slots_.slot(s), len, cs_)) != VPMM_OK) {
      st = fail_context(st, call_);
      break;
    }
    if ((st = slots_.mark(s)) != VPMM_OK) break;
  }
  if (st != VPMM_OK) {
    // Copies of this target already queued must not land after its unmap.
    FirstFailure first;
    first.note(st);
    b.stream_sync(cs_);
    return first.finish();
  }
  return VPMM_OK;
}

}  // namespace vpmm
