// PauseKit: what pause and resume need besides the allocations themselves.
// It owns the pinned buffers (PinnedCache), the stores backups live in
// (StoreTable: pinned, mmap, disk), the copy stream the pipelines queue
// their copies on (made on first use), and the count of prepare_backups
// calls pinning ahead without the pool mutex, which a pause waits for. The
// pipelines reach the backend for copies and waits through it, and the
// allocations' handles through the pauser's HandleOps.
//
// Owned by the Pauser; every call is made with the pool mutex held, except
// pause_waiting() (an atomic, read by the prepares pinning unlocked).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "backend/backend.hpp"
#include "core/pause/stores/pinned_cache.hpp"
#include "core/pause/stores/store_table.hpp"
#include "core/state/pool_mutex.hpp"

namespace vpmm {

class PauseKit {
 public:
  PauseKit(Backend& b, HostServices& host, uint64_t keep_limit, uint64_t pinned_limit)
      : backend_(b), pinned_(b, host, keep_limit, pinned_limit), stores_(b, host, pinned_) {}
  ~PauseKit() {
    if (have_copy_stream_) backend_.stream_destroy(copy_stream_);
  }
  PauseKit(const PauseKit&) = delete;
  PauseKit& operator=(const PauseKit&) = delete;

  Backend& backend() { return backend_; }
  PinnedCache& pinned() { return pinned_; }
  const PinnedCache& pinned() const { return pinned_; }
  StoreTable& stores() { return stores_; }
  const StoreTable& stores() const { return stores_; }

  vpmm_status copy_stream(Stream* out) {
    if (!have_copy_stream_) {
      vpmm_status st = backend_.stream_create(&copy_stream_);
      if (st != VPMM_OK) return st;
      have_copy_stream_ = true;
    }
    *out = copy_stream_;
    return VPMM_OK;
  }
  // A user's stream handle that is the copy stream is a stale one.
  bool is_copy_stream(Stream s) const { return have_copy_stream_ && s == copy_stream_; }

  // prepare_backups pins with the pool mutex released; a pause waits until
  // none does, rather than pinning the same bytes a second time. While a
  // pause waits, the prepares stop after the buffer each is pinning
  // (pause_waiting(), read without the pool mutex) and the pause pins what
  // is left itself: a pause never waits for more than one buffer's pinning,
  // whatever tag the prepares pin for, and nothing is pinned twice.
  void begin_prepare() { ++preparing_; }
  void end_prepare() {
    --preparing_;
    prepared_cv_.notify_all();
  }
  void wait_prepares(PoolLock& pool_lock) {
    if (preparing_ == 0) return;
    pauses_waiting_.fetch_add(1, std::memory_order_relaxed);
    prepared_cv_.wait(pool_lock, [&] { return preparing_ == 0; });
    pauses_waiting_.fetch_sub(1, std::memory_order_relaxed);
  }
  bool pause_waiting() const { return pauses_waiting_.load(std::memory_order_relaxed) > 0; }

 private:
  Backend& backend_;
  PinnedCache pinned_;
  StoreTable stores_;  // after pinned_: its pinned backups go back there
  Stream copy_stream_ = nullptr;
  bool have_copy_stream_ = false;
  int preparing_ = 0;
  std::atomic<int> pauses_waiting_{0};
  std::condition_variable_any prepared_cv_;
};

}  // namespace vpmm
