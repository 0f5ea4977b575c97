// RecordedStreams (see recorded_streams.hpp).
#include "hooks/recorded_streams.hpp"

#include <algorithm>
#include <cstdio>

#include "hooks/report.hpp"

namespace vpmm {

void RecordedStreams::record(void* ptr, void* stream) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<void*>& v = by_ptr_[ptr];
  if (std::find(v.begin(), v.end(), stream) == v.end()) v.push_back(stream);
  n_.store(by_ptr_.size(), std::memory_order_release);
}

void RecordedStreams::forget(void* ptr) {
  if (n_.load(std::memory_order_acquire) == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  by_ptr_.erase(ptr);
  n_.store(by_ptr_.size(), std::memory_order_release);
}

void* RecordedStreams::free_stream(vpmm_pool* pool, void* ptr, void* own) {
  if (n_.load(std::memory_order_acquire) == 0) return own;
  std::vector<void*> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = by_ptr_.find(ptr);
    if (it == by_ptr_.end()) return own;
    streams.swap(it->second);
    by_ptr_.erase(it);
    n_.store(by_ptr_.size(), std::memory_order_release);
  }
  streams.erase(std::remove(streams.begin(), streams.end(), own), streams.end());
  if (streams.empty()) return own;
  void* target = streams.back();
  streams.pop_back();
  for (void* s : streams) {
    // The pool has no "stream waits for stream" call to offer a hook; a
    // third stream is rare enough to wait for on the CPU.
    vpmm_status st = vpmm_pool_stream_synchronize(pool, s);
    if (st != VPMM_OK && hook_log_enabled(HookLog::kError))
      std::fprintf(stderr, "libvpmm: vpmm_torch_free: waiting for stream %p, recorded on %p: %s\n", s, ptr,
                   vpmm_last_error());
  }
  return target;
}

}  // namespace vpmm
