// The pause and resume pipelines (see pause_pipeline.hpp).
#include "core/pause_pipeline.hpp"

#include <algorithm>

#include "core/backups.hpp"
#include "common/status.hpp"

namespace vpmm {

// ---------------------------------------------------------------------------
// Pause
// ---------------------------------------------------------------------------

PausePipeline::PausePipeline(HandleOps& ops, Backups& backups, const char* call, std::vector<uint64_t> plain,
                             std::vector<uint64_t> backed, std::vector<EventRef> last_uses,
                             uint64_t batch_bytes)
    : ops_(ops),
      backups_(backups),
      call_(call),
      plain_(std::move(plain)),
      backed_(std::move(backed)),
      last_uses_(std::move(last_uses)),
      batch_bytes_(batch_bytes ? batch_bytes : kPauseBatchBytes) {}

PausePipeline::~PausePipeline() {
  if (bufs_owned_) give_back(released_);
}

void PausePipeline::give_back(size_t from) {
  // No copy may still write a buffer that goes back to the cache.
  if (from < bufs_.size() && cs_) backups_.backend().stream_sync(cs_);
  for (size_t i = from; i < bufs_.size(); ++i) backups_.buffers().put(bufs_[i].p, bufs_[i].size);
  bufs_owned_ = false;
}

// 1. Host buffers for every backup, before anything changes: no host memory
// means nothing is paused.
vpmm_status PausePipeline::take_buffers() {
  bufs_.reserve(backed_.size());
  bufs_owned_ = true;
  for (uint64_t va : backed_) {
    Buffer b;
    vpmm_status st = backups_.buffers().get(ops_.region(va).size, &b.p, &b.size);
    if (st != VPMM_OK) return fail_context(st, call_);
    bufs_.push_back(b);
  }
  if (!backed_.empty()) {
    vpmm_status st = backups_.copy_stream(&cs_);
    if (st != VPMM_OK) return fail_context(st, call_);
  }
  return VPMM_OK;
}

// 2. Order after the work that may still use the targets (their streams'
// queued work, frees of slab blocks on other streams): the copy stream waits
// on the GPU (and `ready_` marks that point for the targets without a
// backup); without any backup the CPU waits.
vpmm_status PausePipeline::order_after_work() {
  for (const EventRef& ev : last_uses_) {
    vpmm_status st = backed_.empty() ? backups_.backend().event_sync(ev->handle())
                                     : backups_.backend().stream_wait(cs_, ev->handle());
    if (st != VPMM_OK) return fail_context(st, call_);
  }
  if (!backed_.empty() && !plain_.empty()) {
    vpmm_status st = ops_.record_event(cs_, &ready_);
    if (st != VPMM_OK) return fail_context(st, call_);
  }
  return VPMM_OK;
}

// 3. Copies are queued a few batches ahead of the releases, not all at once:
// a stream holds only so many pending copies, and past that every enqueue
// blocks until one completes (on the H100, queueing 4096 copies of 4 MiB
// took 240 of the 320 ms they ran), which leaves the unmaps no CPU time to
// hide in. Each batch ends with an event; its allocations are released once
// it completed. A copy or event that fails ends the queueing: what was not
// released stays active.
void PausePipeline::queue_batches() {
  while (!stopped_ && queued_ < backed_.size() && pending_.size() < kPauseBatchesAhead) {
    uint64_t bytes = 0;
    const size_t start = queued_;
    for (; queued_ < backed_.size() && bytes < batch_bytes_; ++queued_) {
      const uint64_t size = ops_.region(backed_[queued_]).size;
      vpmm_status st = backups_.backend().copy_d2h(bufs_[queued_].p, backed_[queued_], size, cs_);
      if (st != VPMM_OK) {
        result_.note(fail_context(st, call_));
        stopped_ = true;
        break;
      }
      bytes += size;
    }
    if (queued_ == start) return;
    EventRef ev;
    vpmm_status st = ops_.record_event(cs_, &ev);
    if (st != VPMM_OK) {
      result_.note(fail_context(st, call_));
      stopped_ = true;  // copies without an event are never released
      return;
    }
    pending_.emplace_back(queued_, std::move(ev));
  }
}

// 4. An allocation whose unmap fails stays active (its data is still there);
// the others go on and the call reports the error.
vpmm_status PausePipeline::release() {
  if (!plain_.empty() && ready_) {
    vpmm_status st = backups_.backend().event_sync(ready_->handle());
    if (st != VPMM_OK) return fail_context(st, call_);
  }
  for (uint64_t va : plain_) result_.note(ops_.release_paused_target(call_, va, nullptr, 0));
  while (!pending_.empty()) {
    vpmm_status st = backups_.backend().event_sync(pending_.front().second->handle());
    if (st != VPMM_OK) {
      result_.note(fail_context(st, call_));
      break;  // this batch's backups may be incomplete: the rest stays active
    }
    const size_t end = pending_.front().first;
    pending_.pop_front();
    queue_batches();  // feed the copy engine before the CPU turns to unmapping
    for (; released_ < end; ++released_) {
      const Buffer& b = bufs_[released_];
      st = ops_.release_paused_target(call_, backed_[released_], b.p, b.size);
      if (st != VPMM_OK) {
        result_.note(st);
        backups_.buffers().put(b.p, b.size);  // its copy completed
      }
    }
  }
  give_back(released_);
  return VPMM_OK;
}

vpmm_status PausePipeline::run(uint64_t* n_paused) {
  vpmm_status st = take_buffers();
  if (st == VPMM_OK) st = order_after_work();
  if (st != VPMM_OK) return st;  // nothing changed; the destructor gives the buffers back
  queue_batches();
  st = release();
  if (st != VPMM_OK) return st;
  st = result_.finish();
  if (st == VPMM_OK && n_paused) *n_paused = plain_.size() + backed_.size();
  return st;
}

// ---------------------------------------------------------------------------
// Resume
// ---------------------------------------------------------------------------

vpmm_status ResumePipeline::run(uint64_t* n_resumed) {
  bool any_backup = false;
  for (uint64_t va : targets_) any_backup |= ops_.region(va).backup != nullptr;
  Stream cs = nullptr;
  if (any_backup) {
    vpmm_status st = backups_.copy_stream(&cs);
    if (st != VPMM_OK) return fail_context(st, call_);
  }
  struct Mapped {
    uint64_t va;
    std::vector<Mapping> handles;
  };
  std::vector<Mapped> mapped;
  mapped.reserve(targets_.size());
  FirstFailure stop;  // why the pipeline stopped early (the rest stays paused)
  for (uint64_t va : targets_) {
    const Region& r = ops_.region(va);
    std::vector<Mapping> hs;
    vpmm_status st = ops_.map_paused_target(r, va, &hs);
    if (st == VPMM_OK && r.backup && (st = backups_.backend().copy_h2d(va, r.backup, r.size, cs)) != VPMM_OK) {
      stop.note(st);  // before the undo can overwrite the message
      ops_.undo_resume_target(r, va, hs, hs.size());  // not queued: nothing writes it; it stays paused
      break;
    }
    if (st != VPMM_OK) {
      if (st == VPMM_ERR_OUT_OF_MEMORY) short_bytes_ = r.size;
      stop.note(st);
      break;
    }
    mapped.push_back({va, std::move(hs)});
  }

  // Every queued copy completes before anything is committed.
  if (cs && !mapped.empty()) {
    // An event rather than a stream sync: only the copies queued so far count.
    EventRef done;
    vpmm_status st = ops_.record_event(cs, &done);
    if (st == VPMM_OK) st = backups_.backend().event_sync(done->handle());
    if (st != VPMM_OK) {
      FirstFailure drain;
      drain.note(fail_context(st, call_));
      backups_.backend().stream_sync(cs);  // nothing may still write what is unmapped next
      for (const Mapped& m : mapped) ops_.undo_resume_target(ops_.region(m.va), m.va, m.handles, m.handles.size());
      return drain.finish();  // everything stays paused with its backup
    }
  }
  for (const Mapped& m : mapped) ops_.commit_resumed(m.va, m.handles);
  if (n_resumed) *n_resumed = mapped.size();
  if (!stop.failed()) return VPMM_OK;
  return fail_context(stop.finish(), call_);
}

}  // namespace vpmm
