// The pause and resume pipelines (see pipeline.hpp).
#include "core/pause/pipeline.hpp"

#include <algorithm>

#include "core/pause/kit.hpp"
#include "core/pause/staging.hpp"
#include "core/pause/stores/store_table.hpp"
#include "common/status.hpp"

namespace vpmm {

namespace {
// The staging slots' size: the pipeline's unit of copying, at most kStageSlotBytes.
uint64_t slot_bytes(uint64_t batch_bytes) { return std::min(kStageSlotBytes, batch_bytes); }
}  // namespace

// ---------------------------------------------------------------------------
// Pause
// ---------------------------------------------------------------------------

PausePipeline::PausePipeline(HandleOps& ops, PauseKit& kit, const char* call, std::vector<uint64_t> plain,
                             std::vector<uint64_t> backed, std::vector<EventRef> last_uses,
                             uint64_t batch_bytes, bool unchanged, uint32_t disk_dir)
    : ops_(ops),
      kit_(kit),
      call_(call),
      plain_(std::move(plain)),
      backed_(std::move(backed)),
      last_uses_(std::move(last_uses)),
      batch_bytes_(batch_bytes ? batch_bytes : kPauseBatchBytes),
      unchanged_(unchanged),
      disk_dir_(disk_dir) {}

PausePipeline::~PausePipeline() {
  if (owned_) give_back();
}

void PausePipeline::give_back() {
  owned_ = false;
  bool written = false;  // a copy may still write a backup that is let go
  for (const auto* list : {&direct_, &staged_})
    for (const Target& t : *list) written |= !t.released;
  if (written && cs_) kit_.backend().stream_sync(cs_);
  for (auto* list : {&direct_, &staged_, &skipped_})
    for (Target& t : *list)
      if (!t.released && t.fresh) {
        kit_.stores().release(t.backup);
        t.backup = nullptr;
      }
  // A retained backup of a target that stays active stays with it; unless
  // it was skipped, it is no longer current (run() said so once copies began).
}

// 1. Storage for every backup, before anything changes: no host memory, no
// disk space, an unwritable directory mean nothing is paused. A retained
// backup (or an earlier pause's disk file) is written again in place; one
// declared unchanged whose bytes are current is not written at all.
vpmm_status PausePipeline::take_backups() {
  owned_ = true;
  for (uint64_t va : backed_) {
    const Region& r = ops_.region(va);
    Target t;
    t.va = va;
    t.size = r.size;
    t.backup = r.backup;
    if (!t.backup) {
      // To disk: the allocation's backup and retention bits, the disk
      // store's flag and the directory in place of its store and its own.
      const uint32_t flags =
          disk_dir_ ? (r.flags & (VPMM_ALLOC_HOST_BACKUP | VPMM_ALLOC_RETAIN_BACKUP)) | VPMM_ALLOC_BACKUP_DISK |
                          (disk_dir_ << kBackupDirShift)
                    : r.flags;
      vpmm_status st = kit_.stores().acquire(flags, r.size, &t.backup);
      if (st != VPMM_OK) return fail_context(st, call_);
      t.fresh = true;
    }
    // Small-object pages may have new blocks since their last pause.
    const bool skip = unchanged_ && t.backup->retain && t.backup->current && r.kind != Kind::Small;
    (skip ? skipped_ : t.backup->store->staged() ? staged_ : direct_).push_back(t);
  }
  if (copying()) {
    vpmm_status st = kit_.copy_stream(&cs_);
    if (st != VPMM_OK) return fail_context(st, call_);
  }
  return VPMM_OK;
}

// 2. Order after the work that may still use the targets (their streams'
// queued work, frees of slab blocks on other streams): the copy stream waits
// on the GPU (and `ready_` marks that point for the targets released without
// a copy); without any copy the CPU waits.
vpmm_status PausePipeline::order_after_work() {
  for (const EventRef& ev : last_uses_) {
    vpmm_status st = !copying() ? kit_.backend().event_sync(ev->handle())
                                : kit_.backend().stream_wait(cs_, ev->handle());
    if (st != VPMM_OK) return fail_context(st, call_);
  }
  if (copying() && (!plain_.empty() || !skipped_.empty())) {
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
  while (!stopped_ && queued_ < direct_.size() && pending_.size() < kPauseBatchesAhead) {
    uint64_t bytes = 0;
    const size_t start = queued_;
    for (; queued_ < direct_.size() && bytes < batch_bytes_; ++queued_) {
      const Target& t = direct_[queued_];
      vpmm_status st = kit_.backend().copy_d2h(t.backup->host, t.va, t.size, cs_);
      if (st != VPMM_OK) {
        result_.note(fail_context(st, call_));
        stopped_ = true;
        break;
      }
      bytes += t.size;
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
  if ((!plain_.empty() || !skipped_.empty()) && ready_) {
    vpmm_status st = kit_.backend().event_sync(ready_->handle());
    if (st != VPMM_OK) return fail_context(st, call_);
  }
  for (uint64_t va : plain_) result_.note(ops_.release_paused_target(call_, va, nullptr));
  for (Target& t : skipped_) {
    vpmm_status st = ops_.release_paused_target(call_, t.va, t.backup);
    result_.note(st);
    if (st == VPMM_OK) {
      t.released = true;
      kit_.stores().note_skipped(t.size);
    }
  }
  while (!pending_.empty()) {
    vpmm_status st = kit_.backend().event_sync(pending_.front().second->handle());
    if (st != VPMM_OK) {
      result_.note(fail_context(st, call_));
      stopped_ = true;
      break;  // this batch's backups may be incomplete: the rest stays active
    }
    const size_t end = pending_.front().first;
    pending_.pop_front();
    queue_batches();  // feed the copy engine before the CPU turns to unmapping
    for (; released_ < end; ++released_) {
      Target& t = direct_[released_];
      st = ops_.release_paused_target(call_, t.va, t.backup);
      if (st == VPMM_OK)
        t.released = true;
      else
        result_.note(st);  // its copy completed; give_back lets the backup go
    }
  }
  // A failed wait leaves batches queued: their copies may still run, which
  // give_back waits for before letting their backups go.
  release_staged();
  give_back();
  return VPMM_OK;
}

// 5. The staged stores go last, with the copy engine to themselves.
void PausePipeline::release_staged() {
  if (staged_.empty() || stopped_) return;  // the copy stream failed: no more copies
  std::vector<StagedTarget> targets;
  targets.reserve(staged_.size());
  for (const Target& t : staged_) targets.push_back({t.va, t.size, t.backup});
  std::vector<bool> released;
  StagedPause(ops_, kit_, call_, cs_, slot_bytes(batch_bytes_), targets).run(&result_, &released);
  for (size_t i = 0; i < staged_.size(); ++i) staged_[i].released = released[i];
}

vpmm_status PausePipeline::run(uint64_t* n_paused) {
  vpmm_status st = take_backups();
  if (st == VPMM_OK) st = order_after_work();
  if (st != VPMM_OK) return st;  // nothing changed; the destructor gives the backups back
  // From here copies run: the backups they write stop speaking for their
  // allocations until their copy completed (release_paused_target).
  for (auto* list : {&direct_, &staged_})
    for (Target& t : *list) t.backup->current = false;
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
  std::vector<StagedTarget> staged;
  for (uint64_t va : targets_) {
    const Region& r = ops_.region(va);
    any_backup |= r.backup != nullptr;
    if (r.backup && r.backup->store->staged()) staged.push_back({va, r.size, r.backup});
  }
  Stream cs = nullptr;
  if (any_backup) {
    vpmm_status st = kit_.copy_stream(&cs);
    if (st != VPMM_OK) return fail_context(st, call_);
  }
  StagedResume stage(ops_, kit_, call_, cs);
  if (!staged.empty()) {
    // No slots, no resume: nothing is mapped yet.
    vpmm_status st = stage.prepare(slot_bytes(batch_bytes_ ? batch_bytes_ : kPauseBatchBytes), staged);
    if (st != VPMM_OK) return st;
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
    if (st != VPMM_OK) {
      if (st == VPMM_ERR_OUT_OF_MEMORY) short_bytes_ = r.size;
      stop.note(st);
      break;
    }
    if (r.backup) {
      if (r.backup->store->staged())
        st = stage.restore({va, r.size, r.backup});  // nothing of it still queued on failure
      else
        st = kit_.backend().copy_h2d(va, r.backup->host, r.size, cs);  // not queued on failure
      if (st != VPMM_OK) {
        stop.note(st);  // before the undo can overwrite the message
        ops_.undo_resume_target(r, va, hs, hs.size());  // it stays paused, its backup untouched
        break;
      }
    }
    mapped.push_back({va, std::move(hs)});
  }

  // Every queued copy completes before anything is committed.
  if (cs && !mapped.empty()) {
    // An event rather than a stream sync: only the copies queued so far count.
    EventRef done;
    vpmm_status st = ops_.record_event(cs, &done);
    if (st == VPMM_OK) st = kit_.backend().event_sync(done->handle());
    if (st != VPMM_OK) {
      FirstFailure drain;
      drain.note(fail_context(st, call_));
      kit_.backend().stream_sync(cs);  // nothing may still write what is unmapped next
      for (const Mapped& m : mapped) ops_.undo_resume_target(ops_.region(m.va), m.va, m.handles, m.handles.size());
      return drain.finish();  // everything stays paused with its backup
    }
    stage.settled();  // the slots are free to unpin
  }
  for (const Mapped& m : mapped) ops_.commit_resumed(m.va, m.handles);
  if (n_resumed) *n_resumed = mapped.size();
  if (!stop.failed()) return VPMM_OK;
  return fail_context(stop.finish(), call_);
}

}  // namespace vpmm
