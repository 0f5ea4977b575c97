// The pause and resume pipelines: the order of copies, events, unmaps and
// maps that makes a pause run at copy-engine speed and a failure leave every
// allocation either whole and active or paused with its whole backup.
//
// The pool decides which allocations are targets (tags, small slabs) and
// does the per-allocation region work; a pipeline only orders it, through
// the narrow HandleOps interface the Pauser implements, and its copies and
// waits through the PauseKit. Everything runs
// with the pool mutex held.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "common/status.hpp"
#include "core/state/regions.hpp"

namespace vpmm {

class PauseKit;
struct Backup;

// Pause closes a batch of D2H copies with one event once it holds this many
// bytes: the CPU releases a batch's handles while the copy engine works on
// the next (about 1 ms of copying at H100 speed), and thousands of small
// allocations cost a few hundred events, not thousands.
constexpr uint64_t kPauseBatchBytes = 64ull << 20;
// Batches queued ahead of the one being released: enough to keep the copy
// engine busy through CPU hiccups (4 x 64 MiB is ~5 ms of copying), few
// enough that the stream's queue never fills and blocks the enqueue.
constexpr size_t kPauseBatchesAhead = 4;

// The handle operations the pipelines ask of the pool: the region of an
// allocation, and the per-allocation steps that change the region map and
// the allocation's handles. Copies, waits and host buffers go through
// the PauseKit instead.
class HandleOps {
 public:
  virtual const Region& region(uint64_t va) = 0;
  virtual vpmm_status record_event(Stream s, EventRef* out) = 0;  // counted in the pool's stats
  // Pause of one target whose backup (if any) is complete: unmap and release
  // its handles, turn it into a Paused region holding `backup`. On failure it
  // stays active and whole; the caller still owns `backup`.
  virtual vpmm_status release_paused_target(const char* call, uint64_t va, Backup* backup) = 0;
  // Resume of one target: charges retaken, fresh handles created, mapped at
  // va and made accessible. On failure nothing of that is left.
  virtual vpmm_status map_paused_target(const Region& r, uint64_t va, std::vector<Mapping>* out) = 0;
  // Undoes map_paused_target (the first n_mapped of hs were mapped); it stays paused.
  virtual void undo_resume_target(const Region& r, uint64_t va, const std::vector<Mapping>& hs,
                                  size_t n_mapped) = 0;
  // A resumed target's mapped handles become its own; its backup is kept
  // (retained, a disk file) or given back (StoreTable::after_resume).
  virtual void commit_resumed(uint64_t va, const std::vector<Mapping>& handles) = 0;

 protected:
  ~HandleOps() = default;
};

// Pause is a pipeline: D2H copies are queued on the copy stream in batches
// that each end with an event, a few batches ahead, and the CPU unmaps and
// releases a batch's handles as soon as its event completes, while the copy
// engine works on the next batches. So the per-handle driver calls
// (set-access, unmap and release cost ~20-40 us per handle on an H100) hide
// behind the copies instead of adding to them. An allocation is released
// only after its own backup is complete.
//
// Backups in pinned memory take that path ("direct"); those of the mmap and
// disk stores move through staging slots afterwards (staging.hpp); a
// retained backup declared unchanged is not copied at all and is released
// with the targets without a backup.
class PausePipeline {
 public:
  // `plain`: targets without a backup; `backed`: with one; `last_uses`:
  // the events after which no queued work uses any target. batch_bytes 0 =
  // kPauseBatchBytes. `unchanged`: VPMM_PAUSE_BACKUP_UNCHANGED. `disk_dir`:
  // 0, or the backup directory in which every backup this pause takes new
  // is a disk-store file (kPauseBackupsToDisk).
  PausePipeline(HandleOps& ops, PauseKit& kit, const char* call, std::vector<uint64_t> plain,
                std::vector<uint64_t> backed, std::vector<EventRef> last_uses, uint64_t batch_bytes,
                bool unchanged, uint32_t disk_dir = 0);
  ~PausePipeline();
  // Pauses what it can. Returns the first failure (the rest of the targets
  // stay active); *n_paused (may be null) is set on success.
  vpmm_status run(uint64_t* n_paused);

 private:
  struct Target {
    uint64_t va = 0;
    uint64_t size = 0;
    Backup* backup = nullptr;
    bool fresh = false;     // taken by this pause (given back if it fails)
    bool released = false;  // paused: its backup belongs to the region now
  };
  vpmm_status take_backups();       // 1. every backup's storage before anything changes
  vpmm_status order_after_work();   // 2. copies wait for the targets' last uses
  void queue_batches();             // 3. copies, a few batches ahead
  vpmm_status release();            // 4. unmap and release as batches complete
  void release_staged();            // 5. the staged stores, through their slots
  void give_back();                 // backups of targets not paused: fresh ones released
  bool copying() const { return !direct_.empty() || !staged_.empty(); }

  HandleOps& ops_;
  PauseKit& kit_;
  const char* call_;
  std::vector<uint64_t> plain_, backed_;
  std::vector<EventRef> last_uses_;
  uint64_t batch_bytes_;
  bool unchanged_;
  uint32_t disk_dir_;
  std::vector<Target> direct_, staged_, skipped_;
  bool owned_ = false;  // give_back not yet done
  Stream cs_ = nullptr;
  EventRef ready_;  // the point the plain and skipped targets' release waits for
  std::deque<std::pair<size_t, EventRef>> pending_;  // (end of batch in direct_, its event)
  size_t queued_ = 0;     // copies queued
  size_t released_ = 0;   // direct_ targets released or given up
  bool stopped_ = false;  // queue no more
  FirstFailure result_;
};

// Resume is a pipeline too: each allocation's H2D copy is queued right after
// its handles are mapped, so the copy engine restores one allocation while
// the CPU creates and maps the next; the CPU waits once, at the end. An
// allocation is committed only after that wait succeeded; one that could not
// be mapped or copied (or whose backup could not be read) stays paused with
// its backup, and so does every allocation after it (call again later).
// Backups of the mmap and disk stores are read through staging slots.
class ResumePipeline {
 public:
  ResumePipeline(HandleOps& ops, PauseKit& kit, const char* call, std::vector<uint64_t> targets,
                 uint64_t batch_bytes)
      : ops_(ops), kit_(kit), call_(call), targets_(std::move(targets)), batch_bytes_(batch_bytes) {}
  // *n_resumed (may be null) is set on success and on failure: the
  // allocations committed before the pipeline stopped.
  vpmm_status run(uint64_t* n_resumed);
  // After a run that stopped for lack of memory: the size of the allocation
  // that could not be mapped (what an OOM callback is asked to find); else 0.
  uint64_t short_bytes() const { return short_bytes_; }

 private:
  HandleOps& ops_;
  PauseKit& kit_;
  const char* call_;
  std::vector<uint64_t> targets_;
  uint64_t batch_bytes_;
  uint64_t short_bytes_ = 0;
};

}  // namespace vpmm
