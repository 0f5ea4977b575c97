// RecordedStreams (see recorded_streams.hpp).
#include "hooks/recorded_streams.hpp"

#include <algorithm>
#include <cstdio>

#include "hooks/report.hpp"

namespace vpmm {

void RecordedStreams::record(void* ptr, void* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto ins = by_ptr_.try_emplace(ptr);
  if (ins.second) held_[bucket(ptr)].fetch_add(1, std::memory_order_release);
  std::vector<void*>& v = ins.first->second;
  if (std::find(v.begin(), v.end(), stream) == v.end()) v.push_back(stream);
}

void RecordedStreams::forget(void* ptr) {
  if (!may_hold(ptr)) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (by_ptr_.erase(ptr)) held_[bucket(ptr)].fetch_sub(1, std::memory_order_relaxed);
}

void* RecordedStreams::free_stream(vpmm_pool* pool, void* ptr, void* own) {
  if (!may_hold(ptr)) return own;
  std::vector<void*> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_ptr_.find(ptr);
    if (it == by_ptr_.end()) return own;
    streams.swap(it->second);
    by_ptr_.erase(it);
    held_[bucket(ptr)].fetch_sub(1, std::memory_order_relaxed);
  }
  streams.erase(std::remove(streams.begin(), streams.end(), own), streams.end());
  if (streams.empty()) return own;
  // PyTorch orders its own uses of the tensor before the free by `own`
  // alone: its kernels queued on `own` may still write the memory. A free
  // moved to t must come after them, or the pool hands the memory to a third
  // stream once t's work completes while they are still queued. t waits for
  // them on the GPU (one event; the CPU does not wait).
  void* target = streams.back();
  streams.pop_back();
  if (hook_stream_wait(pool, target, own) != VPMM_OK) {
    // t is gone (destroyed before the free): the free stays on `own`, after
    // the other recorded streams, the caller's fallback.
    streams.push_back(target);
    target = own;
  }
  for (void* s : streams) {
    const vpmm_status w = hook_stream_wait(pool, target, s);
    // INVALID_ARGUMENT: the backend no longer knows it (destroyed meanwhile;
    // as before, nothing can wait for a destroyed stream's last work).
    if (w == VPMM_OK || w == VPMM_ERR_INVALID_ARGUMENT) continue;
    // The wait itself failed: waiting on the CPU is all that is left.
    vpmm_status st = vpmm_pool_stream_synchronize(pool, s);
    if (st != VPMM_OK && hook_log_enabled(HookLog::kError))
      std::fprintf(stderr, "libvpmm: vpmm_torch_free: waiting for stream %p, recorded on %p: %s\n", s, ptr,
                   vpmm_last_error());
  }
  return target;
}

}  // namespace vpmm
