// Staged transfers: how the bytes of mmap and disk backups move between the
// device and their store. The copy engine fills (or empties) a few pinned
// staging slots while the CPU moves the slot before it to or from the store
// (a parallel host copy for mmap memory, a large pwrite/pread for a file),
// so the copies and the CPU's work overlap, as pinned backups' copies and
// unmaps do in the pause pipeline.
//
// The slots are pinned for the call and unpinned after it, never cached:
// the mmap and disk stores exist to leave no host memory resident.
//
// Part of the pause pipeline (same module): everything runs with the pool
// mutex held, through HandleOps and the PauseKit.
#pragma once

#include <cstdint>
#include <vector>

#include "core/pause/kit.hpp"
#include "core/pause/pipeline.hpp"

namespace vpmm {

// Staging slots: at most this many, of at most kStageSlotBytes each (smaller
// when the largest staged allocation is). Four 32 MiB slots keep the copy
// engine three slots ahead of the CPU and pin 128 MiB for the call.
constexpr size_t kStageSlots = 4;
constexpr uint64_t kStageSlotBytes = 32ull << 20;

class StagingSlots {
 public:
  StagingSlots(HandleOps& ops, PauseKit& kit, const char* call, Stream cs)
      : ops_(ops), kit_(kit), call_(call), cs_(cs) {}
  // Waits for the copies still using a slot, then unpins the slots.
  ~StagingSlots();
  StagingSlots(const StagingSlots&) = delete;
  StagingSlots& operator=(const StagingSlots&) = delete;

  // Slots for `chunks` transfers of at most `slot_bytes`.
  vpmm_status take(uint64_t slot_bytes, uint64_t chunks);
  size_t count() const { return slots_.size(); }
  uint64_t bytes() const { return bytes_; }
  char* slot(size_t i) const { return static_cast<char*>(slots_[i].p); }
  // Blocks until the copy last queued with slot i completed.
  vpmm_status wait(size_t i);
  // Records that the copies queued on the copy stream so far use slot i.
  vpmm_status mark(size_t i);
  // The caller waited for everything queued so far (the resume's final wait).
  void settled() {
    for (EventRef& e : last_use_) e.reset();
  }

 private:
  struct Buffer {
    void* p = nullptr;
    uint64_t size = 0;
  };
  HandleOps& ops_;
  PauseKit& kit_;
  const char* call_;
  Stream cs_;
  uint64_t bytes_ = 0;
  std::vector<Buffer> slots_;
  std::vector<EventRef> last_use_;  // per slot: the copy that uses it, until waited for
};

// One staged target of a pause or resume: the allocation at va and its backup.
struct StagedTarget {
  uint64_t va = 0;
  uint64_t size = 0;
  Backup* backup = nullptr;
};

// The pause side: copies each target out through the slots into its store
// and releases it (HandleOps::release_paused_target) once all its bytes are
// there. A target whose copy, write or release fails stays active and
// whole; the others go on. released[i] tells which were released.
class StagedPause {
 public:
  StagedPause(HandleOps& ops, PauseKit& kit, const char* call, Stream cs, uint64_t slot_bytes,
              const std::vector<StagedTarget>& targets)
      : ops_(ops), kit_(kit), call_(call), cs_(cs), slot_bytes_(slot_bytes), targets_(targets) {}
  // The first failure goes to *result.
  void run(FirstFailure* result, std::vector<bool>* released);

 private:
  HandleOps& ops_;
  PauseKit& kit_;
  const char* call_;
  Stream cs_;
  uint64_t slot_bytes_;
  const std::vector<StagedTarget>& targets_;
};

// The resume side, one target at a time (the resume pipeline maps it first):
// reads its backup through the slots and queues the H2D copies on the copy
// stream; the pipeline's final wait covers them. On failure nothing queued
// for this target may still run when it returns (the caller unmaps it).
class StagedResume {
 public:
  StagedResume(HandleOps& ops, PauseKit& kit, const char* call, Stream cs)
      : ops_(ops), kit_(kit), call_(call), cs_(cs), slots_(ops, kit, call, cs) {}
  // Slots for the staged targets of this resume.
  vpmm_status prepare(uint64_t slot_bytes, const std::vector<StagedTarget>& targets);
  vpmm_status restore(const StagedTarget& t);
  // Everything queued so far completed (the resume pipeline waited for it).
  void settled() { slots_.settled(); }

 private:
  HandleOps& ops_;
  PauseKit& kit_;
  const char* call_;
  Stream cs_;
  StagingSlots slots_;
  uint64_t next_ = 0;  // chunks restored so far: the next one's slot
};

}  // namespace vpmm
