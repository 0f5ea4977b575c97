// Pauser: pause, resume and trim, and the backups they keep.
//
// A tagged allocation owns whole physical handles (the allocator's exact
// mode), so pausing it unmaps and releases exactly its handles and nothing
// else; its region becomes Kind::Paused, which no other path (best fit,
// harvest, trim, holes) ever looks at, so its VA is never handed out. Resume
// creates fresh handles at the same VA. Trim gives back whole handles of free
// memory.
//
// Failure rules: pause is all-or-nothing for the host backups (storage taken
// and the D2H copies complete before anything is unmapped); resume is
// transactional per batch: every allocation it could map gets its backup
// copied back and is committed only after the copies completed; one that
// could not be mapped (out of memory) stays paused with its backup intact.
//
// Owns: the backup machinery (PauseKit: the pinned cache, the stores, the
// copy stream, prepares in flight).
// May call: PoolState, the allocator (its small-object slabs, Phase 0, the
// straddle merges, peaks), the sharer (a pause tells importers). It
// implements HandleOps, which its pipelines (pipeline.hpp) call back through,
// and BackupReleaser, through which PoolState gives a region's backup back.
// Every call is made with the pool mutex held, except prepare_backups, which
// takes it itself (it pins with the mutex released).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/alloc/allocator.hpp"
#include "core/pause/kit.hpp"
#include "core/pause/pipeline.hpp"
#include "core/share/sharer.hpp"
#include "core/state/pool_state.hpp"
#include "core/state/pool_mutex.hpp"

namespace vpmm {

// A pause flag of the library's own, past the public VPMM_PAUSE_* bits: the
// backups this pause takes new go to the disk store, in the pool's backup
// directory (set_backup_dir, else VPMM_BACKUP_DIR), whatever store their
// allocations chose; backups the allocations already hold (retained, an
// earlier pause's file) are written in place as always. The C API sets it
// when a ledger's host budget refused the pause and the member allowed the
// disk as its fallback (docs/ledger.md, "Host memory of backups"): the pool
// only does what it is told.
constexpr uint32_t kPauseBackupsToDisk = 1u << 31;

class Pauser final : private StateRefs, private HandleOps, private BackupReleaser {
 public:
  Pauser(PoolState& st, Allocator& alloc, Sharer& sharer, PoolMutex& mu);
  Pauser(const Pauser&) = delete;
  Pauser& operator=(const Pauser&) = delete;

  // Pause/resume by tag (NULL = every tag); see vpmm.h for the contract.
  // *n_changed (may be NULL) receives, on success, how many regions changed
  // state (0: nothing matched, still VPMM_OK). flags: VPMM_PAUSE_* / _RESUME_*,
  // and for a pause kPauseBackupsToDisk.
  vpmm_status pause(const char* tag, uint32_t flags, uint64_t* n_changed);
  // *short_bytes: the size of the allocation that ran out of memory (0: none).
  vpmm_status resume(const char* tag, uint32_t flags, uint64_t* n_changed, uint64_t* short_bytes);
  vpmm_status trim(uint64_t keep_bytes);
  // Releases whole handles of free regions until free bytes <= keep (trim's
  // work; also a resume's and a lower limit's).
  vpmm_status release_free(uint64_t keep_bytes, bool wait);
  // A new hard limit: free memory is trimmed to fit it, else WRONG_STATE.
  vpmm_status set_limit(uint64_t bytes);
  // Pins ahead the host buffers a pause of `tag` would back up into (see
  // vpmm_pool_prepare_backups); *cached = pinned bytes cached after it.
  // Takes the pool mutex itself.
  vpmm_status prepare_backups(const char* tag, uint64_t* cached);
  // A pause waits here until no prepare_backups is pinning.
  void wait_prepares(PoolLock& lock) { kit_->wait_prepares(lock); }

  // The host backup of the paused allocation containing ptr (vpmm_pool_backup_lookup).
  vpmm_status backup_lookup(const void* ptr, void** host, uint64_t* bytes);
  vpmm_status tag_stats(const char* tag, vpmm_tag_stats* out);
  // The id of the disk-store directory of a new allocation: `dir`, else the
  // pool's default (set_backup_dir), else VPMM_BACKUP_DIR; the C API puts it
  // in the allocation's flags (core/pause/stores/store_table.hpp).
  vpmm_status backup_dir_id(const char* call, const char* dir, uint32_t* id);
  vpmm_status set_backup_dir(const char* dir);  // NULL or "": none

  // A user's stream handle that is the copy stream is a stale one.
  bool is_copy_stream(Stream s) const { return kit_->is_copy_stream(s); }
  void fill_stats(vpmm_stats* s) const;  // the backup fields
  // The pool's end, after every backup went back: the buffers, the copy stream.
  void shutdown() { kit_.reset(); }
  // What PoolState gives a region's backup back through.
  BackupReleaser& backup_releaser() { return *this; }

 private:
  // HandleOps (pipeline.hpp documents each).
  const Region& region(uint64_t va) override { return m_.find(va)->second; }
  vpmm_status record_event(Stream s, EventRef* out) override { return st_.record_event(s, out); }
  vpmm_status release_paused_target(const char* call, uint64_t va, Backup* backup) override;
  vpmm_status map_paused_target(const Region& r, uint64_t va, std::vector<Mapping>* out) override;
  void undo_resume_target(const Region& r, uint64_t va, const std::vector<Mapping>& hs, size_t n_mapped) override;
  void commit_resumed(uint64_t va, const std::vector<Mapping>& handles) override;
  // BackupReleaser.
  void release_backup(Backup* b) override;

  // Capacity charges of a live or paused region (pause gives them back,
  // resume takes them again).
  void release_charges(const Region& r);
  vpmm_status retake_charges(const Region& r);
  // What must complete before region r may be unmapped: its allocating
  // stream's work so far (recorded once per stream in *recorded), and for a
  // slab the frees of its blocks on other streams.
  vpmm_status last_uses(const Region& r, std::vector<Stream>* recorded, std::vector<EventRef>* out);

  TagTable& tags_;
  Allocator& alloc_;
  Sharer& sharer_;
  PoolMutex& mu_;
  std::unique_ptr<PauseKit> kit_;  // host buffers, stores, copy stream, prepares in flight
};

}  // namespace vpmm
